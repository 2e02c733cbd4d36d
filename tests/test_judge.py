"""The judge: right verdicts for ordinary programs, and containment of hostile ones."""
import json
import os
import subprocess
import sys
import tempfile

import pytest

import common
import harness
import judge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "fixtures", "released")


def released(n=20):
    """The first n released training programs (tests/fixtures/released, MIT), their inputs and outputs."""
    def lines(ext):
        with open(os.path.join(DATA, f"train.{ext}")) as f:
            return f.read().split("\n")[:n]
    return lines("tgt"), lines("inp"), lines("out")


# Each hostile program is a SansType line (`$` = newline) with the verdict it must get and the
# gold output it is judged against.
HOSTILE = {
    "infinite_loop": ("int main () { $ while ( true ) { } $ return 0; }", "timeout", ""),
    "sleep_forever": ("#include <unistd.h> $ int main () { $ while ( true ) sleep ( 1 ) ; $ return 0; }",
                      "timeout", ""),
    "fork_bomb": ("#include <unistd.h> $ int main () { $ while ( true ) fork ( ) ; $ return 0; }", "timeout", ""),
    "fork_once": ("#include <unistd.h> $ int main () { $ cout << ( fork ( ) < 0 ? \"blocked\" : \"forked\" ) ; "
                  "$ return 0; }", "correct", "blocked"),
    "shell_out": ("int main () { $ cout << system ( \"touch /tmp/judge_shell_escape\" ) ; $ return 0; }",
                  "wrong_output", "0"),
    "allocate_10gb": ("int main () { $ string s ( 10000000000ULL , 'a' ) ; $ cout << s [ 5 ] ; $ return 0; }",
                      "runtime_error", "a"),
    "output_1gb": ("int main () { $ for ( long i = 0 ; i < 1000000000L ; i ++ ) cout << \"xxxxxxxx\" ; "
                   "$ return 0; }", "runtime_error", ""),
    "endless_stdin": ("int main () { $ string s ; $ while ( true ) cin >> s ; $ return 0; }", "timeout", ""),
    "segfault": ("int main () { $ int * p = nullptr ; $ * p = 1 ; $ return 0; }", "runtime_error", ""),
    "exit_code": ("int main () { $ cout << 1 ; $ return 3; }", "runtime_error", "1"),
    "dev_zero_include": ("#include \"/dev/zero\" $ int main () { return 0; }", "compile_error", ""),
    "include_bomb": ("#include __FILE__ $ #include __FILE__ $ int main () { return 0; }", "compile_error", ""),
    "template_bomb": ("template < int N > struct A { enum { v = A < N + 1 > :: v } ; } ; $ "
                      "int main () { cout << A < 0 > :: v ; return 0; }", "compile_error", ""),
    "type_error": ("int main () { $ int var_0 = \"str_1\" ; $ cout << var_0 ; $ return 0; }", "compile_error", ""),
    "unbalanced": ("int main () { $ cout << ( 1 ; $ return 0; } } namespace evil { int x ;", "compile_error", ""),
}


def write_outside_program(path):
    return (f"#include <fstream> $ int main () {{ $ ofstream f ( \"{path}\" ) ; f << \"x\" ; $ "
            f"cout << ( f . good ( ) ? \"wrote\" : \"blocked\" ) ; $ return 0; }}")


def processes_inside(folder):
    """Processes whose command line, executable or working directory lies in folder."""
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            places = [os.readlink(f"/proc/{pid}/{link}") for link in ("exe", "cwd")]
        except OSError:
            continue
        if any(str(folder) in text for text in [cmdline, *places]):
            alive.append((pid, cmdline))
    return alive


def test_released_programs_judge_correct():
    programs, stdins, outputs = released(50)
    verdicts = judge.judge_programs(programs, stdins, outputs, cache=False)
    assert [v["verdict"] for v in verdicts] == ["correct"] * 50


def test_wrong_output_and_compile_error_are_told_apart():
    programs, stdins, outputs = released(3)
    broken = programs[1].replace("int var_3 ;", "var_3 ;", 1)  # an undeclared variable
    verdicts = judge.judge_programs([programs[0], broken, programs[2]], stdins, [outputs[0], outputs[1], "nope"],
                                     cache=False)
    assert [v["verdict"] for v in verdicts] == ["correct", "compile_error", "wrong_output"]
    assert "var_3" in verdicts[1]["error"] and verdicts[1]["error"].startswith("line ")


