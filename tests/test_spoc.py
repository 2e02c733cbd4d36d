"""SPoC: make_spoc.py's files, and the judge for whole programs on their problems' hidden test cases.

The fixture (tests/fixtures/spoc, CC BY 4.0 like the release) holds 3 programs of each of 4 problems from the
SPoC release's training split (1095A and 1006A from spoc-train-test.tsv, 478A and 888A from spoc-train-eval.tsv)
and those problems' hidden test cases.
"""
import argparse
import difflib
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile

import pytest
import torch

import common
import harness
import evaluate
import finetune
import judge
import make_spoc
import spoc
import train_denoiser
from test_judge import HOSTILE, ROOT, processes_inside, write_outside_program

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "spoc")
TRAIN_TSV, EVAL_TSV = os.path.join(FIXTURE, "spoc-train-test.tsv"), os.path.join(FIXTURE, "spoc-train-eval.tsv")


def run_script(script, *args):
    return subprocess.run([sys.executable, os.path.join(ROOT, script), *args], capture_output=True, text=True,
                          cwd=ROOT)


def make_fixture_data(out, *extra):
    """train on one fixture file, validate and test on the other, as on the two-file sample."""
    return run_script("make_spoc.py", "--spoc", FIXTURE, "--out", str(out), "--splits", "train,val,testw",
                      "--train", TRAIN_TSV, "--val", EVAL_TSV, "--testw", EVAL_TSV, *extra)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("spoc")
    result = make_fixture_data(out)
    assert result.returncode == 0, result.stderr
    return out


def split_programs(data, split):
    return common.read_lines(os.path.join(data, f"{split}.tgt")), spoc.read_cases(str(data), split)


def test_make_spoc_writes_the_papers_format(data):
    src, tgt = (common.read_lines(os.path.join(data, f"val.{ext}")) for ext in ("src", "tgt"))
    assert len(src) == len(tgt) == 6
    assert src[0] == ("TAB1 let a, b, c, d, e be integers $ TAB1 read a $ TAB1 read b $ TAB1 read c $ TAB1 read d $ "
                      "TAB1 read e $ TAB1 if (a + b + c + d + e) modulo 5 is not 0 or (a + b + c + d + e) / 5 is 0 $ "
                      "TAB2 print -1 $ TAB1 else do the following $ TAB2 print (a + b + c + d + e)/5")
    assert tgt[0] == ("int main ( ) { $ ~ int a , b , c , d , e ; $ ~ cin >> a ; $ ~ cin >> b ; $ ~ cin >> c ; $ "
                      "~ cin >> d ; $ ~ cin >> e ; $ ~ if ( ( a + b + c + d + e ) % 5 != 0 || ( a + b + c + d + e ) "
                      "/ 5 == 0 ) { $ ~ ~ cout << - 1 << endl ; $ ~ } else { $ ~ ~ cout << ( a + b + c + d + e ) / 5 "
                      "<< endl ; $ ~ } $ ~ return 0 ; $ }")
    assert common.read_lines(os.path.join(data, "val.ids"))[0] == "478A\t41682790\t32"
    problems = [json.loads(line) for line in common.read_lines(os.path.join(data, "val.cases.jsonl"))]
    assert [p["probid"] for p in problems] == ["478A", "888A"]  # each problem's cases once
    assert problems[0]["cases"][0] == ["2 3 4 5 6", "4\n"] and len(problems[0]["cases"]) == 14
    assert os.path.isfile(os.path.join(data, "spm.model"))


def test_tokens_round_trip_with_literals_and_the_tilde_operator():
    line = make_spoc.code_line('cout << "a  $ ~ b" << \' \' << ~n << 1e-7 << 0x1Fu; // a comment', 2)
    assert line == '~ ~ cout << "a  $ ~ b" << \' \' << ~n << 1e-7 << 0x1Fu ;'
    assert judge.spoc_source(line) == '\t\tcout << "a  $ ~ b" << \' \' << ~n << 1e-7 << 0x1Fu ; \n'
    assert make_spoc.code_line("#define f(x) ((x)*(x))", 0) == "#define f(x) ((x)*(x))"


