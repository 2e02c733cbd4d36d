"""A task of one's own (make_task.py): a made-up task of a few dozen pairs goes through every stage at the smoke
preset, its validity command judges, the generic noise edits at the rates it is given, predict.py answers as
evaluate.py does; and the worked example from Python's standard library."""
import ast
import dataclasses
import hashlib
import io
import json
import os
import random
import re
import statistics
import subprocess
import sys

import pytest
import torch

import common
import harness
import evaluate
import finetune
import make_task
import predict
import train_denoiser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Valid: as many ( as ). A command of the user's, run by the shell in the data folder.
BALANCED = "python3 -c \"import sys; [print(int(l.count('(') == l.count(')'))) for l in sys.stdin]\""


def script(name, *args, **kwargs):
    return subprocess.run([sys.executable, os.path.join(ROOT, name), *map(str, args)], capture_output=True,
                          text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, **kwargs)


def arithmetic(rng, depth=3):
    """(words, prefix expression): '3 plus 4 times 2' -> '( * ( + 3 4 ) 2 )'."""
    if depth == 0 or rng.random() < 0.3:
        n = str(rng.randint(1, 9))
        return n, n
    op, word = rng.choice([("+", "plus"), ("*", "times"), ("-", "minus")])
    (a, a_code), (b, b_code) = arithmetic(rng, depth - 1), arithmetic(rng, depth - 1)
    return f"{a} {word} {b}", f"( {op} {a_code} {b_code} )"


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """A made-up task: 80 pairs (60 to train, 10 val, 10 test), 100 unlabeled outputs, a validity command."""
    w = tmp_path_factory.mktemp("task")
    rng = random.Random(0)
    pairs = [arithmetic(rng) for _ in range(80)]
    common.write_lines(str(w / "in.txt"), [x for x, _ in pairs])
    common.write_lines(str(w / "out.txt"), [y for _, y in pairs])
    common.write_lines(str(w / "more.txt"), [arithmetic(rng)[1] for _ in range(100)])
    make_task.main(["--pairs", str(w / "in.txt"), str(w / "out.txt"), "--unlabeled", str(w / "more.txt"), "--val",
                    "10", "--test", "10", "--vocab-size", "40", "--valid-command", BALANCED, "--out", str(w / "data")])
    return w


def test_a_task_of_ones_own_goes_through_every_stage(task):
    """make -> Pi -> standard -> composed -> evaluate (with and without Pi) -> --table, with the presets unchanged,
    the generic noise for Pi, and the task's validity command as the judge: its verdicts reach the table."""
    data, runs = task / "data", task / "runs"
    manifest = json.load(open(data / "dataset.json"))
    assert manifest["dataset"] == "task" and manifest["gold_valid"] == 1.0
    assert [len(common.read_lines(str(data / f"{split}.src"))) for split in ("train", "val", "test")] == [60, 10, 10]
    for stage in (["train_denoiser.py", "--out", runs / "pi"],
                  ["finetune.py", "--method", "standard", "--denoiser", runs / "pi/model.pt", "--out", runs / "std"],
                  ["finetune.py", "--method", "composed", "--denoiser", runs / "pi/model.pt", "--init",
                   runs / "std/model.pt", "--out", runs / "composed"],
                  ["evaluate.py", runs / "composed/model.pt"],
                  ["evaluate.py", runs / "std/model.pt", "--denoiser", runs / "pi/model.pt"]):
        result = script(stage[0], *stage[1:], "--data", data, *(["--preset", "smoke"] * ("evaluate" not in stage[0])))
        assert result.returncode == 0, result.stderr
        if stage[0] == "train_denoiser.py":  # the repair report counts what the noise changed, recomputed here
            assert "edits corruption" in result.stderr and "% valid" in result.stderr
            args = train_denoiser.parse_args(["--data", str(data), "--preset", "smoke"])
            tokenizer = common.load_tokenizer(harness.read_data_folder(str(data))["spm"])
            val, rng = common.read_lines(str(data / "val.tgt")), random.Random("0-val")
            noisy = [train_denoiser.CORRUPTIONS["edits"].corrupt(y, rng, args, tokenizer) for y in val]
            fingerprint = hashlib.sha256("\n".join(noisy).encode()).hexdigest()[:8]  # which corruptions they were
            assert f"repairs of 10 val outputs (noise {fingerprint}): {sum(n != y for n, y in zip(noisy, val))} " \
                "changed by the noise" in result.stderr
    verdicts = [json.loads(line) for line in open(runs / "composed" / "eval_test_denoised.jsonl")]
    outputs = [v["prediction"] for v in verdicts]
    balanced = [output.count("(") == output.count(")") for output in outputs]
    assert [v["verdict"] != "invalid" for v in verdicts] == balanced
    assert [v["verdict"] == "correct" for v in verdicts] == [
        output == gold for output, gold in zip(outputs, common.read_lines(str(data / "test.tgt")))]
    table = script("evaluate.py", "--table", runs / "std", runs / "composed")
    assert table.returncode == 0, table.stderr
    row = next(line.split(" | ") for line in table.stdout.splitlines() if line.startswith("| composed (1 run) |"))
    assert float(row[1]) == pytest.approx(100 * sum(balanced) / len(balanced), abs=0.05)  # test compiled: valid


