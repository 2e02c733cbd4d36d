"""A task of one's own (make_task.py): a made-up task of a few dozen pairs goes through every stage at the smoke
preset, its validity command judges, the generic noise edits at the rates it is given, predict.py answers as
evaluate.py does; and the worked example from Python's standard library."""
import json
import os
import random
import subprocess
import sys

import pytest

import common
import make_task
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
        if stage[0] == "train_denoiser.py":
            assert "edits corruption" in result.stderr and "% valid" in result.stderr
    verdicts = [json.loads(line) for line in open(runs / "composed" / "eval_test_denoised.jsonl")]
    outputs = [v["prediction"] for v in verdicts]
    balanced = [output.count("(") == output.count(")") for output in outputs]
    assert [v["verdict"] != "invalid" for v in verdicts] == balanced
    assert [v["verdict"] == "correct" for v in verdicts] == [
        output == gold for output, gold in zip(outputs, common.read_lines(str(data / "test.tgt")))]
    table = script("evaluate.py", "--table", runs / "std", runs / "composed")
    assert table.returncode == 0, table.stderr
    row = next(line.split() for line in table.stdout.splitlines() if line.startswith("composed "))
    assert row[3] == "edits" and float(row[9]) == pytest.approx(100 * sum(balanced) / len(balanced), abs=0.05)


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
    text_rng = random.Random(1)  # and a tenth of the outputs kept clean
    clean = sum(common.corrupt_pieces("a b c d e f", text_rng, FakeTokenizer(), (0.5, 0, 0, 0)) == "a b c d e f"
                for _ in range(2000))
    assert clean / 2000 == pytest.approx(0.1 + 0.9 * 0.5 ** 6, abs=0.02)


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
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2 and len(err.splitlines()) == 1 and word in err, (argv, err)
        assert not (w / "new").exists()
    with pytest.raises(SystemExit):
        train_denoiser.main(["--data", str(w / "data"), "--preset", "smoke", "--edit-rates", "0.1,0.1", "--out",
                             str(w / "new")])
    assert "four probabilities" in capsys.readouterr().err


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
    assert common.valid_outputs(str(tmp_path), broken + train[:50]) == [False] * 50 + [True] * 50


def test_the_readmes_five_lines_of_python_translate_as_predict_does(task):
    """The README's example of loading a checkpoint and translating a string, run on this task's standard model."""
    data, runs = task / "data", task / "runs"
    if not (runs / "std" / "model.pt").exists():
        pytest.skip("needs the chain of test_a_task_of_ones_own_goes_through_every_stage")
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    code = readme.split("```python\n")[1].split("```")[0]
    assert len(code.strip().splitlines()) == 5
    source = common.read_lines(str(data / "test.src"))[0]
    code = code.replace("runs/standard/model.pt", str(runs / "std" / "model.pt")).replace(
        "read var_0 from stdin ; print var_0", source)
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    predicted = script("predict.py", runs / "std/model.pt", input=source + "\n")
    assert ran.stdout == predicted.stdout and ran.stdout.strip()