def test_tokenizer_is_smaller_when_the_data_cannot_support_10000_pieces(tmp_path):
    result = make_fixture_data(tmp_path)
    assert "supports at most" in result.stdout and "not 10000" in result.stdout
    model = common.load_tokenizer(open(tmp_path / "spm.model", "rb").read())
    assert 100 < model.get_piece_size() < 10000


def test_overwrite_without_unlabeled_code_leaves_no_old_unlabeled_code(tmp_path):
    """The unlabeled code goes with the train split it was tokenized with: a new train split drops an old one's, and
    every other file a make_*.py writes (an old testp split would be judged); the user's own files stay, those named
    like data too (notes.src, unlabeled.src)."""
    assert make_fixture_data(tmp_path, "--unlabeled", EVAL_TSV, "--vocab-size", "300").returncode == 0
    for name in ("testp.src", "notes.src", "unlabeled.src"):
        (tmp_path / name).write_text("TAB1 read n\n")
    assert make_fixture_data(tmp_path, "--overwrite", "--vocab-size", "300").returncode == 0
    assert not os.path.exists(tmp_path / "unlabeled.tgt") and not os.path.exists(tmp_path / "testp.src")
    assert os.path.exists(tmp_path / "notes.src") and os.path.exists(tmp_path / "unlabeled.src")


def test_long_train_programs_are_dropped_and_val_is_kept_whole(tmp_path):
    result = make_fixture_data(tmp_path, "--max-chars", "300", "--vocab-size", "300")
    assert result.returncode == 0, result.stderr
    train = [(s, t) for s, t in zip(*(common.read_lines(tmp_path / f"train.{e}") for e in ("src", "tgt")))]
    assert "kept 3 of 6" in result.stdout and len(train) == 3
    assert all(len(s) <= 300 and len(t) <= 300 for s, t in train)
    assert len(common.read_lines(tmp_path / "val.tgt")) == 6