def test_predict_answers_as_evaluate_does(task):
    """predict.py's outputs for the test inputs are evaluate.py's, for Pi(f(x)) (a composed model's own Pi) and f."""
    data, runs = task / "data", task / "runs"
    if not (runs / "composed" / "eval_test_denoised.jsonl").exists():
        pytest.skip("needs the chain of test_a_task_of_ones_own_goes_through_every_stage")
    judged = [json.loads(line) for line in open(runs / "composed" / "eval_test_denoised.jsonl")]
    composed = script("predict.py", runs / "composed/model.pt", "--input", data / "test.src")
    assert composed.returncode == 0, composed.stderr
    assert composed.stdout.splitlines() == [v["prediction"] for v in judged]
    alone = script("predict.py", runs / "composed/model.pt", "--denoiser", "none",
                   input=open(data / "test.src").read())  # standard input
    assert alone.stdout.splitlines() == [v["base"] for v in judged]
    sources = common.read_lines(str(data / "test.src"))[:2]  # an empty input line is answered with an empty line
    gapped = script("predict.py", runs / "composed/model.pt", input=f"{sources[0]}\n\n{sources[1]}\n")
    pair = script("predict.py", runs / "composed/model.pt", input=f"{sources[0]}\n{sources[1]}\n").stdout.split("\n")
    assert gapped.stdout.splitlines() == [pair[0], "", pair[1]]  # (the same batch: a length limit is a batch's)
    other = torch.load(runs / "pi/model.pt", weights_only=False)  # a Pi of another tokenizer: named as such
    torch.save({**other, "spm": b"another tokenizer"}, runs / "other_pi.pt")
    refused = script("predict.py", runs / "composed/model.pt", "--denoiser", runs / "other_pi.pt", input="1 plus 2\n")
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        f"{runs / 'other_pi.pt'} and {runs / 'composed/model.pt'} use different tokenizers: retrain one on the same "
        "data"), refused.stderr


@pytest.mark.parametrize("kind", ["delete", "insert", "substitute", "swap"])
def test_the_generic_noise_edits_at_the_rates_it_is_given(kind):
    """Each edit alone at rate 0.2, on 2000 outputs of 30 distinct pieces: 0.2 of the pieces deleted, 0.2 as many
    inserted, 0.2 replaced (by one of the output's 30, so 29/30 of them by another), 0.2 of the neighbours swapped
    (each swap moves two pieces, and a piece swapped twice in a row moves one place on)."""
    rates = tuple(0.2 if name == kind else 0.0 for name in ("delete", "insert", "substitute", "swap"))
    rng = random.Random(0)
    pieces = [f"p{i}" for i in range(30)]
    before = after = changed = 0
    for _ in range(2000):
        noisy = common.edit_pieces(pieces, rng, rates)
        before, after = before + len(pieces), after + len(noisy)
        changed += sum(a != b for a, b in zip(pieces, noisy)) if len(noisy) == len(pieces) else 0
    measured = {"delete": 1 - after / before, "insert": after / before - 1, "substitute": changed / before / (29 / 30),
                "swap": changed / before / 2 / (29 / 30)}[kind]
    assert measured == pytest.approx(0.2, abs=0.01 if kind != "swap" else 0.03)



def test_the_generic_noise_changes_every_output_it_corrupts():
    """A tenth of the outputs are left clean; every other one differs from its original, however short (at the
    default rates a 3-piece output would draw no edit 70% of the time), with more edits the longer the output."""
    rng, rates = random.Random(1), train_denoiser.PRESETS["edit_rates"][1]  # (the cpu preset's)
    rates = tuple(map(float, rates.split(",")))
    for text in ("a b c", "a", "x y"):
        clean = sum(common.corrupt_pieces(text, rng, FakeTokenizer(), rates) == text for _ in range(2000))
        assert clean / 2000 == pytest.approx(0.1, abs=0.02), text
    long = " ".join(f"p{i}" for i in range(200))
    changed = statistics.mean(sum(a != b for a, b in zip(long.split(), common.corrupt_pieces(
        long, rng, FakeTokenizer(), rates).split())) for _ in range(200))
    assert changed > 20  # edits scale with the length: a shifted tail counts every piece after it


class FakeTokenizer:
    """Pieces are words."""
    def encode(self, text, out_type):
        return text.split()

    def decode(self, pieces):
        return " ".join(pieces)