def test_hostile_programs_are_contained_and_ordinary_verdicts_do_not_change(quick_limits, tmp_path, monkeypatch):
    judge_folder = tmp_path / "judge"
    judge_folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(judge_folder))  # where the judge makes its folders
    if os.path.exists("/tmp/judge_shell_escape"):
        os.remove("/tmp/judge_shell_escape")
    outside = tmp_path / "escaped.txt"
    hostile = dict(HOSTILE, write_outside=(write_outside_program(outside), "correct", "blocked"))
    programs, stdins, outputs = released(20)
    alone = [v["verdict"] for v in judge.judge_programs(programs, stdins, outputs, cache=False)]

    # ordinary programs interleaved with hostile ones, so they share translation units
    names = list(hostile)
    mixed = [(programs[i], stdins[i], outputs[i]) for i in range(20)]
    for k, name in enumerate(names):
        program, _, gold = hostile[name]
        mixed.insert(2 * k + 1, (program, "", gold))
    verdicts = judge.judge_programs(*map(list, zip(*mixed)), cache=False)
    by_program = {program: v for (program, _, _), v in zip(mixed, verdicts)}

    for name in names:
        program, expected_verdict, _ = hostile[name]
        assert by_program[program]["verdict"] == expected_verdict, (name, by_program[program])
    assert [by_program[p]["verdict"] for p in programs] == alone == ["correct"] * 20
    assert not outside.exists()
    assert not os.path.exists("/tmp/judge_shell_escape")
    assert "timed out" in by_program[hostile["include_bomb"][0]]["error"]
    assert "output over" in by_program[hostile["output_1gb"][0]]["error"]
    assert processes_inside(judge_folder) == []
    assert [name for name in os.listdir(judge_folder) if name.startswith("judge-")] == []  # all removed


def test_programs_that_may_share_a_translation_unit():
    programs, _, _ = released(5)
    assert all(judge.can_share_unit(p) for p in programs)
    assert not judge.can_share_unit(HOSTILE["unbalanced"][0])
    assert not judge.can_share_unit(HOSTILE["dev_zero_include"][0])
    assert not judge.can_share_unit("int main () { $ cout << \"}\" ; $ } int x ;")
    assert judge.can_share_unit("int main () { $ cout << \"}\" ; $ return 0; }")
    assert not judge.can_share_unit("int x ; int main () { return x ; }")


def test_batched_and_alone_compilation_give_the_same_verdicts():
    """Programs broken in many small ways (the code corruptions) get the same verdict, and
    the same first error, whether they share a translation unit or are compiled alone."""
    import random
    programs, stdins, outputs = released(24)
    rng = random.Random(0)
    corrupted = [common.corrupt_code(p, rng) for p in programs]
    batched = judge.judge_programs(corrupted, stdins, outputs, cache=False)
    alone = judge.judge_programs(corrupted, stdins, outputs, cache=False, share_units=False)
    assert [v["verdict"] for v in batched] == [v["verdict"] for v in alone]
    assert [v.get("error") for v in batched] == [v.get("error") for v in alone]
    assert sum(v["verdict"] == "compile_error" for v in batched) >= 10  # the test has teeth
    assert judge.sanstype_compiles(corrupted) == [v["verdict"] != "compile_error" for v in batched]  # Pi's report's


def sanstype_folder(folder, n):
    """A data folder of the first n released test programs, as make_sanstype.py writes one (its tokenizer included)."""
    programs, stdins, outputs = released(n)
    for ext, lines in (("inp", stdins), ("out", outputs)):
        (folder / f"test.{ext}").write_text("\n".join(lines) + "\n")
    (folder / "spm.model").write_bytes(common.train_tokenizer(programs * 3, 100))
    harness.write_manifest(str(folder), "sanstype", corruption="code")
    return programs


def run_evaluate(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "evaluate.py"), *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_evaluate_cli_writes_verdicts_and_summary(tmp_path):
    programs = sanstype_folder(tmp_path, 4)
    predictions = tmp_path / "preds.txt"
    predictions.write_text("\n".join([programs[0], programs[1], "int main () {", programs[0]]) + "\n")
    result = run_evaluate("--predictions", str(predictions), "--data", str(tmp_path), "--split", "test",
                          "--json", str(tmp_path / "summary.json"))
    assert result.returncode == 0, result.stderr
    assert "compiled 75.0%" in result.stdout and "accuracy 50.0%" in result.stdout
    verdicts = [json.loads(line) for line in open(str(predictions) + ".verdicts.jsonl")]
    assert [v["verdict"] for v in verdicts] == ["correct", "correct", "compile_error", "wrong_output"]
    assert json.load(open(tmp_path / "summary.json")) == {"n": 4, "compiled": 0.75, "accuracy": 0.5}


@pytest.mark.parametrize("case", ["missing", "empty", "counts"])
def test_evaluate_cli_bad_input_is_one_line_and_exit_2(tmp_path, case):
    programs = sanstype_folder(tmp_path, 3)
    predictions = tmp_path / "preds.txt"
    if case == "empty":
        predictions.write_text("")
    elif case == "counts":
        predictions.write_text("\n".join(programs[:2]) + "\n")
    result = run_evaluate("--predictions", str(predictions), "--data", str(tmp_path), "--split", "test")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert {"missing": "missing file", "empty": "empty predictions", "counts": "line counts differ"}[case] \
        in result.stderr
    assert not os.path.exists(str(predictions) + ".verdicts.jsonl")