@pytest.mark.parametrize("args, named", [
    ([], "train/spoc-train.tsv"),                                        # the release's layout is missing
    (["--splits", "val", "--val", "nowhere.tsv"], "nowhere.tsv"),
    (["--splits", "val", "--val", EVAL_TSV, "--testcases", "nowhere"], "nowhere"),
])
def test_a_missing_file_is_a_one_line_error_naming_it(tmp_path, args, named):
    result = run_script("make_spoc.py", "--spoc", FIXTURE, "--out", str(tmp_path / "out"), *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "missing" in result.stderr and named in result.stderr
    assert not os.path.exists(tmp_path / "out")


def test_gold_programs_judge_correct(data):
    programs, cases = split_programs(data, "train")
    more, more_cases = split_programs(data, "val")
    verdicts = judge.judge_spoc_programs(programs + more, cases + more_cases)
    assert [v["verdict"] for v in verdicts] == ["correct"] * 12
    shared = [p for p in programs + more if judge.can_share_unit(p, judge.spoc_source)]
    assert len(shared) == 9 and any("return" not in p for p in shared)  # main-only ones share a unit


def mutants(program):
    """A gold program broken four ways, each with the verdict it must get."""
    main = "int main ( ) {"
    assert main in program
    return {"wrong_output": program.replace(main, main + " cout << 12345 ;"),
            "compile_error": program.replace(main, main + " undeclared_name ++ ;"),
            "runtime_error": program.replace(main, main + " int * p = 0 ; * p = 1 ;"),
            "timeout": program.replace(main, main + " while ( true ) { }")}


@pytest.fixture
def quick_runs(monkeypatch):
    """Shorter run limits; compiling keeps its own, since the plain path needs seconds on a busy machine."""
    monkeypatch.setattr(judge, "RUN_WALL_SECONDS", 2)
    monkeypatch.setattr(judge, "RUN_CPU_SECONDS", 1)


def test_broken_programs_get_their_verdict_the_same_on_the_fast_and_the_plain_path(data, quick_runs):
    programs, cases = split_programs(data, "val")
    broken = mutants(programs[0])
    batch = [programs[0], *broken.values(), programs[3]]
    batch_cases = [cases[0]] * (len(broken) + 1) + [cases[3]]
    fast = judge.judge_spoc_programs(batch, batch_cases)
    assert [v["verdict"] for v in fast] == ["correct", *broken, "correct"]
    assert fast[1]["case"] == 0 and fast[2]["error"].startswith("line 1: ") and "undeclared_name" in fast[2]["error"]
    plain = judge.judge_spoc_programs(batch, batch_cases, fast=False, jobs=1)
    assert plain == fast


def test_one_failed_case_of_many_is_wrong_output(data):
    programs, cases = split_programs(data, "val")
    last_wrong = cases[0][:-1] + [(cases[0][-1][0], "a different answer")]
    verdict, = judge.judge_spoc_programs([programs[0]], [last_wrong])
    assert verdict["verdict"] == "wrong_output" and verdict["case"] == len(cases[0]) - 1


@pytest.mark.usefixtures("quick_limits")
def test_hostile_programs_are_contained_as_whole_programs(data, tmp_path, monkeypatch):
    """The judge's hostile suite as SPoC programs with several test cases, each as it is (sharing a translation
    unit where it may) and with a global (compiled alone), mixed with gold programs; also a program printing
    much (under the cap) on every case."""
    programs, cases = split_programs(data, "val")
    alone = judge.judge_spoc_programs(programs, cases)
    judge_folder = tmp_path / "judge"
    judge_folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(judge_folder))
    if os.path.exists("/tmp/judge_shell_escape"):
        os.remove("/tmp/judge_shell_escape")
    outside = tmp_path / "escaped.txt"
    hostile = dict(HOSTILE, write_outside=(write_outside_program(outside), "correct", "blocked"),
                   much_output=("int main () { $ for ( int i = 0 ; i < 100000 ; i ++ ) cout << i << ' ' ; $ }",
                                "correct", " ".join(map(str, range(100000)))))
    variants = {f"{name}{suffix}": (prefix + program, verdict, gold) for name, (program, verdict, gold) in
                hostile.items() for suffix, prefix in (("", ""), (" with a global", "int spoc_global [ 100 ] ; $ "))}
    mixed = list(zip(programs, cases))
    for k, (program, _, gold) in enumerate(variants.values()):
        mixed.insert(k % 7, (program, [("1 2 3", gold), ("", gold), ("4", gold)]))
    verdicts = judge.judge_spoc_programs(*map(list, zip(*mixed)))
    by_program = {program: verdict for (program, _), verdict in zip(mixed, verdicts)}

    for name, (program, expected_verdict, _) in variants.items():
        assert by_program[program]["verdict"] == expected_verdict, name
    assert [by_program[p] for p in programs] == alone and all(v["verdict"] == "correct" for v in alone)
    assert not outside.exists() and not os.path.exists("/tmp/judge_shell_escape")
    assert processes_inside(judge_folder) == []
    assert [name for name in os.listdir(judge_folder) if name.startswith("judge-")] == []


def test_evaluate_judges_a_spoc_split(data, tmp_path):
    programs, _ = split_programs(data, "testw")
    predictions = tmp_path / "preds.txt"
    predictions.write_text("\n".join([programs[0], mutants(programs[1])["compile_error"], *programs[2:]]) + "\n")
    result = run_script("evaluate.py", "--predictions", str(predictions), "--data", str(data), "--split", "testw",
                        "--json", str(tmp_path / "summary.json"))
    assert result.returncode == 0, result.stderr
    assert "testw: n=6  compiled 83.3%  accuracy 83.3%" in result.stdout
    verdicts = [json.loads(line) for line in open(str(predictions) + ".verdicts.jsonl")]
    assert [v["verdict"] for v in verdicts] == ["correct", "compile_error"] + ["correct"] * 4
    predictions.write_text("\n".join(programs[:2]) + "\n")
    result = run_script("evaluate.py", "--predictions", str(predictions), "--data", str(data), "--split", "testw")
    assert result.returncode == 2 and "line counts differ" in result.stderr