def test_bad_task_input_is_one_line_and_writes_nothing(task, capsys):
    w = task
    common.write_lines(str(w / "short.txt"), ["1 plus 2"])
    for argv, word in [
            (["--pairs", str(w / "in.txt"), str(w / "short.txt")], "has 80 lines"),
            (["--pairs", str(w / "in.txt"), str(w / "out.txt"), "--valid-command", "echo 1"],
             "printed 1 verdicts for 80 outputs"),
            (["--pairs", str(w / "in.txt"), str(w / "out.txt"), "--valid-command", "exit 3"], "exited with 3"),
            (["--pairs", str(w / "in.txt"), str(w / "out.txt"), "--val", "70", "--test", "10"], "too few"),
            (["--pairs", str(w / "in.txt"), str(w / "nowhere.txt")], "missing file"),
            (["--pairs", str(w / "in.txt"), str(w / "out.txt"), "--labeled", "-1"], "--labeled -1: must be at least 0"),
            (["--python-stdlib", "--valid-command", "true"], "makes its own")]:
        with pytest.raises(SystemExit) as exit_:
            make_task.main(["--val", "10", "--test", "10"] + argv + ["--out", str(w / "new")])
        out, err = capsys.readouterr()
        err = err.strip()
        assert exit_.value.code == 2 and len(err.splitlines()) == 1 and word in err, (argv, err)
        assert not (w / "new").exists()  # nothing written, nothing left behind
        assert "tokenizer" not in out  # refused before any work, a judge too
    with pytest.raises(SystemExit):
        train_denoiser.main(["--data", str(w / "data"), "--preset", "smoke", "--edit-rates", "0.1,0.1", "--out",
                             str(w / "new")])
    assert "four probabilities" in capsys.readouterr().err


@pytest.mark.parametrize("corruption", ["code", "random"])
def test_a_noise_that_cannot_read_the_outputs_is_refused_before_any_work(task, tmp_path, corruption):
    """SansType's code noises read programs of ` $ `-separated statements: on a task's outputs (prefix expressions)
    they are refused in one line, exit 2, before any run folder is made (74: the smoke preset's 64 and val's 10)."""
    result = script("train_denoiser.py", "--data", task / "data", "--preset", "smoke", "--corruption", corruption,
                    "--out", tmp_path / "pi")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert f"--corruption {corruption} cannot read 74 of the outputs in {task / 'data'}" in result.stderr
    assert not (tmp_path / "pi").exists()


def test_the_worked_example_is_pythons_own_code_and_parser(tmp_path):
    """make_task.py --python-stdlib: docstring summaries to one-line functions, every gold output parsed by Python
    (valid.py, the task's judge), the ood split from packages no other split holds."""
    make_task.main(["--python-stdlib", "--out", str(tmp_path)])
    manifest = json.load(open(tmp_path / "dataset.json"))
    assert manifest["gold_valid"] == 1.0 and manifest["valid_command"] == "python3 valid.py"
    train, ood = (common.read_lines(str(tmp_path / f"{split}.tgt")) for split in ("train", "ood"))
    assert len(train) > 1000 and len(common.read_lines(str(tmp_path / "unlabeled.tgt"))) > 3000
    assert all(line.startswith(("def ", "async def ")) for line in train + ood)
    assert sum("self.tk.call" in line for line in ood) > 50 > sum("self.tk.call" in line for line in train)
    broken = [line.replace(":", "", 1) for line in train[:50]]  # a def without its colon
    assert harness.valid_outputs(str(tmp_path), broken + train[:50]) == [False] * 50 + [True] * 50


def test_the_readmes_lines_of_python_give_what_predict_gives(task, tmp_path):
    """The README's lines "From Python", run from another folder on this task's composed model: Pi(f(x)), as
    predict.py prints it (one function, predict.predictions, serves both)."""
    data, runs = task / "data", task / "runs"
    if not (runs / "composed" / "model.pt").exists():
        pytest.skip("needs the chain of test_a_task_of_ones_own_goes_through_every_stage")
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    code = readme.split("```python\n")[1].split("```")[0]
    sources = common.read_lines(str(data / "test.src"))[:3]
    code = code.replace("/path/to/composed-finetuning/runs/mine/composed_0/", f"{runs}/composed/").replace(
        "/path/to/composed-finetuning", ROOT).replace('["an input of your own"]', repr(sources))
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    predicted = script("predict.py", runs / "composed/model.pt", input="".join(x + "\n" for x in sources))
    assert ast.literal_eval(ran.stdout) == predicted.stdout.splitlines() != []


