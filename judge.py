"""A fast, sandboxed judge for untrusted C++ programs: compile them with g++, run them on inputs, compare
what they print. Standard library only (and g++ on PATH), so this one file can be copied into another project.

    import judge

    # SansType: one program per line (`$` ends a source line, `~` indents), one stdin and one expected
    # stdout each; a program is correct when it compiles, exits normally and prints the expected output.
    verdicts = judge.judge_programs(["int main () { $ int x ; $ cin >> x ; $ cout << x + 1 ; $ return 0; }"],
                                    stdins=["41"], expected=["42"])
    verdicts[0]                   # {"verdict": "correct", "stdout": "42"}

    # SPoC: whole programs, each judged on every (stdin, expected stdout) case of its problem.
    judge.judge_spoc_programs(["int main ( ) { $ ~ int n ; $ ~ cin >> n ; $ ~ cout << n ; $ }"],
                              cases=[[("1", "1"), ("7", "7")]])          # [{"verdict": "correct"}]
    judge.compiles(programs)      # SPoC's error detector g (Appendix E): does each program compile?
    judge.to_cpp(program)         # the C++ file a SansType line stands for

Verdicts: correct, wrong_output, compile_error (with the compiler's first error and its line),
runtime_error (a signal, a non-zero exit or too much output) or timeout. `progress`, if given, is called
once per program judged (from several threads).
"""

import atexit
import functools
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

# A SansType program is one line: `$` ends a source line and `~` is indentation. The judge
# compiles it with g++ after a fixed prelude, runs it on the test's stdin and compares the
# stripped stdout with the gold output, as the paper's evaluation does.
#
# Programs come straight from a model, so they are hostile until proven otherwise: every
# compilation and run has a time limit and is killed with its whole process group, and every
# run goes through a tiny C launcher (SANDBOX_C) that drops root, forbids new processes and
# new files, and caps CPU, memory and output before it executes the program.
#
# Speed: g++ spends most of its time parsing <iostream>, so compiling 500 programs one by one
# parses it 500 times. Instead, programs that are one self-contained `int main () { ... }`
# share a translation unit, each inside its own namespace, and a dispatcher `main` calls the
# program named by argv[1]. A program whose lines hold a compile error is taken out of the
# batch and the rest is compiled again. Every run is still its own sandboxed process.

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
   jail: also drop root (the kernel never applies the process limit to root), allow no new
   process (RLIMIT_NPROC 0) and no new file (RLIMIT_NOFILE 3: stdin, stdout, stderr only),
   and send the program's stderr to /dev/null, so that anything on our stderr is ours. */
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
    report = fcntl(2, F_DUPFD_CLOEXEC, 3);
    if (program < 0 || null < 0 || report < 0 || dup2(null, 2) < 0) fail("open");
    close(null);
    if (getuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534))) fail("dropping root");
    limit(RLIMIT_NPROC, 0, 0);
    limit(RLIMIT_NOFILE, 3, 3);
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
    """Compile and run programs[i] on stdins[i] (an .inp line) on `jobs` cores (all), calling progress()
    after each run. Results are remembered per (program, stdin) for the process's life. For the tests and
    benches only: cache=False runs everything again, share_units=False compiles every program alone (slow; the
    reference the batching is checked against)."""
    if len(programs) != len(stdins):
        raise ValueError(f"{len(programs)} programs but {len(stdins)} inputs")
    jobs = jobs or os.cpu_count() or 1
    pairs = [k for k in dict.fromkeys(zip(programs, stdins)) if not (cache and k in _RUN_CACHE)]
    inputs_of = {}
    for program, stdin in pairs:
        inputs_of.setdefault(program, []).append(stdin)
    shared = {p: None for p in inputs_of if share_units and can_share_unit(p)}  # an ordered set
    units = [[p] for p in inputs_of if p not in shared] + _split_evenly(list(shared), jobs)
    results = {}
    _sandbox_binary()  # compiled once, here, not by two threads at the same time

    def build_and_run(unit: list[str], workdir: str):
        os.makedirs(workdir)
        builds = _build_unit(unit, workdir)
        for program in unit:
            for stdin in inputs_of[program]:
                rundir = tempfile.mkdtemp(dir=workdir)
                results[program, stdin] = _run(builds[program], stdin, rundir)
                shutil.rmtree(rundir)
                if progress:
                    progress()
        shutil.rmtree(workdir)  # binaries are large (static): free the disk as we go

    with tempfile.TemporaryDirectory(prefix="judge-") as workdir, ThreadPoolExecutor(jobs) as pool:
        list(pool.map(build_and_run, units, [os.path.join(workdir, f"unit{i}") for i in range(len(units))]))
    if cache:
        _RUN_CACHE.update(results)
    return [results.get(k) or _RUN_CACHE[k] for k in zip(programs, stdins)]