# --- The stages on SPoC: Appendix E's noise and presets ----------------------------------------------------
def test_spoc_noise_edits_one_line_in_3_programs_of_4(data):
    programs = common.read_lines(os.path.join(data, "train.tgt")) + common.read_lines(os.path.join(data, "val.tgt"))
    rng, changed, total = random.Random(0), 0, 0
    for _ in range(100):
        for program in programs:
            noisy, total = spoc.corrupt_one_line(program, rng), total + 1
            if noisy == program:
                continue
            changed += 1
            before, after = program.split(" $ "), noisy.split(" $ ")
            diff = [op for op in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes()
                    if op[0] != "equal"]
            assert len(diff) == 1 and diff[0][2] - diff[0][1] == 1, (program, noisy)  # one line, edited or gone
            old, new = before[diff[0][1]].split(), " ".join(after[diff[0][3]:diff[0][4]]).split()
            assert abs(len(old) - len(new)) <= 1  # one token inserted, deleted or replaced
            assert not new or indentation(new) == indentation(old)
    assert 0.72 < changed / total < 0.78


def indentation(tokens):
    return len(tokens) - len(list(itertools.dropwhile(lambda token: token == "~", tokens)))


def test_spoc_noise_leaves_literals_and_preprocessor_lines_alone():
    program = '#define N 5 $ int main ( ) { $ ~ string s = "a b ; c" ; $ ~ cout << s << N ; $ }'
    rng = random.Random(1)
    noisy = [spoc.corrupt_one_line(program, rng) for _ in range(300)]
    assert all(n.startswith("#define N 5 $ ") and '"a b ; c"' in n for n in noisy)
    assert len(set(noisy)) > 50  # and yet many different edits
    assert spoc.corrupt_one_line(program, random.Random(7)) == spoc.corrupt_one_line(program, random.Random(7))


def test_spoc_presets_are_appendix_e(data):
    data = str(data)
    paper = {m: finetune.parse_args(["--method", m, "--preset", "paper", "--data", data]) for m in finetune.METHODS}
    baseline = paper["baseline"]
    assert (baseline.layers, baseline.n_heads, baseline.d_model, baseline.d_ff) == (5, 8, 256, 1024)
    assert (baseline.dropout, baseline.attention_dropout, baseline.activation_dropout, baseline.weight_decay) == \
        (0.4, 0.2, 0.2, 1e-4)
    assert (baseline.epochs, paper["standard"].epochs, paper["composed"].epochs) == (150, 150, 20)
    assert [common.label_smoothing_at(e, baseline.label_smoothing) for e in (1, 100, 101, 125, 126, 150)] == \
        [0.2, 0.2, 0.1, 0.1, 0.05, 0.05]
    assert common.label_smoothing_at(20, paper["composed"].label_smoothing) == 0.05
    denoiser = train_denoiser.parse_args(["--preset", "paper", "--data", data])
    assert (denoiser.corruption, denoiser.layers, denoiser.epochs) == ("line", 5, 36)
    assert [common.label_smoothing_at(e, denoiser.label_smoothing) for e in (20, 21, 24, 25, 36)] == \
        [0.2, 0.1, 0.1, 0.0, 0.0]
    sanstype = finetune.preset_values({"dataset": "sanstype"}, argparse.Namespace(method="baseline", preset="paper"))
    assert (sanstype["layers"], sanstype["n_heads"], sanstype["label_smoothing"]) == (3, 2, "0")  # unchanged
    assert train_denoiser.preset_values({"dataset": "sanstype", "corruption": "code"},
                                        argparse.Namespace(preset="paper"))["layers"] == 3


