"""A sandboxed judge for untrusted C++ programs: compile with g++, run on inputs, compare what they print. Standard
library only (and g++ on PATH), so this one file can be copied into another project.

    import judge
    # SansType: one program per line (`$` ends a source line, `~` indents), one stdin and one expected stdout each.
    judge.judge_programs(["int main () { $ int x ; $ cin >> x ; $ cout << x + 1 ; $ return 0; }"],
                         stdins=["41"], expected=["42"])         # [{"verdict": "correct", "stdout": "42"}]
    # SPoC: whole programs, each judged on every (stdin, expected stdout) case of its problem.
    judge.judge_spoc_programs(["int main ( ) { $ ~ int n ; $ ~ cin >> n ; $ ~ cout << n ; $ }"],
                              cases=[[("1", "1"), ("7", "7")]])          # [{"verdict": "correct"}]
    judge.compiles(programs)      # SPoC's error detector g (Appendix E): does each program compile?
    judge.to_cpp(program)         # the C++ file a SansType line stands for

Verdicts: correct, wrong_output, compile_error (with the first error's line), runtime_error (a signal, a non-zero
exit or too much output) or timeout. `progress`, if given, is called once per program judged (from threads).
"""

import atexit
import functools
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

# Programs come from a model, so they are hostile: every compilation and run is time-limited, killed with its process
# group, and goes through a C launcher (SANDBOX_C): new namespaces (no network, no other process in sight), an empty
# read-only root (the compiler's holds the toolchain and its folder), uid 65534, caps on CPU, memory and output, and
# for runs a seccomp filter against new processes, sockets and ptrace. Where Linux cannot isolate, the judge refuses.
# g++ spends most of its time parsing headers, so self-contained `int main () {...}` programs share a translation
# unit, each in its own namespace, behind a dispatcher `main` (argv[1] names one).

CPP_PRELUDE = "#include <iostream>\n#include <string>\n#include <algorithm>\nusing namespace std;\n"
GXX = ["g++", "-std=gnu++17", "-O0", "-w", "-static", "-pipe"]  # static: a jailed run may not open .so files
COMPILE_SECONDS = 20         # one program; a batch gets 0.2 s more per program
COMPILE_MEMORY_MB = 2048
RUN_CPU_SECONDS = 2
RUN_WALL_SECONDS = 5
RUN_MEMORY_MB = 512
RUN_OUTPUT_KB = 1024
# JUDGE_UNCONFINED=1 runs programs without namespaces (limits, seccomp, uid 65534 if root) where unshare(2) fails.
UNCONFINED = os.environ.get("JUDGE_UNCONFINED") == "1"
BATCH_SIZE = 100             # at most this many programs per translation unit

