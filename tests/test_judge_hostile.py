"""Attacks on the judge, each through judge.judge_programs as the project calls it: the program (or its compilation)
must not read, create or delete a file outside its run folder, connect anywhere, touch another process, or change
what a neighbour in its translation unit does."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import judge

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "TOPSECRET42"
HEADERS = ["#include <fcntl.h>", "#include <unistd.h>", "#include <signal.h>", "#include <pthread.h>",
           "#include <sys/ptrace.h>", "#include <sys/socket.h>", "#include <netinet/in.h>", "#include <arpa/inet.h>"]


def sans(*lines: str) -> str:
    """C++ lines -> one SansType program line (`$` ends a line), with the headers the attacks need."""
    return " $ ".join([*HEADERS, *lines])


def contained_unless(*attempts: str) -> str:
    """A program that prints `escaped` if any attempt (a C++ expression) is true, else `contained`."""
    checks = " ".join(f"if ( {attempt} ) escaped = 1 ;" for attempt in attempts)
    return sans("int main () {", "close ( 0 ) ; int escaped = 0 ;", checks,  # closing stdin frees a descriptor
                "cout << ( escaped ? \"escaped\" : \"contained\" ) ; return 0 ; }")


@pytest.fixture
def outside():
    """A folder outside the judge's, open to everyone (uid 65534 too), with a secret and a file to delete."""
    folder = tempfile.mkdtemp(prefix="hostile-", dir="/tmp")
    os.chmod(folder, 0o777)
    for name, text in (("secret.txt", SECRET + "\n"), ("victim.txt", "keep me\n")):
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(folder, name), 0o666)
    yield folder
    shutil.rmtree(folder)


def verdict(program: str, stdin: str = "", expected: str = "contained") -> dict:
    return judge.judge_programs([program], [stdin], [expected], cache=False)[0]


def test_files_outside_the_run_folder_are_out_of_reach(quick_limits, outside):
    """Closing stdin frees a descriptor; still nothing outside is read, created or deleted."""
    secret, created, victim = (os.path.join(outside, name) for name in ("secret.txt", "new.txt", "victim.txt"))
    program = sans("int main () {", "close ( 0 ) ; char text [ 64 ] = { 0 } ;",
                   f"int fd = open ( \"{secret}\" , O_RDONLY ) ; if ( fd >= 0 ) read ( fd , text , 60 ) ;",
                   "cout << text ;",
                   f"int out = open ( \"{created}\" , O_CREAT | O_WRONLY , 0666 ) ;",
                   "if ( out >= 0 ) write ( out , \"x\" , 1 ) ;",
                   f"unlink ( \"{victim}\" ) ; cout << \"contained\" ; return 0 ; }}")
    result = verdict(program)
    assert SECRET not in json.dumps(result)
    assert not os.path.exists(created) and os.path.exists(victim)


def test_no_connection_to_a_local_listener(quick_limits):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        program = contained_unless(
            "[ ] ( ) { int s = socket ( AF_INET , SOCK_STREAM , 0 ) ; sockaddr_in a { } ; a . sin_family = AF_INET ;"
            f" a . sin_port = htons ( {port} ) ; a . sin_addr . s_addr = inet_addr ( \"127.0.0.1\" ) ;"
            " return s >= 0 && connect ( s , ( sockaddr * ) & a , sizeof a ) == 0 ; } ( )")
        assert verdict(program)["verdict"] == "correct"
        with pytest.raises(socket.timeout):
            listener.accept()


def test_the_compiler_sees_no_file_outside_its_folder(quick_limits, outside):
    """Neither `.incbin` nor `#include` brings another file's bytes into a binary or an error message."""
    secret = os.path.join(outside, "secret.txt")
    incbin = (f"asm ( \".section .rodata\\n.global blob\\nblob: .incbin \\\"{secret}\\\"\\n.byte 0\\n.text\" ) ; $ "
              "extern \"C\" const char blob [ ] ; $ int main () { cout << blob ; return 0 ; }")
    include = f"#include \"{secret}\" $ int main () {{ return 0 ; }}"
    results = judge.judge_programs([incbin, include], ["", ""], ["", ""], cache=False)
    assert SECRET not in json.dumps(results)
    assert [r["verdict"] for r in results] == ["compile_error", "compile_error"]


def test_no_process_fork_thread_exec_or_ptrace(quick_limits):
    program = contained_unless(
        "fork ( ) >= 0",
        "[ ] ( ) { pthread_t t ; return pthread_create ( & t , nullptr ,"
        " [ ] ( void * ) -> void * { return nullptr ; } , nullptr ) == 0 ; } ( )",
        "ptrace ( PTRACE_ATTACH , getppid ( ) , 0 , 0 ) == 0",
        "execl ( \"/bin/sh\" , \"sh\" , \"-c\" , \"true\" , ( char * ) 0 ) == 0",
        "system ( \"true\" ) == 0")
    assert verdict(program)["verdict"] == "correct"