def test_the_denoiser_trains_on_spoc_code_and_repairs_a_file_of_programs(tmp_path, monkeypatch):
    result = make_fixture_data(tmp_path / "data", "--unlabeled", EVAL_TSV, "--vocab-size", "300")
    assert result.returncode == 0, result.stderr
    data = tmp_path / "data"
    assert len(common.read_lines(data / "unlabeled.tgt")) == 6
    pi = tmp_path / "pi"
    result = run_script("train_denoiser.py", "--preset", "smoke", "--data", str(data), "--out", str(pi),
                        "--repair-programs", "2")
    assert result.returncode == 0, result.stderr
    assert "12 outputs, line corruption, error detector compile" in result.stderr and "% correct" in result.stderr
    # Gold programs, the first broken: g passes the gold ones, which Pi leaves as they are, and flags the
    # broken one, which an untrained smoke denoiser does not give back.
    gold = common.read_lines(data / "testw.tgt")
    broken = gold[0].replace(";", "", 1)
    predictions = tmp_path / "gold.txt"
    common.write_lines(str(predictions), [broken] + gold[1:])
    result = run_script("evaluate.py", "--predictions", str(predictions), "--data", str(data), "--split", "testw",
                        "--denoiser", str(pi / "model.pt"))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in open(str(predictions) + ".denoised.verdicts.jsonl")]
    assert len(rows) == 6 and [row["prediction"] for row in rows[1:]] == gold[1:]
    assert rows[0]["prediction"] != broken
    assert all(row["verdict"] == "correct" for row in rows[1:])
    # Composed fine-tuning takes g along: into its checkpoint, and from there into evaluate.py's Pi(f(x)).
    for method, more in (("standard", []), ("composed", ["--init", str(tmp_path / "standard" / "model.pt")])):
        result = run_script("finetune.py", "--method", method, "--preset", "smoke", "--data", str(data),
                            "--denoiser", str(pi / "model.pt"), "--out", str(tmp_path / method), *more)
        assert result.returncode == 0, result.stderr
    assert torch.load(tmp_path / "composed" / "model.pt", weights_only=False)["denoiser"]["error_detector"] == "compile"
    result = run_script("finetune.py", "--method", "composed", "--estimator", "straight-through", "--preset", "smoke",
                        "--data", str(data), "--denoiser", str(pi / "model.pt"), "--out", str(tmp_path / "composed_st"),
                        "--init", str(tmp_path / "standard" / "model.pt"))
    assert result.returncode == 2 and "use --estimator reinforce" in result.stderr  # g's Pi passes no gradient
    assert not (tmp_path / "composed_st").exists()
    result = run_script("finetune.py", "--method", "backtranslation", "--preset", "smoke", "--data", str(data),
                        "--out", str(tmp_path / "backtranslation"))
    assert result.returncode == 0, result.stderr
    assert len(common.read_lines(tmp_path / "backtranslation" / "synthetic.src")) == 6  # the 6 unlabeled programs
    asked = []  # what g was asked about; it passes the programs at even positions and flags the others

    def every_other_passes(programs):
        asked.extend(programs)
        return [i % 2 == 0 for i in range(len(programs))]

    monkeypatch.setattr(judge, "compiles", every_other_passes)
    evaluate.main([str(tmp_path / "composed" / "model.pt"), "--data", str(data)])
    rows = [json.loads(line) for line in open(tmp_path / "composed" / "eval_testw_denoised.jsonl")]
    assert len(rows) == 6 and asked == [row["base"] for row in rows]
    assert all(row["prediction"] == row["base"] for row in rows[0::2])  # passed: left as f(x) wrote them
    assert all(row["prediction"] != row["base"] for row in rows[1::2])  # flagged: the untrained Pi rewrote them


def test_backtranslation_without_unlabeled_code_is_a_one_line_error_before_any_training(data, tmp_path):
    result = run_script("finetune.py", "--method", "backtranslation", "--preset", "smoke", "--data", str(data),
                        "--out", str(tmp_path / "bt"))
    assert result.returncode != 0 and "backtranslation needs unlabeled outputs" in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2 and not (tmp_path / "bt" / "reverse").exists()


def test_the_compiler_is_the_error_detector_and_denoise_repairs_only_what_it_flags(data):
    gold, _ = split_programs(data, "testw")
    broken = [program.replace(";", "", 1) for program in gold[:2]]
    assert judge.compiles(gold[:2] + broken) == [True, True, False, False]
    tokenizer = common.load_tokenizer(harness.read_data_folder(str(data))["spm"])
    config = common.TransformerConfig(vocab_size=tokenizer.get_piece_size(), d_model=16, n_heads=2, encoder_layers=1,
                                      decoder_layers=1, d_ff=32)
    untrained = common.Transformer(config)
    repaired = common.denoise(untrained, tokenizer, gold[:2] + broken, 4, judge.compiles)
    assert repaired[:2] == gold[:2]
    assert repaired[2:] == common.translate(untrained, tokenizer, broken, 4)
    assert common.denoise(untrained, tokenizer, gold[:2], 4) == common.translate(untrained, tokenizer, gold[:2], 4)