SANDBOX_C = r"""
/* sandbox CPU_S MEMORY_MB FILE_KB tool|jail [--see=DIR]... PROGRAM [ARGS...]
   Both: cap CPU time, memory and file size; run in new mount, network, PID, IPC and UTS namespaces (and a user
   namespace when not root), on an empty read-only root, as uid 65534; the caller is never reachable.
   tool: the root holds the toolchain (/usr, /bin, /lib*) and each DIR read-only, the working folder writable;
         PROGRAM is found on PATH (the compiler).
   jail: the root holds nothing; a seccomp filter denies new processes, threads, sockets and ptrace; the program's
         stderr goes to /dev/null and it runs from its already-open binary. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
static int report = 2;
static void fail(const char *what) { dprintf(report, "sandbox: %s failed: %s\n", what, strerror(errno)); _exit(122); }
static void limit(int resource, rlim_t soft, rlim_t hard) {
    struct rlimit r = {soft, hard};
    if (setrlimit(resource, &r) != 0) fail("setrlimit");
}
static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd) != 0) fail(path);
}
/* Not root: a user namespace of our own, in which we are 65534 (exec then drops the namespace's capabilities). */
static void enter_namespaces(void) {
    int user = getuid() != 0;
    uid_t uid = getuid(); gid_t gid = getgid();
    if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | (user ? CLONE_NEWUSER : 0)))
        fail("isolating (unshare)");
    if (!user) return;
    char map[64];
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "65534 %u 1", uid); write_file("/proc/self/uid_map", map);
    snprintf(map, sizeof map, "65534 %u 1", gid); write_file("/proc/self/gid_map", map);
}
static void make_dirs(char *path) {  /* mkdir -p, in the new root */
    for (char *slash = path + 1; ; slash++) {
        if (*slash != '/' && *slash) continue;
        char keep = *slash; *slash = 0;
        if (mkdir(path, 0755) && errno != EEXIST) fail("mkdir");
        if (!(*slash = keep)) return;
    }
}
/* Show `path` at the same place under `root`: a symbolic link as itself, a folder or file by a bind mount. */
static void show(const char *root, const char *path, int writable) {
    char target[4096], link[4096];
    struct stat st;
    if (lstat(path, &st)) return;  /* /lib32 and the like exist on some systems only */
    snprintf(target, sizeof target, "%s%s", root, path);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n > 0) { link[n] = 0; if (symlink(link, target)) fail("symlink"); return; }
    make_dirs(target);
    if (!S_ISDIR(st.st_mode)) { rmdir(target); close(open(target, O_CREAT | O_WRONLY, 0644)); }
    if (mount(path, target, NULL, MS_BIND | (writable ? 0 : MS_REC), NULL)) fail("bind mount");  /* not ./root */
    if (!writable && mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, NULL)) fail("remount");
}
/* A fresh tmpfs at ./root becomes the root and the old one is detached: nothing else is reachable. */
static void change_root(int tool, char **see) {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) fail("private mounts");
    if (mkdir("root", 0755) && errno != EEXIST) fail("mkdir");
    if (mount("tmpfs", "root", "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")) fail("tmpfs root");
    if (tool) {
        const char *toolchain[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/dev/null"};
        for (size_t i = 0; i < sizeof toolchain / sizeof *toolchain; i++) show("root", toolchain[i], 0);
        for (; *see; see++) show("root", *see, 0);
        show("root", cwd, 1);
    }
    if (chdir("root") || syscall(SYS_pivot_root, ".", ".") || umount2(".", MNT_DETACH)) fail("pivot_root");
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL)) fail("read-only root");
    if (chdir(tool ? cwd : "/")) fail("chdir");
}
static void drop_root(void) {
    if (getuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534))) fail("dropping root");
}
#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "the seccomp filter knows x86_64 and aarch64 only"
#endif
#define DENY(name) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_##name, 0, 1), \
                   BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)
/* Deny what namespaces do not: making processes or threads, sockets, tracing, new namespaces, in-memory binaries. */
static void seccomp_filter(void) {
    struct sock_filter program[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),  /* x32's numbers, the same calls by another name */
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
#ifdef __NR_fork
        DENY(fork), DENY(vfork),
#endif
        DENY(clone), DENY(clone3), DENY(socket), DENY(socketpair), DENY(ptrace), DENY(process_vm_readv),
        DENY(process_vm_writev), DENY(unshare), DENY(setns), DENY(memfd_create), DENY(setsid), DENY(setpgid),
        DENY(io_uring_setup), DENY(bpf), DENY(userfaultfd), DENY(perf_event_open),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog filter = {sizeof program / sizeof *program, program};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter))
        fail("seccomp");
}
/* PID 1 of the namespace: start the program, reap everything, and pass the program's end to the launcher. The
   CPU limit is judged by the time used, not the signal, since a program may catch SIGXCPU. */
static int init(char **argv, int tool, int program, rlim_t cpu) {
    pid_t child = fork();
    if (child < 0) fail("fork");
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        drop_root();
        if (tool) { execvp(argv[0], argv); fail("exec"); }
        seccomp_filter();
        char *empty_environment[] = {NULL};
        fexecve(program, argv, empty_environment);
        fail("exec");
    }
    int status;
    struct rusage used;
    pid_t pid;
    while ((pid = wait4(-1, &status, 0, &used)) != child)
        if (pid < 0 && errno != EINTR) fail("wait");
    long cpu_ms = (used.ru_utime.tv_sec + used.ru_stime.tv_sec) * 1000 +
                  (used.ru_utime.tv_usec + used.ru_stime.tv_usec) / 1000;
    return !tool && cpu_ms >= (long)cpu * 1000 - 20 ? SIGXCPU : status;
}
static void end_as(int status) {  /* end as the program ended */
    if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
    signal(WTERMSIG(status), SIG_DFL);
    raise(WTERMSIG(status));
    _exit(128 + WTERMSIG(status));
}
int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: sandbox CPU_S MEMORY_MB FILE_KB tool|jail ... PROGRAM ...\n"); return 122; }
    rlim_t cpu = atol(argv[1]), memory = (rlim_t)atol(argv[2]) << 20, file = (rlim_t)atol(argv[3]) << 10;
    int tool = strcmp(argv[4], "tool") == 0, confined = getenv("SANDBOX_UNCONFINED") == NULL, program = -1;
    char *see[64] = {NULL};
    argv += 5;
    for (int n = 0; *argv && strncmp(*argv, "--see=", 6) == 0 && n < 63; argv++) see[n++] = *argv + 6;
    limit(RLIMIT_CPU, cpu, cpu + 1);  /* SIGXCPU at the soft limit, SIGKILL one second later */
    limit(RLIMIT_AS, memory, memory);
    limit(RLIMIT_FSIZE, file, file);  /* SIGXFSZ past the cap, also for stdout redirected to a file */
    limit(RLIMIT_CORE, 0, 0);
    if (!tool) {
        program = open(argv[0], O_RDONLY | O_CLOEXEC);  /* opened while we may still see it */
        int null = open("/dev/null", O_WRONLY);
        report = fcntl(2, F_DUPFD_CLOEXEC, 3);  /* the program's stderr goes to /dev/null: anything on ours is ours */
        if (program < 0 || null < 0 || report < 0 || dup2(null, 2) < 0) fail("open");
        close(null);
    } else if (getuid() == 0 && chown(".", 65534, 65534)) fail("chown");  /* the compiler writes here as 65534 */
    if (!confined) end_as(init(argv, tool, program, cpu));
    int ends[2];
    if (pipe2(ends, O_CLOEXEC)) fail("pipe");
    enter_namespaces();
    pid_t first = fork();
    if (first < 0) fail("fork");
    if (first == 0) {  /* PID 1 of the new namespace */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        change_root(tool, see);
        int status = init(argv, tool, program, cpu);
        write(ends[1], &status, sizeof status);
        _exit(0);
    }
    close(ends[1]);
    int status, first_status;
    ssize_t got = read(ends[0], &status, sizeof status);
    waitpid(first, &first_status, 0);
    end_as(got == sizeof status ? status : first_status);  /* no status: PID 1 failed or was killed */
}
"""