def test_the_readmes_own_task_chain_runs_as_written(task, tmp_path):
    """The README's commands for a task of one's own, run as written in a fresh folder on a tiny made-up task (the
    smoke preset, tiny splits): every stage, every evaluation, the table, predict.py."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    block = readme.split("## Your own task")[1].split("```bash\n")[1].split("```")[0]
    for name in ("in.txt", "out.txt", "more.txt"):
        (tmp_path / name).write_text((task / name).read_text())
    (tmp_path / "check.py").write_text(f"import subprocess, sys\nsys.exit(subprocess.run({BALANCED!r}, shell=True)"
                                       ".returncode)\n")
    (tmp_path / "new_inputs.txt").write_text("1 plus 2\n3 times 4\n")
    lines = []
    for line in block.replace("inputs.txt outputs.txt --unlabeled more_outputs.txt", "in.txt out.txt --unlabeled "
                              "more.txt").replace("for s in 0 1 2;", "for s in 0 1;").splitlines():  # two seeds
        line = line.split("  #")[0]
        if line.startswith("python make_task.py"):
            line += " --val 10 --test 10 --vocab-size 40"
        for stage in ("python train_denoiser.py", "python finetune.py"):  # (the lanes' loops hold them mid-line)
            line = line.replace(stage, f"{stage} --preset smoke")
        lines.append(line.replace("python ", f"{sys.executable} {ROOT}/"))
    ran = subprocess.run(["bash", "-c", "set -e\n" + "\n".join(lines)], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert ran.returncode == 0, ran.stderr[-3000:]
    for run in ("baseline", "standard", "composed", "control"):
        for seed in (0, 1):
            assert {"eval_test.json", "eval_test_denoised.json"} <= set(os.listdir(tmp_path / "runs/mine" /
                                                                                   f"{run}_{seed}"))
    control = torch.load(tmp_path / "runs/mine/control_0/model.pt", weights_only=False)["args"]
    assert control["composed_weight"] == 0 and control["method"] == "composed"
    assert "| composed_{0,1} (2 seeds) |" in ran.stdout  # the seeds' mean ± std, and their pairs
    assert "| composed_{0,1} - (standard_{0,1} + Pi), paired (2 seeds) |" in ran.stdout
    assert len((tmp_path / "outputs.txt").read_text().splitlines()) == 2


def test_a_task_waits_longer_for_a_better_epoch(task):
    """A task's fine-tuning stages stop 30 epochs after their best (SansType's cpu preset: 10); composed keeps its 3."""
    patience = {method: finetune.parse_args(["--method", method, "--data", str(task / "data")]).patience
                for method in ("baseline", "standard", "composed")}
    assert patience == {"baseline": 30, "standard": 30, "composed": 3}


def test_splits_of_ones_own_go_in_as_they_are(task, tmp_path):
    """--splits DIR: train, val, test and ood as given, in their order, nothing shuffled or left out."""
    given = tmp_path / "given"
    given.mkdir()
    for split in ("train", "val", "test", "ood"):
        for side in ("src", "tgt"):  # the made-up task's splits, with ood as a second copy of test
            lines = common.read_lines(str(task / "data" / f"{'test' if split == 'ood' else split}.{side}"))
            common.write_lines(str(given / f"{split}.{side}"), lines[::-1] if split == "ood" else lines)
    make_task.main(["--splits", str(given), "--unlabeled", str(task / "more.txt"), "--vocab-size", "40",
                    "--valid-command", BALANCED, "--out", str(tmp_path / "data")])
    for split in ("train", "val", "test", "ood"):
        for side in ("src", "tgt"):
            assert common.read_lines(str(tmp_path / "data" / f"{split}.{side}")) == \
                common.read_lines(str(given / f"{split}.{side}")), (split, side)
    with pytest.raises(SystemExit):  # a folder without its test split
        make_task.main(["--splits", str(task), "--out", str(tmp_path / "none")])


def test_splits_take_their_folders_unlabeled_outputs_and_say_when_there_are_none(task, tmp_path, capsys):
    """--splits DIR takes DIR/unlabeled.tgt when it is there (--unlabeled wins); without any, a line says what the
    denoiser will learn from."""
    given = tmp_path / "given"
    given.mkdir()
    for split in ("train", "val", "test"):
        for side in ("src", "tgt"):
            common.write_lines(str(given / f"{split}.{side}"), common.read_lines(str(task / "data" / f"{split}.{side}")))
    make_task.main(["--splits", str(given), "--vocab-size", "40", "--out", str(tmp_path / "bare")])
    said = capsys.readouterr().out
    train = common.read_lines(str(given / "train.tgt"))
    assert f"unlabeled outputs 0: the denoiser will learn from train's {len(train)} outputs alone" in said
    more = common.read_lines(str(task / "more.txt"))
    common.write_lines(str(given / "unlabeled.tgt"), more)
    make_task.main(["--splits", str(given), "--vocab-size", "40", "--out", str(tmp_path / "data")])
    assert f"unlabeled outputs {len(more)}\n" in capsys.readouterr().out
    assert common.read_lines(str(tmp_path / "data" / "unlabeled.tgt")) == more


def test_a_tasks_tokenizer_keeps_every_digit_a_piece(tmp_path):
    """Numbers are copied digit by digit: BPE over many numbers would merge frequent digit pairs into pieces."""
    rng = random.Random(0)
    numbers = [(rng.randint(0, 9999), rng.randint(0, 9999)) for _ in range(300)]
    common.write_lines(str(tmp_path / "x.txt"), [f"add {a} and {b}" for a, b in numbers])
    common.write_lines(str(tmp_path / "y.txt"), [f"{a + b}" for a, b in numbers])
    make_task.main(["--pairs", str(tmp_path / "x.txt"), str(tmp_path / "y.txt"), "--val", "20", "--test", "20",
                    "--vocab-size", "100", "--out", str(tmp_path / "data")])
    tokenizer = common.load_tokenizer(harness.read_data_folder(str(tmp_path / "data"))["spm"])
    pieces = [piece for text in common.read_lines(str(tmp_path / "data" / "train.src")) for piece in
              tokenizer.encode(text, out_type=str)]
    assert all(len(piece.strip("▁")) <= 1 for piece in pieces if any(c.isdigit() for c in piece))


def test_the_dates_example_judges_real_dates(tmp_path):
    """make_task.py --dates: train's four phrasings, ood's fifth, ISO dates out, valid.py accepts real dates only."""
    make_task.main(["--dates", "--out", str(tmp_path)])
    assert json.load(open(tmp_path / "dataset.json"))["gold_valid"] == 1.0
    train_src, ood_src = (common.read_lines(str(tmp_path / f"{split}.src")) for split in ("train", "ood"))
    assert not any("in the year" in x for x in train_src) and all("in the year" in x for x in ood_src)
    outputs = [y for split in ("train", "val", "test", "ood")
               for y in common.read_lines(str(tmp_path / f"{split}.tgt"))]
    assert len(set(outputs) | set(common.read_lines(str(tmp_path / "unlabeled.tgt")))) == 22500  # each day once
    assert harness.valid_outputs(str(tmp_path), ["2020-02-29", "2021-02-29", "2021-13-01", "21-03-14", "1999-12-31"]
                                ) == [True, False, False, False, True]


# Valid: text an old Latin-1 tool could read (9½ is; 91⁄2, its NFKC form, is not).
LATIN_1 = "python3 -c \"import sys; [print(int(all(ord(c) < 256 for c in l))) for l in sys.stdin]\""
# Outputs where every space matters (an output of one space is not empty), or NFKC would change them (½, ﬁ, a no-break
# space, a full-width letter); test's last two hold characters that no training text has.
SPACED = [" ", "  lead", "trail  ", "two  spaces", "\tx = 1", "9½", "ﬁx", "a\u00a0b", "Ａ", "x"]


def test_a_tasks_outputs_come_back_byte_for_byte(tmp_path, capsys):
    """Outputs are written, and judged (gold_valid), exactly as given, and the tokenizer gives each back as it is, an
    output of test with a character no training text has too: a model can write the gold exactly. An input of
    spaces is not empty either; an empty line is."""
    given = tmp_path / "given"
    given.mkdir()
    splits = {"train": SPACED * 2, "val": SPACED[:3], "test": SPACED[3:] + ["中 ½", " é "]}
    for split, outputs in splits.items():
        common.write_lines(str(given / f"{split}.src"), ["  "] + [f"say {i}" for i in range(1, len(outputs))])
        common.write_lines(str(given / f"{split}.tgt"), outputs)
    make_task.main(["--splits", str(given), "--vocab-size", "60", "--valid-command", LATIN_1, "--out",
                    str(tmp_path / "data")])
    tokenizer = common.load_tokenizer(harness.read_data_folder(str(tmp_path / "data"))["spm"])
    for split, outputs in splits.items():
        assert common.read_lines(str(tmp_path / "data" / f"{split}.tgt")) == outputs, split
        assert [tokenizer.decode(tokenizer.encode(y)) for y in outputs] == outputs, split
    gold = [y for outputs in splits.values() for y in outputs]
    share = round(sum(all(ord(c) < 256 for c in y) for y in gold) / len(gold), 4)
    assert json.load(open(tmp_path / "data" / "dataset.json"))["gold_valid"] == share < 1
    assert f"the validity command passes {100 * share:.1f}% of the {len(gold)} gold outputs" in capsys.readouterr().out
    common.write_lines(str(given / "test.tgt"), splits["test"][:-1] + [""])
    with pytest.raises(SystemExit) as exit_:
        make_task.main(["--splits", str(given), "--out", str(tmp_path / "empty")])
    assert exit_.value.code == 2 and "line 9 is empty" in capsys.readouterr().err


def test_outputs_the_tokenizer_cannot_keep_are_refused_before_anything_is_written(tmp_path, capsys):
    """An output holding ▁ (U+2581: sentencepiece's own mark for a space, which it gives back as one) would change in
    the tokenizer: refused in one line showing it and what to do, exit 2, nothing written."""
    common.write_lines(str(tmp_path / "x.txt"), [f"say {i}" for i in range(20)])
    common.write_lines(str(tmp_path / "y.txt"), [f"{i}" if i != 7 else "7\u2581x" for i in range(20)])
    with pytest.raises(SystemExit) as exit_:
        make_task.main(["--pairs", str(tmp_path / "x.txt"), str(tmp_path / "y.txt"), "--val", "5", "--test", "5",
                        "--vocab-size", "30", "--out", str(tmp_path / "data")])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1, err
    assert "1 of the outputs would change in the tokenizer, e.g. '7\u2581x' as '7 x': write what changes" in err, err
    assert not (tmp_path / "data").exists()


def test_a_validity_command_that_cannot_run_is_refused_before_any_work(task, tmp_path, monkeypatch, capsys):
    """A command that does not exist, or fails on a gold output, is one line and exit 2 before the tokenizer trains,
    with nothing written."""
    monkeypatch.setattr(common, "train_tokenizer", lambda *args, **kwargs: pytest.fail("the tokenizer trained"))
    for command in ("no-such-judge", "python3 no_such_judge.py", "exit 3"):
        with pytest.raises(SystemExit) as exit_:
            make_task.main(["--pairs", str(task / "in.txt"), str(task / "out.txt"), "--val", "10", "--test", "10",
                            "--valid-command", command, "--out", str(tmp_path / "data")])
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2 and len(err.splitlines()) == 1 and command in err, err
    assert os.listdir(tmp_path) == []


def test_overwrite_replaces_the_data_and_keeps_the_users_own_files(task, tmp_path, capsys):
    """make_task.py --overwrite without --ood leaves no ood split of the data it replaces (evaluate.py would judge
    it), nor another make_*.py's split files (train.inp) or a worked example's judge; the user's own files stay, those
    named like data too: the judge (check.py), notes.src, inputs for finetune.py --unlabeled-inputs (unlabeled.src),
    this run's inputs."""
    out = tmp_path / "data"
    out.mkdir()
    (out / "check.py").write_text("import subprocess, sys\n"
                                  f"sys.exit(subprocess.run({BALANCED!r}, shell=True).returncode)\n")
    pairs = [str(task / "in.txt"), str(task / "out.txt")]
    make_task.main(["--pairs", *pairs, "--ood", *pairs, "--val", "10", "--test", "10", "--vocab-size", "40",
                    "--out", str(out)])
    for name in ("unlabeled.src", "notes.src", "train.inp"):
        (out / name).write_text("1 plus 2\n")
    (out / "valid.py").write_text(make_task.DATES_JUDGE)
    for name in ("mine.src", "mine.tgt"):
        (out / name).write_bytes((task / ("in.txt" if name.endswith("src") else "out.txt")).read_bytes())
    make_task.main(["--pairs", str(out / "mine.src"), str(out / "mine.tgt"), "--val", "10", "--test", "10",
                    "--vocab-size", "40", "--valid-command", "python3 check.py", "--out", str(out), "--overwrite"])
    assert sorted(os.listdir(out)) == ["check.py", "dataset.json", "mine.src", "mine.tgt", "notes.src", "spm.model",
                                       "test.src", "test.tgt", "train.src", "train.tgt", "unlabeled.src",
                                       "unlabeled.tgt", "val.src", "val.tgt"]
    assert evaluate.default_splits(str(out)) == "test"


def test_the_validity_command_runs_in_the_data_folder(task, tmp_path, capsys):
    """make_task.py runs the command in --out, as the later stages do, whether --out is there yet or not: a judge the
    user put there beforehand is found; a command that fails leaves that folder as it was."""
    out = tmp_path / "data"
    flags = ["--pairs", str(task / "in.txt"), str(task / "out.txt"), "--val", "10", "--test", "10", "--vocab-size",
             "40", "--out", str(out)]
    here = f"python3 -c \"import os, sys; [print(int(os.getcwd() == {os.path.realpath(out)!r})) for l in sys.stdin]\""
    make_task.main(flags + ["--valid-command", here])  # (a new --out)
    assert json.load(open(out / "dataset.json"))["gold_valid"] == 1.0
    assert harness.valid_outputs(str(out), ["( + 1 2 )"]) == [True]
    for name in os.listdir(out):
        os.remove(out / name)
    (out / "check.py").write_text("import subprocess, sys\n"
                                  f"sys.exit(subprocess.run({BALANCED!r}, shell=True).returncode)\n")
    with pytest.raises(SystemExit) as exit_:
        make_task.main(flags + ["--valid-command", "exit 3"])
    assert exit_.value.code == 2 and os.listdir(out) == ["check.py"]
    make_task.main(flags + ["--valid-command", "python3 check.py"])
    assert json.load(open(out / "dataset.json"))["gold_valid"] == 1.0


def test_the_docstrings_examples_run_as_written(task, tmp_path):
    """make_task.py's docstring examples of pairs, run by the shell as written in a folder that holds their files and
    the user's judge (check.py), each make their data folder: a relative --out, a judge named by its full path."""
    for name, source in (("questions.txt", "in.txt"), ("queries.txt", "out.txt"), ("more_queries.txt", "more.txt"),
                         ("in.txt", "in.txt"), ("out.txt", "out.txt")):
        (tmp_path / name).write_text((task / source).read_text())
    (tmp_path / "check.py").write_text(f"import subprocess, sys\nsys.exit(subprocess.run({BALANCED!r}, shell=True)"
                                       ".returncode)\n")
    examples = [line.split("  #")[0].strip() for line in make_task.__doc__.splitlines()
                if line.strip().startswith("python make_task.py --pairs")]
    assert len(examples) == 2
    for example in examples:
        command = example.replace("python ", f"{sys.executable} {ROOT}/", 1) + " --val 10 --test 10 --vocab-size 40"
        ran = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=tmp_path,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert ran.returncode == 0, (example, ran.stderr)
    assert json.load(open(tmp_path / "data" / "mytask" / "dataset.json"))["gold_valid"] == 1.0


@pytest.mark.parametrize("flags, word", [
    (["--val", "1"], "--val"), (["--test", "1"], "--test"), (["--labeled", "2"], "--labeled"),
    (["--seed", "1"], "--seed"), ([], "test.src is empty")])
def test_splits_of_ones_own_are_refused_when_flags_or_a_split_would_do_nothing(tmp_path, capsys, flags, word):
    """--splits DIR takes splits as they are: flags that shuffle or size splits would be ignored, and an empty split
    would leave evaluate.py nothing to score. One line, exit 2, nothing written."""
    for split, lines in (("train", ["1 plus 2", "3 times 4"]), ("val", ["5 minus 1"]), ("test", [])):
        common.write_lines(str(tmp_path / f"{split}.src"), lines)
        common.write_lines(str(tmp_path / f"{split}.tgt"), [f"( {line} )" for line in lines])
    with pytest.raises(SystemExit) as exit_:
        make_task.main(["--splits", str(tmp_path), *flags, "--out", str(tmp_path / "data")])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and word in err, err
    assert not (tmp_path / "data").exists()


def test_predict_reads_one_input_a_line_on_stdin_and_from_a_file(tmp_path, monkeypatch, capsys):
    """Inputs break at "\\n" (a "\\r\\n" ending too) only: U+2028, U+0085 or a form feed inside an input keep it one
    input, on standard input as with --input, so that the outputs line up with the inputs."""
    text = "1 plus 2\n3\u2028times 4\r\n5 minus\x85 6\x0c\n"
    inputs = ["1 plus 2", "3\u2028times 4", "5 minus\x85 6\x0c"]
    monkeypatch.setattr(predict, "predictions", lambda model, texts, *rest: [f"<{x}>" for x in texts])  # an echo
    (tmp_path / "in.txt").write_bytes(text.encode())
    predict.main(["model.pt", "--input", str(tmp_path / "in.txt")])
    from_file = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO(text, newline="\n"))  # as Python reads it on Linux: untranslated
    predict.main(["model.pt"])
    assert capsys.readouterr().out == from_file == "".join(f"<{x}>\n" for x in inputs)
    assert predict.read_inputs("a\r\nb\rc\n\n") == ["a", "b\rc", ""] and predict.read_inputs("") == []