def test_nothing_to_reach_through_proc_descriptors_or_the_disk(quick_limits):
    """No /proc, no descriptor but stdin, stdout and stderr (no pipe to the judge), nowhere to write a file."""
    program = contained_unless(
        "open ( \"/proc/self/environ\" , O_RDONLY ) >= 0",
        "open ( \"/proc/1/cmdline\" , O_RDONLY ) >= 0",
        "[ ] ( ) { for ( int fd = 3 ; fd < 1024 ; fd ++ ) if ( fcntl ( fd , F_GETFD ) >= 0 ) return true ;"
        " return false ; } ( )",
        "[ ] ( ) { int p [ 2 ] ; return socketpair ( AF_UNIX , SOCK_STREAM , 0 , p ) == 0 ; } ( )",
        "open ( \"fill\" , O_CREAT | O_WRONLY , 0666 ) >= 0",
        "open ( \"/tmp/fill\" , O_CREAT | O_WRONLY , 0666 ) >= 0")
    assert verdict(program)["verdict"] == "correct"


def bystander() -> subprocess.Popen:
    """A process of uid 65534's, the uid programs run as, that no program may kill."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to start a process as uid 65534")
    return subprocess.Popen(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "sleep", "30"])


def test_kill_minus_one_reaches_only_the_program(quick_limits):
    other = bystander()
    try:
        program = sans("int main () {", "kill ( -1 , SIGKILL ) ; cout << \"contained\" ; return 0 ; }")
        verdict(program)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_as_an_ordinary_user_nothing_is_deleted_or_killed(tmp_path):
    """The judge run by a user (uid 65534): the program can neither delete that user's files nor kill the judge."""
    other = bystander()
    home = tempfile.mkdtemp(prefix="hostile-user-", dir="/tmp")
    try:
        os.chown(home, 65534, 65534)
        victim = os.path.join(home, "victim.txt")
        with open(victim, "w") as f:
            f.write("keep me\n")
        os.chown(victim, 65534, 65534)
        programs = [sans("int main () {", f"unlink ( \"{victim}\" ) ; cout << \"contained\" ; return 0 ; }}"),
                    sans("int main () {", "kill ( -1 , SIGKILL ) ; cout << \"contained\" ; return 0 ; }")]
        script = ("import json, sys; import judge; judge.COMPILE_SECONDS, judge.RUN_WALL_SECONDS, "
                  "judge.RUN_CPU_SECONDS = 4, 2, 1; programs = json.loads(sys.argv[1]); "
                  "print(json.dumps(judge.judge_programs(programs, ['', ''], ['contained'] * 2, cache=False)))")
        user = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable,
                               "-c", script, json.dumps(programs)], cwd=REPO, capture_output=True, text=True,
                              timeout=60, env={**os.environ, "TMPDIR": home, "HOME": home, "PYTHONPATH": REPO})
        assert user.returncode == 0, user.stderr[-500:]
        assert [v["verdict"] for v in json.loads(user.stdout)] == ["correct", "correct"]
        assert os.path.exists(victim) and other.poll() is None
    finally:
        other.kill()
        other.wait()
        shutil.rmtree(home)


EVIL_NEIGHBOUR = ("int main () { asm ( \".intel_syntax noprefix\\n.pushsection .text\\nevil_hook: mov edi, 7\\n"
                  "mov eax, 231\\nsyscall\\n.popsection\\n.pushsection .init_array\\n.quad evil_hook\\n.popsection\\n"
                  ".att_syntax\" ) ; return 0 ; }")


def test_a_verdict_does_not_depend_on_its_company(quick_limits):
    """An `.init_array` entry by asm would end every binary of the unit before main: such a program compiles alone."""
    good = "int main () { $ cout << 42 ; $ return 0; }"
    together = judge.judge_programs([good, EVIL_NEIGHBOUR], ["", ""], ["42", ""], cache=False, jobs=1)  # one unit
    assert together[0]["verdict"] == "correct"
    for reach in ("asm ( 0 ) ;", "__asm__ ( 0 ) ;", "__asm ( 0 ) ;", "int x __attribute__ ( ( section ( 0 ) ) ) ;",
                  "[ [ gnu :: constructor ] ] int x ;", "cout << __LINE__ ;", "sansprog_0 :: main ( ) ;"):
        assert not judge.can_share_unit(f"int main () {{ {reach} return 0; }}"), reach


def test_catching_sigxcpu_is_still_a_timeout(quick_limits, monkeypatch):
    """Labelled by the CPU time used, not by the signal that ended it."""
    monkeypatch.setattr(judge, "RUN_WALL_SECONDS", 4)  # past the hard CPU limit (2 s), so the CPU limit ends it
    program = sans("int main () {", "signal ( SIGXCPU , SIG_IGN ) ; while ( true ) { } }")
    start = time.monotonic()
    assert verdict(program)["verdict"] == "timeout"
    assert time.monotonic() - start < 4 + 3  # ended by the CPU limit, not a hang
