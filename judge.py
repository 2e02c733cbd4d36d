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

# Programs come from a model, so they are hostile: every compilation and run is time-limited and killed with its
# process group, and every run goes through a C launcher (SANDBOX_C) that drops root, forbids new processes and files,
# and caps CPU, memory and output. g++ spends most of its time parsing headers, so self-contained `int main () {...}`
# programs share a translation unit, each in its own namespace, behind a dispatcher `main` (argv[1] names one).

CPP_PRELUDE = "#include <iostream>\n#include <string>\n#include <algorithm>\nusing namespace std;\n"
GXX = ["g++", "-std=gnu++17", "-O0", "-w", "-static", "-pipe"]  # static: a jailed run may not open .so files
COMPILE_SECONDS = 20         # one program; a batch gets 0.2 s more per program
COMPILE_MEMORY_MB = 2048
RUN_CPU_SECONDS = 2
RUN_WALL_SECONDS = 5
RUN_MEMORY_MB = 512
RUN_OUTPUT_KB = 1024
BATCH_SIZE = 100             # at most this many programs per translation unit

SANDBOX_C = r"""
/* sandbox CPU_S MEMORY_MB FILE_KB tool|jail PROGRAM [ARGS...]
   tool: cap CPU time, memory and file size, then run PROGRAM found on PATH (the compiler).
   jail: also drop root, allow no new process or file, and send the program's stderr to /dev/null. */
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static int report = 2;
static void fail(const char *what) { dprintf(report, "sandbox: %s failed\n", what); exit(122); }
static void limit(int resource, rlim_t soft, rlim_t hard) {
    struct rlimit r = {soft, hard};
    if (setrlimit(resource, &r) != 0) fail("setrlimit");
}
int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: sandbox CPU_S MEMORY_MB FILE_KB tool|jail PROGRAM ...\n"); return 122; }
    rlim_t cpu = atol(argv[1]), memory = (rlim_t)atol(argv[2]) << 20, file = (rlim_t)atol(argv[3]) << 10;
    int jail = strcmp(argv[4], "jail") == 0;
    limit(RLIMIT_CPU, cpu, cpu + 1);  /* SIGXCPU at the soft limit */
    limit(RLIMIT_AS, memory, memory);
    limit(RLIMIT_FSIZE, file, file);  /* SIGXFSZ past the cap, also for stdout redirected to a file */
    limit(RLIMIT_CORE, 0, 0);
    if (!jail) { execvp(argv[5], argv + 5); fail("exec"); }
    int program = open(argv[5], O_RDONLY | O_CLOEXEC);  /* opened while we may still read it */
    int null = open("/dev/null", O_WRONLY);
    report = fcntl(2, F_DUPFD_CLOEXEC, 3);  /* the program's stderr goes to /dev/null: anything on ours is ours */
    if (program < 0 || null < 0 || report < 0 || dup2(null, 2) < 0) fail("open");
    close(null);
    /* the kernel never applies the process limit to root */
    if (getuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534))) fail("dropping root");
    limit(RLIMIT_NPROC, 0, 0);  /* no new process */
    limit(RLIMIT_NOFILE, 3, 3);  /* no new file: stdin, stdout, stderr only */
    char *empty_environment[] = {NULL};
    fexecve(program, argv + 5, empty_environment);
    fail("exec");
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
_LITERAL = re.compile(r"""(R?)(["'])(?:\\[\s\S]|(?!\2)[^\\\n])*\2""")  # a string or character literal, R: raw


def can_share_unit(program: str, body=program_body) -> bool:
    """True for exactly one `int main () { ... }` with (), [] and {} nested, and no preprocessor, comments,
    backslashes, digraphs or raw strings: in a namespace, it cannot change how its neighbours compile."""
    # each literal as 0, so that its brackets do not count; a raw or unterminated one leaves its quotes
    code = _LITERAL.sub(lambda literal: literal[0] if literal[1] else "0", body(program))
    if "'" in code or '"' in code or not _MAIN_HEAD.match(code):
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
    code, stderr = _sandboxed([*gxx, "source.cpp", "-o", "program"], workdir, seconds, jail=False)
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
                                stdout=stdout, stderr=subprocess.PIPE, start_new_session=True,
                                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"})
        try:
            _, stderr = proc.communicate(timeout=seconds)
            return proc.returncode, stderr.decode(errors="replace")
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
    return os.path.join(workdir, "sandbox")


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