def test_edit_rates_that_never_edit_are_refused(task, capsys):
    """--edit-rates 0,0,0,0 could never change an output (100 draws each, then a deletion): refused."""
    with pytest.raises(SystemExit) as exit_:
        train_denoiser.parse_args(["--data", str(task / "data"), "--preset", "smoke", "--edit-rates", "0,0,0,0"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "--edit-rates 0,0,0,0" in err and "zero" in err, err


def untrained(data, path, role, args):
    """A model of the run's sizes with random weights, saved as a training script saves one."""
    spm = harness.read_data_folder(str(data))["spm"]
    model = common.Transformer(harness.transformer_config(args, common.load_tokenizer(spm).get_piece_size()))
    harness.save_checkpoint(str(path), {"config": dataclasses.asdict(model.config), "model": model.state_dict(),
                                       "spm": spm, "role": role, "args": vars(args)})
    return path


@pytest.mark.parametrize("keep_by, shares, kept", [("loss", [2, 3, 6, 6], 1), ("valid", [2, 3, 6, 6], 2),
                                                    ("exact", [2, 3, 6, 6], 1), ("valid", [10] * 4, 1)])
def test_the_kept_epoch_is_the_one_the_users_judge_prefers(task, tmp_path, monkeypatch, capsys, keep_by, shares, kept):
    """Composed epochs 0-3 with made-up validation losses 1.0, 0.5, 0.7, 0.8 and shares of val valid 2, 3, 6, 6 of 10:
    --keep-by loss keeps epoch 1; valid keeps the most valid, its tie broken by the loss (2, not the newer 3); exact,
    where no output of an untrained f is exact (all tied), falls back on the loss (1). Where every epoch passes all
    of val, the loss alone chooses, and the run says so."""
    data = task / "data"
    flags = ["--data", str(data), "--preset", "smoke"]
    pi = untrained(data, tmp_path / "pi.pt", "denoiser", train_denoiser.parse_args(flags))
    f = untrained(data, tmp_path / "f.pt", "predictor", finetune.parse_args(["--method", "standard", *flags]))
    losses, valid = iter([1.0, 0.5, 0.7, 0.8]), iter(shares)
    monkeypatch.setattr(common, "composed_validation_loss", lambda *args: next(losses))
    judged = []
    monkeypatch.setattr(harness, "valid_outputs", lambda folder, outputs: judged.append(outputs) or (
        [True] * next(valid) + [False] * 10)[:len(outputs)])
    finetune.main(["--method", "composed", *flags, "--denoiser", str(pi), "--init", str(f), "--epochs", "3",
                   "--patience", "3", "--keep-by", keep_by, "--out", str(tmp_path / "composed")])
    assert harness.load_checkpoint(str(tmp_path / "composed" / "model.pt"), needs=())["epoch"] == kept
    assert len(judged) == 4 * (keep_by == "valid") and all(len(outputs) == 10 for outputs in judged)
    assert ("val share 100.0%: every output passes, so the loss chose" in capsys.readouterr().out) == (shares[0] == 10)


def test_the_validity_command_as_pis_error_detector_leaves_valid_outputs_untouched(task, tmp_path, monkeypatch):
    """train_denoiser.py --error-detector valid: Pi (a smoke one, which rewrites much of what it reads) leaves every
    output the task's command passes as it is and repairs only the others, from any folder; its weights are those
    of the same run without g (g is not in Pi's loss)."""
    data = task / "data"
    for detector in ("valid", "none"):
        train_denoiser.main(["--data", str(data), "--preset", "smoke", "--error-detector", detector,
                             "--out", str(tmp_path / detector)])
    with_g, without = (harness.load_checkpoint(str(tmp_path / d / "model.pt")) for d in ("valid", "none"))
    assert all(torch.equal(with_g["model"][name], weight) for name, weight in without["model"].items())
    tokenizer = common.load_tokenizer(with_g["spm"])
    outputs = common.read_lines(str(data / "val.tgt")) + ["( + 1 2", "( * ( - 3 4 ) 2", "1 )"]
    valid = [output.count("(") == output.count(")") for output in outputs]
    monkeypatch.chdir(tmp_path)  # g runs the command in the data folder Pi was trained on, wherever Pi is used
    pi = harness.model_from_checkpoint(with_g)
    repaired = common.denoise(pi, tokenizer, outputs, 4, harness.error_detector(with_g))
    everywhere = common.denoise(pi, tokenizer, outputs, 4, harness.error_detector(without))
    assert [r for r, ok in zip(repaired, valid) if ok] == [o for o, ok in zip(outputs, valid) if ok]
    assert [r for r, ok in zip(repaired, valid) if not ok] == common.translate(
        pi, tokenizer, [o for o, ok in zip(outputs, valid) if not ok], 4)  # the others go through Pi
    assert everywhere != outputs  # (without g, Pi does rewrite valid outputs)


def test_a_tasks_evaluation_says_how_near_its_outputs_are():
    """A task's summary: the outputs' words over the gold's and their mean token F1, which a short valid output that
    says little scores low on."""
    verdicts = evaluate.judge_task(["def f ( x ) :", "a b", "x"], ["def f ( x ) : return x", "a b", "y z"],
                                   [True, True, True])
    summary = evaluate.summarize(verdicts)
    assert [round(v["f1"], 3) for v in verdicts] == [round(2 * 6 / 14, 3), 1.0, 0.0]
    assert (summary["words"], summary["accuracy"]) == (pytest.approx(9 / 12), pytest.approx(1 / 3))
    assert "valid 100.0%  exact 33.3%  words 75.0% of the gold's  token F1 61.9" in evaluate.result_line("test",
                                                                                                        summary)


@pytest.mark.parametrize("data", ["a task's", "none yet", "not given"])
@pytest.mark.parametrize("main", [train_denoiser.main, finetune.main, evaluate.main, predict.main])
def test_help_speaks_of_the_data_it_is_given(task, tmp_path, monkeypatch, capsys, main, data):
    """--help with a task's folder, one with no data yet, or no --data (its default, not made): the script's first
    line speaks of inputs and outputs, not of SansType's pseudocode and compiling, nor do its examples, its flags (but
    those of SansType's or SPoC's) or what it says of data not yet made; --data's default is the folder given."""
    monkeypatch.chdir(tmp_path)  # (where data/sanstype is not)
    folder = {"a task's": task / "data", "none yet": tmp_path / "none", "not given": None}[data]
    given = ["--data", str(folder)] if folder and main is not predict.main else []
    with pytest.raises(SystemExit):
        main([*given, "--help"])
    shown = capsys.readouterr().out
    first = shown.split("\n\n")[1].split("(")[0]  # the description's first words, before SansType's in brackets
    assert "output" in first.lower() and not re.search("pseudocode|program|compil", first), first
    assert not re.search(r"pseudocode|var_0|SansType folder|\(SansType\)", shown)
    assert main is not evaluate.main or not re.search("program|compil", shown.split("options:")[1])
    assert not given or f"(default:{folder})" in "".join(shown.split())  # (argparse breaks a long path)


def test_help_on_a_task_folder_shows_every_default_in_the_tasks_words(task, capsys):
    """--help --data DIR: train_denoiser.py shows the task's noise and --error-detector's default; finetune.py shows
    the task's values, standard's without --method, the method's with it."""
    for main, argv in ((train_denoiser.main, []), (finetune.main, []), (finetune.main, ["--method", "composed"])):
        with pytest.raises(SystemExit):
            main(["--help", "--data", str(task / "data"), *argv])
        shown = " ".join(capsys.readouterr().out.split())
        assert "(default: none)" in shown and "(default: edits)" in shown if main is train_denoiser.main else \
            "--patience PATIENCE" in shown
        if main is finetune.main:
            patience = re.search(r"\(default: (\d+)\)", shown.split("--patience PATIENCE")[-1]).group(1)
            assert patience == ("3" if argv else "30")  # composed's own, or the task's (standard's)


def test_overwrite_keeps_this_runs_inputs_even_named_like_data(task, tmp_path):
    """--pairs read from --out's own ood.src / ood.tgt (names a maker writes): --overwrite without --ood removes the old
    data, but not the files this run reads."""
    out = tmp_path / "data"
    out.mkdir()
    make_task.main(["--pairs", str(task / "in.txt"), str(task / "out.txt"), "--val", "10", "--test", "10",
                    "--vocab-size", "40", "--out", str(out)])
    for name, source in (("ood.src", "in.txt"), ("ood.tgt", "out.txt")):
        (out / name).write_bytes((task / source).read_bytes())
    make_task.main(["--pairs", str(out / "ood.src"), str(out / "ood.tgt"), "--val", "10", "--test", "10",
                    "--vocab-size", "40", "--out", str(out), "--overwrite"])
    assert (out / "ood.src").read_bytes() == (task / "in.txt").read_bytes()