@dataclass
class RunResult:
    status: str        # ok | compile_error | runtime_error | timeout
    stdout: str = ""
    error: str = ""    # the compiler's first error, or why the run failed


@dataclass
class _Build:          # where a program's binary is, and how to call it
    binary: str | None
    args: list[str]
    error: str = ""


@dataclass(frozen=True)
class _Recipe:         # how a dataset's program lines become C++ and are compiled
    prelude: str       # source text before the program
    body: Callable[[str], str]  # program line -> C++ source
    gxx: tuple


def to_cpp(program: str) -> str:
    """SansType code line -> a whole C++ source file."""
    return CPP_PRELUDE + program_body(program)


def program_body(program: str) -> str:
    return program.replace("~", " ").replace("$", "\n") + "\n"


SANSTYPE = _Recipe(CPP_PRELUDE, program_body, tuple(GXX))
_RUN_CACHE: dict[tuple[str, str], RunResult] = {}


def run_programs(programs: list[str], stdins: list[str], progress: Callable[[], None] | None = None,
                 jobs: int | None = None, cache: bool = True, share_units: bool = True) -> list[RunResult]:
    """Compile and run programs[i] on stdins[i] on `jobs` cores (all), remembering results per (program, stdin).
    Tests only: cache=False runs all again, share_units=False compiles each alone (the slow reference)."""
    if len(programs) != len(stdins):
        raise ValueError(f"{len(programs)} programs but {len(stdins)} inputs")
    inputs_of, results = {}, {}
    for program, stdin in dict.fromkeys(zip(programs, stdins)):
        if not (cache and (program, stdin) in _RUN_CACHE):
            inputs_of.setdefault(program, []).append(stdin)

    def run_all(program: str, build: _Build, workdir: str):
        for stdin in inputs_of[program]:
            rundir = tempfile.mkdtemp(dir=workdir)
            results[program, stdin] = _run(build, stdin, rundir)
            shutil.rmtree(rundir)
            if progress:
                progress()

    _judge_in_units(list(inputs_of), lambda p: share_units and can_share_unit(p), SANSTYPE, jobs, run_all)
    if cache:
        _RUN_CACHE.update(results)
    return [results.get(k) or _RUN_CACHE[k] for k in zip(programs, stdins)]