def judge_programs(programs: list[str], stdins: list[str], expected: list[str], **kwargs) -> list[dict]:
    """One verdict per program: correct, wrong_output, compile_error, runtime_error or timeout.
    A program is correct when it compiles, exits normally and its stripped stdout is the
    gold output (stripped too)."""
    verdicts = []
    for result, gold in zip(run_programs(programs, stdins, **kwargs), expected, strict=True):
        if result.status == "ok":
            verdict = "correct" if result.stdout.strip() == gold.strip() else "wrong_output"
            verdicts.append({"verdict": verdict, "stdout": result.stdout[:200]})
        else:
            verdicts.append({"verdict": result.status, "error": result.error})
    return verdicts


def _split_evenly(items: list, jobs: int) -> list[list]:
    """Chunks of at most BATCH_SIZE, as many as a multiple of `jobs`, so both cores stay busy."""
    if not items:
        return []
    n_chunks = -(-len(items) // BATCH_SIZE)
    n_chunks = -(-n_chunks // jobs) * jobs
    return [chunk for chunk in (items[i::n_chunks] for i in range(n_chunks)) if chunk]


# --- which programs may share a translation unit -----------------------------------------

_MAIN_HEAD = re.compile(r"\s*int\s+main\s*\(\s*\)\s*\{")
_OPENERS, _CLOSERS = "([{", ")]}"


def can_share_unit(program: str, body=program_body) -> bool:
    """True when the program is exactly one `int main () { ... }` with (), [] and {} properly
    nested, and nothing that reaches outside it: no preprocessor, comments, backslashes,
    digraphs or raw strings. Wrapped in a namespace, such a program cannot change how its
    neighbours compile, and g++'s error recovery stays inside its braces."""
    code = _without_literals(body(program))
    if code is None or not _MAIN_HEAD.match(code):
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


def _without_literals(code: str) -> str | None:
    """Blank out the insides of string and character literals, so that their brackets do not
    count; None when a literal is raw or unterminated."""
    out, i = [], 0
    while i < len(code):
        if code[i] not in "\"'":
            out.append(code[i])
            i += 1
            continue
        quote, end = code[i], i + 1
        while end < len(code) and code[end] not in (quote, "\n"):
            end += 2 if code[end] == "\\" else 1
        if end >= len(code) or code[end] != quote or code[i - 1:i] == "R":
            return None
        out.append(quote + " " * (end - i - 1) + quote)
        i = end + 1
    return "".join(out)


# --- building ----------------------------------------------------------------------------

def _build_unit(unit: list[str], workdir: str, recipe: _Recipe = SANSTYPE) -> dict[str, _Build]:
    """Compile the programs of a unit. One program is compiled as it is; several share a
    translation unit. A program whose lines hold an error gets that error as its verdict
    and the others are compiled again without it; when a failure names no program's line
    (a link error, a timeout), every remaining program is compiled alone."""
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
        if not first_error:
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
    """One C++ file holding every program in a namespace of its own, and each program's span
    of lines [start, end), so that an error's line number tells whose it is. Each main gets a
    `return 0;` before its closing brace: a function named main in a namespace, unlike the
    real one, does not return 0 when it runs off its end."""
    parts, spans, line = [recipe.prelude], [], recipe.prelude.count("\n") + 1
    for slot, program in enumerate(programs):
        body = recipe.body(program)
        end = body.rindex("}")  # main's closing brace ends a program that may share a unit
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
    with open(os.path.join(workdir, "source.cpp"), "w", encoding="utf-8") as f:
        f.write(source)
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
    with open(stdin_path, "w", encoding="utf-8") as f:
        f.write(stdin + "\n")
    code, stderr = _sandboxed([build.binary, *build.args], rundir, RUN_WALL_SECONDS, jail=True,
                              stdin_path=stdin_path, stdout_path=stdout_path)
    if stderr:  # the program's own stderr goes to /dev/null: this is the sandbox failing
        raise RuntimeError(f"the judge's sandbox failed: {stderr.strip()}")
    with open(stdout_path, "rb") as f:
        stdout = f.read().decode(errors="replace")
    if code is None or code == -signal.SIGXCPU:
        return RunResult("timeout", stdout, f"over {RUN_WALL_SECONDS} s wall or {RUN_CPU_SECONDS} s CPU")
    if code == -signal.SIGXFSZ:
        return RunResult("runtime_error", stdout, f"output over {RUN_OUTPUT_KB} KiB")
    if code < 0:
        return RunResult("runtime_error", stdout, f"killed by {signal.Signals(-code).name}")
    if code > 0:
        return RunResult("runtime_error", stdout, f"exit code {code}")
    return RunResult("ok", stdout)


def _sandboxed(argv, cwd, seconds, jail, stdin_path=None, stdout_path=None):
    """Run argv under the sandbox launcher in a process group of its own, killing the whole
    group (the compiler's cc1plus and ld too) past `seconds` of wall time.
    Returns (exit code, or None after a timeout; stderr)."""
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
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None, ""


@functools.cache
def _sandbox_binary() -> str:
    """Compile the launcher once per process (run_programs asks before it starts threads);
    removed when the process exits."""
    for tool in ("gcc", "g++"):
        if shutil.which(tool) is None:
            raise FileNotFoundError(f"the judge needs {tool}, which is not on PATH (Debian: apt-get install g++)")
    workdir = tempfile.mkdtemp(prefix="sandbox-")
    atexit.register(shutil.rmtree, workdir, True)
    with open(os.path.join(workdir, "sandbox.c"), "w") as f:
        f.write(SANDBOX_C)
    subprocess.run(["gcc", "-O2", "-o", "sandbox", "sandbox.c"], cwd=workdir, check=True, capture_output=True)
    return os.path.join(workdir, "sandbox")


# --- SPoC: whole programs, judged on their problem's hidden test cases ------------------------
# A SPoC program (make_spoc.py) is one line of C++ tokens: a `$` token ends a source line and a
# `~` token is one level of indentation (the C++ operator ~ is written glued to its operand, so a
# lone `~` is never code). String and character literals are single tokens, spaces included.
# A program is correct when it compiles after SPOC_PRELUDE and, on every test case of its
# problem, exits normally and prints the expected output, compared as whitespace-separated
# tokens (a missing final newline or trailing spaces are not wrong); judging stops at the first
# case that fails.
#
# Speed: g++ spends most of a second parsing <bits/stdc++.h>, so the prelude is precompiled
# once per process (a .gch, same flags), binaries are linked by gold, and programs are judged
# on all cores. Programs that are only an `int main () { ... }` (can_share_unit, and no
# `static`, whose storage would add up in a shared binary) share translation units as
# SansType's do: with no globals of their own, a namespace around them changes nothing. Every
# other program (globals, functions, macros) is compiled alone, so that it means exactly
# what it would in a file of its own.

SPOC_PRELUDE = "#include <bits/stdc++.h>\nusing namespace std;\n"
# C++11, the dialect of SPoC's time (its programs pass with GCC 5.5): later ones drop `gets` and add std names
# (std::size, std::visit) that clash with the programs' own.
SPOC_GXX = ["g++", "-std=gnu++11", "-O0", "-w", "-static", "-pipe"]
SPOC_TOKEN = re.compile(r"""(?:u8|[uUL])?"(?:\\.|[^"\\])*"|(?:u8|[uUL])?'(?:\\.|[^'\\])*'|\S+""")


def spoc_source(program: str) -> str:
    """SPoC code line -> C++ source (without the prelude): `$` ends a line, `~` indents."""
    layout = {"$": "\n", "~": "\t"}
    return "".join(layout.get(token, token + " ") for token in SPOC_TOKEN.findall(program)) + "\n"


def judge_spoc_programs(programs: list[str], cases: list[list[tuple[str, str]]],
                        progress: Callable[[], None] | None = None, jobs: int | None = None,
                        fast: bool = True) -> list[dict]:
    """One verdict per program: correct, wrong_output, compile_error, runtime_error or timeout;
    cases[i] holds the (stdin, expected stdout) pairs of program i's problem. A failed case's
    number (from 0) is in "case". For the tests and benches only: fast=False compiles every program
    alone, without the precompiled header and with the default linker (slow; the reference the fast path is
    checked against)."""
    if len(programs) != len(cases):
        raise ValueError(f"{len(programs)} programs but {len(cases)} lists of test cases")
    jobs = jobs or os.cpu_count() or 1
    recipe = _spoc_recipe(fast)  # built once, here, not by two threads at the same time
    _sandbox_binary()
    where = {}  # program -> the positions it holds in `programs`
    for i, program in enumerate(programs):
        where.setdefault(program, []).append(i)
    shared = [p for p in where if fast and can_share_unit(p, spoc_source) and "static" not in p.split()]
    units = [[p] for p in where if p not in set(shared)] + _split_evenly(shared, jobs)
    verdicts = [None] * len(programs)

    def build_and_judge(unit: list[str], workdir: str):
        os.makedirs(workdir)
        builds = _build_unit(unit, workdir, recipe)
        for program in unit:
            for i in where[program]:
                verdicts[i] = _judge_on_cases(builds[program], cases[i], workdir)
                if progress:
                    progress()
        shutil.rmtree(workdir)  # binaries are large (static): free the disk as we go

    with tempfile.TemporaryDirectory(prefix="judge-") as workdir, ThreadPoolExecutor(jobs) as pool:
        list(pool.map(build_and_judge, units, [os.path.join(workdir, f"unit{i}") for i in range(len(units))]))
    return verdicts


def compiles(programs: list[str]) -> list[bool]:
    """SPoC's error detector g (Appendix E), as the compiler: a program has no error (g = 0) when it
    compiles. The paper trains a classifier on the denoising data; one from Pi's own copy likelihood
    told the sample's clean programs from corrupted ones hardly better than chance (EXPERIMENTS.md)."""
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
    """SPOC_PRELUDE in a header that g++ includes before every program (-include), precompiled
    beside it (prelude.h.gch, with SPOC_GXX's flags, so that g++ uses it) when fast; the folder
    is removed when the process exits."""
    workdir = tempfile.mkdtemp(prefix="spoc-prelude-")
    atexit.register(shutil.rmtree, workdir, True)
    header = os.path.join(workdir, "prelude.h")
    with open(header, "w") as f:
        f.write(SPOC_PRELUDE)
    if fast:
        flags = [flag for flag in SPOC_GXX if flag != "-static"]
        subprocess.run([*flags, "-x", "c++-header", header, "-o", header + ".gch"], check=True, capture_output=True)
    return _Recipe("", spoc_source, (*SPOC_GXX, "-include", header, *(["-fuse-ld=gold"] if fast else [])))


if __name__ == "__main__":  # a module, not a stage: running it shows how to use it
    print(__doc__)


# ----------------------------------------------------------------------------------------------------
# A task of one's own (make_task.py): its validity check is a command of the user's, as g++ is SansType's.
# ----------------------------------------------------------------------------------------------------

def check_validity(command: str, outputs: list[str], cwd: str, seconds: float = 600) -> list[bool]:
    """A task's own validity check (make_task.py --valid-command): `command`, run by the shell in `cwd`, reads the
    outputs on its stdin, one a line, and prints one verdict a line: 1 (valid) or 0. Anything else is an error
    (ValueError) that names the command, since a wrong judge would quietly make every number wrong."""
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