def sanstype_compiles(programs: list[str]) -> list[bool]:
    """Whether each SansType program compiles (and links), built in shared units as run_programs builds them."""
    built = {}
    _judge_in_units(list(dict.fromkeys(programs)), can_share_unit, SANSTYPE, None,
                    lambda program, build, workdir: built.__setitem__(program, build.binary is not None))
    return [built[program] for program in programs]


def judge_programs(programs: list[str], stdins: list[str], expected: list[str], **kwargs) -> list[dict]:
    """One verdict per program: correct when it compiles, exits normally and its stripped stdout is the gold one."""
    return [{"verdict": "correct" if r.stdout.strip() == gold.strip() else "wrong_output", "stdout": r.stdout[:200]}
            if r.status == "ok" else {"verdict": r.status, "error": r.error}
            for r, gold in zip(run_programs(programs, stdins, **kwargs), expected, strict=True)]


def _judge_in_units(programs: list[str], shareable, recipe: _Recipe, jobs: int | None, judge_program):
    """Build `programs` (distinct) on `jobs` threads, those `shareable` in shared units; judge_program() each."""
    jobs = jobs or os.cpu_count() or 1
    _sandbox_binary()  # compiled once, here, not by two threads at the same time
    shared = [p for p in programs if shareable(p)]
    alone = set(programs) - set(shared)
    # chunks of at most BATCH_SIZE, as many as a multiple of `jobs`, so that every core stays busy
    n_chunks = -(-len(shared) // (BATCH_SIZE * jobs)) * jobs
    units = [[p] for p in programs if p in alone] + [c for c in (shared[i::n_chunks] for i in range(n_chunks)) if c]

    def build_and_judge(unit: list[str], workdir: str):
        os.makedirs(workdir)
        builds = _build_unit(unit, workdir, recipe)
        for program in unit:
            judge_program(program, builds[program], workdir)
        shutil.rmtree(workdir)  # binaries are large (static): free the disk as we go

    with tempfile.TemporaryDirectory(prefix="judge-") as workdir, ThreadPoolExecutor(jobs) as pool:
        list(pool.map(build_and_judge, units, [os.path.join(workdir, f"unit{i}") for i in range(len(units))]))


# --- which programs may share a translation unit -----------------------------------------
_MAIN_HEAD = re.compile(r"\s*int\s+main\s*\(\s*\)\s*\{")
_OPENERS, _CLOSERS = "([{", ")]}"
# asm and attributes (a `section`, a `constructor`) reach other programs' code; __LINE__, __COUNTER__ and the
# namespaces' names differ with the company
_SHARED_UNIT_REACH = re.compile(r"\b(?:asm|__asm|_Pragma|sansprog_\w*|__\w*__)\b|\[\s*\[")
_LITERAL = re.compile(r"""(R?)(["'])(?:\\[\s\S]|(?!\2)[^\\\n])*\2""")  # a string or character literal, R: raw


def can_share_unit(program: str, body=program_body) -> bool:
    """True for exactly one `int main () { ... }` with (), [] and {} nested, and no preprocessor, comments,
    backslashes, digraphs, raw strings, asm, attributes or names of the unit's own: in a namespace, it can neither
    change how its neighbours compile or run nor tell that they are there."""
    # each literal as 0, so that its brackets do not count; a raw or unterminated one leaves its quotes
    code = _LITERAL.sub(lambda literal: literal[0] if literal[1] else "0", body(program))
    if "'" in code or '"' in code or not _MAIN_HEAD.match(code) or _SHARED_UNIT_REACH.search(code):
        return False
    if any(bad in code for bad in ("#", "//", "/*", "\\", "<%", "%>", "<:", ":>", "%:", "??")):
        return False
    stack = []
    for i, ch in enumerate(code):
        if ch in _OPENERS:
            stack.append(ch)
        elif ch in _CLOSERS:
            if not stack or _OPENERS.index(stack.pop()) != _CLOSERS.index(ch):
                return False
            if ch == "}" and not stack:  # main's closing brace must end the program
                return code[i + 1:].strip() == ""
    return False


# --- building ----------------------------------------------------------------------------
def _build_unit(unit: list[str], workdir: str, recipe: _Recipe = SANSTYPE) -> dict[str, _Build]:
    """Compile a unit's programs together, taking out those whose lines hold an error until the rest compiles."""
    if len(unit) == 1:
        return {unit[0]: _build_alone(unit[0], workdir, recipe)}
    builds, pending = {}, list(unit)
    while pending:
        source, spans = _shared_source(pending, recipe)
        binary, errors = _compile(source, tempfile.mkdtemp(dir=workdir), COMPILE_SECONDS + 0.2 * len(pending),
                                  recipe.gxx)
        if binary:
            builds.update({p: _Build(binary, [str(slot)]) for slot, p in enumerate(pending)})
            break
        first_error = {}
        for line, message in errors:
            for slot, (start, end) in enumerate(spans):
                if start <= line < end:
                    first_error.setdefault(slot, f"line {line - start + 1}: {message}")
        if not first_error:  # a link error, a timeout: compile each alone
            builds.update({p: _build_alone(p, tempfile.mkdtemp(dir=workdir), recipe) for p in pending})
            break
        builds.update({pending[slot]: _Build(None, [], error) for slot, error in first_error.items()})
        pending = [p for slot, p in enumerate(pending) if slot not in first_error]
    return builds


def _build_alone(program: str, workdir: str, recipe: _Recipe = SANSTYPE) -> _Build:
    binary, errors = _compile(recipe.prelude + recipe.body(program), workdir, COMPILE_SECONDS, recipe.gxx)
    if binary:
        return _Build(binary, [])
    first_line = recipe.prelude.count("\n") + 1
    line, message = errors[0]
    return _Build(None, [], f"line {line - first_line + 1}: {message}" if line >= first_line else message)


def _shared_source(programs: list[str], recipe: _Recipe) -> tuple[str, list[tuple[int, int]]]:
    """One C++ file with each program in a namespace, and each one's lines [start, end) to tell whose an error is."""
    parts, spans, line = [recipe.prelude], [], recipe.prelude.count("\n") + 1
    for slot, program in enumerate(programs):
        body = recipe.body(program)
        end = body.rindex("}")  # main's closing brace ends a program that may share a unit
        # a main inside a namespace, unlike the real one, does not return 0 when it runs off its end
        body = body[:end] + "return 0; " + body[end:]
        parts += [f"namespace sansprog_{slot} {{\n", body, "}\n"]
        spans.append((line + 1, line + 1 + body.count("\n")))
        line += body.count("\n") + 2
    table = ", ".join(f"sansprog_{slot}::main" for slot in range(len(programs)))
    parts.append(f"int main(int argc, char **argv) {{\n    int (*const programs[])() = {{{table}}};\n"
                 f"    return programs[std::stoi(argv[1])]();\n}}\n")
    return "".join(parts), spans


_ERROR_LINE = re.compile(r"^source\.cpp:(\d+):\d+: (?:fatal )?error: (.*)$", re.M)


def _compile(source: str, workdir: str, seconds: float, gxx) -> tuple[str | None, list[tuple[int, str]]]:
    """g++ in the sandbox. Returns (binary or None, [(line, message), ...] of its errors)."""
    pathlib.Path(workdir, "source.cpp").write_text(source, encoding="utf-8")
    folders = [os.path.dirname(arg) for arg in gxx if arg.startswith("/")]  # e.g. SPoC's -include header's
    code, stderr = _sandboxed([*(f"--see={f}" for f in folders), *gxx, "source.cpp", "-o", "program"], workdir,
                              seconds, jail=False)
    if code is None:
        return None, [(0, f"compilation timed out after {seconds:.0f} s")]
    if code != 0:
        errors = [(int(line), re.sub(r"\bsansprog_\d+::", "", message))  # our namespaces are not the program's
                  for line, message in _ERROR_LINE.findall(stderr)]
        return None, errors or [(0, (stderr.strip().splitlines() or [f"g++ exited with {code}"])[-1])]
    return os.path.join(workdir, "program"), []


# --- running -----------------------------------------------------------------------------
def _run(build: _Build, stdin: str, rundir: str) -> RunResult:
    if build.binary is None:
        return RunResult("compile_error", error=build.error)
    stdin_path, stdout_path = os.path.join(rundir, "stdin"), os.path.join(rundir, "stdout")
    pathlib.Path(stdin_path).write_text(stdin + "\n", encoding="utf-8")
    code, stderr = _sandboxed([build.binary, *build.args], rundir, RUN_WALL_SECONDS, jail=True,
                              stdin_path=stdin_path, stdout_path=stdout_path)
    if stderr:  # the program's own stderr goes to /dev/null: this is the sandbox failing
        raise RuntimeError(f"the judge's sandbox failed: {stderr.strip()}")
    stdout = pathlib.Path(stdout_path).read_bytes().decode(errors="replace")
    if code is None or code == -signal.SIGXCPU:
        return RunResult("timeout", stdout, f"over {RUN_WALL_SECONDS} s wall or {RUN_CPU_SECONDS} s CPU")
    why = (f"output over {RUN_OUTPUT_KB} KiB" if code == -signal.SIGXFSZ else
           f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}" if code > 0 else "")
    return RunResult("runtime_error" if code else "ok", stdout, why)


def _sandboxed(argv, cwd, seconds, jail, stdin_path=None, stdout_path=None):
    """Run argv under the launcher -> (exit code, or None when killed past `seconds` of wall time; stderr)."""
    limits = [RUN_CPU_SECONDS, RUN_MEMORY_MB, RUN_OUTPUT_KB, "jail"] if jail else \
             [math.ceil(seconds), COMPILE_MEMORY_MB, 256 * 1024, "tool"]
    with open(stdin_path or os.devnull, "rb") as stdin, open(stdout_path or os.devnull, "wb") as stdout:
        proc = subprocess.Popen([_sandbox_binary(), *map(str, limits), *argv], cwd=cwd, stdin=stdin,
                                stdout=stdout, stderr=subprocess.PIPE, start_new_session=True, env=_launcher_env())
        try:
            _, stderr = proc.communicate(timeout=seconds)
            stderr = stderr.decode(errors="replace")
            if proc.returncode == 122 and stderr.startswith("sandbox:"):  # the launcher's own failure, not g++'s
                raise RuntimeError(f"the judge's sandbox failed: {stderr.strip()}")
            return proc.returncode, stderr
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: the compiler's cc1plus and ld too
            proc.communicate()
            return None, ""


@functools.cache
def _sandbox_binary() -> str:
    """Compile the launcher once per process, into a folder removed when the process exits."""
    for tool in ("gcc", "g++"):
        if shutil.which(tool) is None:
            raise FileNotFoundError(f"the judge needs {tool}, which is not on PATH (Debian: apt-get install g++)")
    workdir = tempfile.mkdtemp(prefix="sandbox-")
    atexit.register(shutil.rmtree, workdir, True)
    pathlib.Path(workdir, "sandbox.c").write_text(SANDBOX_C)
    subprocess.run(["gcc", "-O2", "-o", "sandbox", "sandbox.c"], cwd=workdir, check=True, capture_output=True)
    launcher = os.path.join(workdir, "sandbox")
    probe = subprocess.run([launcher, "1", "64", "1", "tool", "true"], cwd=workdir, capture_output=True, text=True,
                           env=_launcher_env())
    if probe.returncode:  # say so, in one line, rather than run programs unconfined
        raise RuntimeError(f"the judge cannot isolate programs on this machine ({probe.stderr.strip()}); "
                           "JUDGE_UNCONFINED=1 runs them with limits and seccomp only (as uid 65534 if root)")
    return launcher


def _launcher_env() -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    return env | ({"SANDBOX_UNCONFINED": "1"} if UNCONFINED else {})


# --- SPoC: whole programs (make_spoc.py), judged on their problem's hidden test cases ---------------------------
# A `$` token ends a source line and a lone `~` indents (the operator ~ is glued to its operand). A program is correct
# when, on every case, it exits normally and prints the expected whitespace-separated tokens. The prelude is
# precompiled once and binaries are linked by gold. Only a bare `int main () {...}` without `static` (whose storage
# would add up) shares a unit: any other program is compiled alone, to mean what it would in a file of its own.

SPOC_PRELUDE = "#include <bits/stdc++.h>\nusing namespace std;\n"
# C++11, SPoC's dialect: later ones drop `gets` and add std names (std::size, std::visit) that clash with the programs'.
SPOC_GXX = ["g++", "-std=gnu++11", "-O0", "-w", "-static", "-pipe"]
SPOC_TOKEN = re.compile(r"""(?:u8|[uUL])?"(?:\\.|[^"\\])*"|(?:u8|[uUL])?'(?:\\.|[^'\\])*'|\S+""")


def spoc_source(program: str) -> str:
    """SPoC code line -> C++ source (without the prelude): `$` ends a line, `~` indents."""
    layout = {"$": "\n", "~": "\t"}
    return "".join(layout.get(token, token + " ") for token in SPOC_TOKEN.findall(program)) + "\n"


def judge_spoc_programs(programs: list[str], cases: list[list[tuple[str, str]]],
                        progress: Callable[[], None] | None = None, jobs: int | None = None,
                        fast: bool = True) -> list[dict]:
    """One verdict per program on cases[i], its (stdin, expected stdout) pairs; a failed case's number is in "case".
    Tests only: fast=False compiles each alone, without the precompiled header or gold (the slow reference)."""
    if len(programs) != len(cases):
        raise ValueError(f"{len(programs)} programs but {len(cases)} lists of test cases")
    recipe = _spoc_recipe(fast)  # built once, here, not by two threads at the same time
    where = {}  # program -> the positions it holds in `programs`
    for i, program in enumerate(programs):
        where.setdefault(program, []).append(i)
    verdicts = [None] * len(programs)

    def judge_all(program: str, build: _Build, workdir: str):
        for i in where[program]:
            verdicts[i] = _judge_on_cases(build, cases[i], workdir)
            if progress:
                progress()

    _judge_in_units(list(where), lambda p: fast and can_share_unit(p, spoc_source) and "static" not in p.split(),
                    recipe, jobs, judge_all)
    return verdicts


def compiles(programs: list[str]) -> list[bool]:
    """SPoC's error detector g (Appendix E), as the compiler: a program has no error (g = 0) when it compiles."""
    verdicts = judge_spoc_programs(programs, [[] for _ in programs])  # no cases: compile (and link) only
    return [verdict["verdict"] != "compile_error" for verdict in verdicts]


def _judge_on_cases(build: _Build, cases: list[tuple[str, str]], workdir: str) -> dict:
    """Run a built program on its cases until one fails."""
    if build.binary is None:
        return {"verdict": "compile_error", "error": build.error}
    for case, (stdin, expected) in enumerate(cases):
        result = _run(build, stdin, tempfile.mkdtemp(dir=workdir))
        if result.status != "ok":
            return {"verdict": result.status, "case": case, "error": result.error}
        if result.stdout.split() != expected.split():
            return {"verdict": "wrong_output", "case": case, "stdout": result.stdout[:200]}
    return {"verdict": "correct"}


@functools.cache
def _spoc_recipe(fast: bool) -> _Recipe:
    """SPOC_PRELUDE as a header g++ includes first, precompiled with SPOC_GXX's flags (so g++ uses it) when fast."""
    workdir = tempfile.mkdtemp(prefix="spoc-prelude-")
    os.chmod(workdir, 0o755)  # the compiler reads it as uid 65534
    atexit.register(shutil.rmtree, workdir, True)
    header = os.path.join(workdir, "prelude.h")
    pathlib.Path(header).write_text(SPOC_PRELUDE)
    if fast:
        flags = [flag for flag in SPOC_GXX if flag != "-static"]
        subprocess.run([*flags, "-x", "c++-header", header, "-o", header + ".gch"], check=True, capture_output=True)
    return _Recipe("", spoc_source, (*SPOC_GXX, "-include", header, *(["-fuse-ld=gold"] if fast else [])))


# --- a task of one's own (make_task.py): its validity check is a command of the user's, as g++ is SansType's ---

def check_validity(command: str, outputs: list[str], cwd: str, seconds: float = 600) -> list[bool]:
    """Run `command` by the shell in `cwd` on the outputs, one a stdin line; it prints a verdict a line, 1 (valid) or
    0. Anything else is a ValueError naming the command, since a wrong judge would quietly make every number wrong."""
    try:
        result = subprocess.run(command, shell=True, cwd=cwd, input="".join(o + "\n" for o in outputs),
                                capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        raise ValueError(f"the validity command `{command}` took over {seconds:.0f} s") from None
    verdicts = result.stdout.split()
    if result.returncode or len(verdicts) != len(outputs) or not set(verdicts) <= {"0", "1"}:
        why = (f"exited with {result.returncode}: {result.stderr.strip().splitlines()[-1:]}" if result.returncode
               else f"printed {len(verdicts)} verdicts for {len(outputs)} outputs" if len(verdicts) != len(outputs)
               else f"printed {sorted(set(verdicts) - {'0', '1'})[:3]}, not 1 or 0")
        raise ValueError(f"the validity command `{command}` {why}")
    return [verdict == "1" for verdict in verdicts]


if __name__ == "__main__":  # a module, not a stage: running it shows how to use it
    print(__doc__)
