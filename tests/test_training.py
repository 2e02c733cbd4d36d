"""The training scripts on a tiny dataset: they learn, resume after kill -9, refuse bad input,
and evaluate.py decodes, denoises and judges their models."""
import argparse
import dataclasses
import glob
import io
import itertools
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

import common
import harness
import evaluate
import finetune
import make_sanstype
import train_denoiser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def script(name, *args, cwd=None):
    return subprocess.run([sys.executable, os.path.join(ROOT, name), *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("sanstype")
    make_sanstype.main(["--out", str(out), "--labeled", "40", "--unlabeled", "60", "--num-eval", "8",
                        "--vocab-size", "150", "--seed", "3"])
    return out


@pytest.fixture(scope="module")
def denoiser(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("denoiser")
    result = script("train_denoiser.py", "--preset", "smoke", "--data", data, "--out", out, "--epochs", "3",
                    "--patience", "9", "--repair-programs", "4")
    assert result.returncode == 0, result.stderr
    return out / "model.pt", result.stderr + result.stdout


def epoch_losses(log, measure="loss"):
    """Each epoch line's train loss; measure "surrogate": composed's, whose gradient, not value, estimates Eq. 1's."""
    return [float(line.split(f"train {measure} ")[1].split(",")[0]) for line in log.splitlines()
            if f" train {measure} " in line]


def test_denoiser_learns_and_its_checkpoint_stands_alone(denoiser):
    path, log = denoiser
    losses = epoch_losses(log)
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert "% compile" in log and "ETA" in log
    assert "denoiser: " in log and " 64 outputs" in log  # the smoke preset's first 64 of the 100
    assert ", device=cpu," in log.split("settings: ")[1].splitlines()[0]  # where it ran, though --device was not given
    checkpoint = harness.load_checkpoint(str(path))
    history = harness.load_checkpoint(str(path.parent / "last.pt"), needs=("state",))["state"]["history"]
    best = min(history, key=lambda h: h["val_loss"])  # model.pt is the epoch with the lowest validation loss
    assert checkpoint["role"] == "denoiser" and (checkpoint["epoch"], checkpoint["best_val_loss"]) == (
        best["epoch"], best["val_loss"])
    # The last line quotes the kept epoch's repair report (not the last epoch's).
    kept_line = next(line for line in log.splitlines() if line.startswith(f"epoch {best['epoch']}: "))
    report = kept_line.split(" (best)")[1].rsplit(";", 1)[0]
    assert report.startswith(", repairs of 4 val outputs") and "of all 4 exact after repair" in report
    assert f"best epoch {best['epoch']} (val loss {best['val_loss']:.4f}{report}) -> " in log
    model = harness.model_from_checkpoint(checkpoint)  # needs nothing but the file
    tokenizer = common.load_tokenizer(checkpoint["spm"])
    assert model.config.vocab_size == tokenizer.get_piece_size() == 150


@pytest.mark.parametrize("method", ["baseline", "standard", "bart"])
def test_finetune_methods_learn(data, denoiser, tmp_path, method):
    flags = {"baseline": [], "standard": ["--denoiser", denoiser[0]],
             "bart": ["--denoiser", denoiser[0], "--frozen-epochs", "2"]}[method]
    result = script("finetune.py", "--method", method, "--preset", "smoke", "--data", data, *flags, "--out", tmp_path,
                    "--epochs", "3", "--patience", "9")
    assert result.returncode == 0, result.stderr
    losses = epoch_losses(result.stderr)
    assert len(losses) == 3 and losses[-1] < losses[0]
    last = harness.load_checkpoint(str(tmp_path / "last.pt"), needs=("optimizer",))
    updates = 5 * (3 - 2 * (method == "bart"))  # 5 batches an epoch; bart's last stage: 1 epoch of 3
    assert last["optimizer"]["param_groups"][0]["lr"] == pytest.approx(1e-3 / updates)  # the last update's


def test_bf16_trains_as_fp32_does(data, tmp_path):
    """--precision bf16 trains a bfloat16 copy of the model (harness.Bf16Copy) on the CPU: the same run's losses stay
    close to fp32's, and its checkpoints hold fp32 weights as an fp32 run's do. fp32
    is the reference: its losses are those recorded with issue 82's dropout masks (to 1e-4: other CPUs may sum a
    matrix product in another order), and auto picks fp32 on a CPU."""
    losses = {}
    for precision in ("fp32", "bf16", "auto"):
        result = script("finetune.py", "--method", "baseline", "--preset", "smoke", "--data", data, "--out",
                        tmp_path / precision, "--epochs", "3", "--precision", precision)
        assert result.returncode == 0, result.stderr
        losses[precision] = epoch_losses(result.stderr)
    history = harness.load_checkpoint(str(tmp_path / "fp32" / "last.pt"), needs=("state",))["state"]["history"]
    assert [loss for h in history for loss in (h["train_loss"], h["val_loss"])] == pytest.approx(
        [5.329271944963151, 4.925715792006341, 4.906162693179287, 4.689732353468448, 4.758658036018626,
         4.614621074879227], rel=1e-4)
    auto = harness.load_checkpoint(str(tmp_path / "auto" / "model.pt"))["args"]["precision"]
    assert auto == "fp32"
    assert losses["auto"] == losses[auto]
    assert losses["bf16"][-1] < losses["bf16"][0]
    assert losses["bf16"] != losses["fp32"]  # it did run in another precision
    assert all(abs(b / f - 1) < 0.05 for f, b in zip(losses["fp32"], losses["bf16"])), losses
    weights = harness.load_checkpoint(str(tmp_path / "bf16" / "model.pt"))["model"].values()
    assert {w.dtype for w in weights} == {torch.float32}


def test_bf16_copy_keeps_updates_below_a_bf16_weights_last_bit():
    """AdamW steps the fp32 weights: ten updates of 1e-3 move a weight of 1 (bf16's step there: 2^-7) by 0.01 where
    stepping bf16 weights would round each back to 1; the copy trains from the fp32 weights, rounded."""
    model = torch.nn.Linear(4, 1, bias=False)
    torch.nn.init.ones_(model.weight)
    optimizer = harness.Bf16Copy(model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0))
    for _ in range(10):
        optimizer.zero_grad()
        optimizer.model(torch.ones(2, 4, dtype=torch.bfloat16)).sum().backward()
        optimizer.step()
    assert model.weight.dtype == torch.float32 and optimizer.model.weight.dtype == torch.bfloat16
    assert model.weight.detach() == pytest.approx(torch.full((1, 4), 0.99), abs=1e-5)
    assert torch.equal(optimizer.model.weight.detach(), model.weight.detach().bfloat16())


def test_auto_precision_takes_fp32_on_a_cpu_even_with_bf16_units(data, monkeypatch):
    """A CPU's bf16 is not shown to pay, even with bf16 matrix units (autocast there was slower): auto takes fp32."""
    real_open, amx = open, "flags : avx2 avx512_bf16 amx_bf16\n"  # a CPU with bf16 units, whatever this one has
    monkeypatch.setattr("builtins.open", lambda path, *rest, **kw: io.StringIO(amx) if path == "/proc/cpuinfo" else
                        real_open(path, *rest, **kw))
    for script_module in (finetune, train_denoiser):
        flags = ["--method", "baseline"] * (script_module is finetune)
        args = script_module.parse_args([*flags, "--data", str(data), "--device", "cpu", "--precision", "auto"])
        assert args.precision == "fp32"


def test_bart_freezes_the_decoder_first(data, denoiser, tmp_path):
    result = script("finetune.py", "--method", "bart", "--preset", "smoke", "--data", data, "--denoiser",
                    denoiser[0], "--out", tmp_path, "--epochs", "2", "--frozen-epochs", "1")
    assert result.returncode == 0, result.stderr
    start = harness.load_checkpoint(str(denoiser[0]))["model"]
    frozen_stage = harness.load_checkpoint(str(tmp_path / "frozen" / "model.pt"))["model"]
    changed = {name for name in start if not torch.equal(start[name], frozen_stage[name])}
    # the encoder and the shared embedding matrix (the encoder's input layer), as the authors ran it
    assert "embed.weight" in changed and all(name.startswith(("encoder", "embed.")) for name in changed)
    trained = harness.load_checkpoint(str(tmp_path / "model.pt"))["model"]
    assert not torch.equal(trained["decoder.0.ffn.0.weight"], start["decoder.0.ffn.0.weight"])
    # Each stage's checkpoints keep the run's settings, not the stage's length: --resume takes them as they were given
    # (it took the second stage's 1 epoch for the run's --epochs, and refused the run).
    for stage in ("", "frozen"):
        assert harness.load_checkpoint(str(tmp_path / stage / "last.pt"))["args"]["epochs"] == 2, stage
    resumed = script("finetune.py", "--method", "bart", "--preset", "smoke", "--data", data, "--denoiser",
                     denoiser[0], "--out", tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    refused = script("finetune.py", "--method", "bart", "--preset", "smoke", "--data", data, "--denoiser",
                     denoiser[0], "--out", tmp_path / "refused", "--epochs", "2", "--frozen-epochs", "2")
    assert refused.returncode == 2 and "--frozen-epochs (2) must be below --epochs (2)" in refused.stderr



def test_the_predictors_of_every_preset_have_their_denoisers_sizes():
    """standard, bart and composed load Pi's weights: for every dataset and preset, finetune.py's sizes are
    train_denoiser.py's (each script has its own table, a reader's one place; this keeps the two alike)."""
    for dataset, preset in [(d, p) for d in ("sanstype", "spoc", "molecules", "task") for p in ("paper", "cpu", "smoke")]:
        data = {"dataset": dataset, "corruption": "code"}
        for method in ("standard", "bart", "composed"):
            predictor = finetune.preset_values(data, argparse.Namespace(preset=preset, method=method))
            denoiser = train_denoiser.preset_values(data, argparse.Namespace(preset=preset))
            assert all(predictor[size] == denoiser[size] for size in ("d_model", "n_heads", "layers", "d_ff")), \
                (dataset, preset, method)

def test_linear_schedule_warms_up_then_decays_to_its_last_update():
    """Update k (0 .. steps - 1) runs at the rate of step k: the last at 1 / steps of the peak, not 0."""
    rates = [common.learning_rate(step, 100, 1.0, "linear", 10, 0.0) for step in range(100)]
    assert rates[0] == 0.1 and max(rates) == rates[9] and rates[-1] == pytest.approx(1 / 100)
    assert all(a > b for a, b in zip(rates[9:], rates[10:]))
    # a run of 40 steps warms up for 4, not 10: a warm-up must not eat a short run
    short = [common.learning_rate(step, 40, 1.0, "linear", 10, 0.0) for step in range(40)]
    assert short[3] == max(short) == 1.0 - 3 / 40 and short[-1] == pytest.approx(1 / 40)
    # the paper's schedule keeps its full warm-up
    assert common.learning_rate(4, 40, 1.0, "constant", 10, 0.0) == 0.5
    assert common.learning_rate(99, 100, 1.0, "constant", 10, 0.0) == 1.0


def processes_of(pid: int) -> list[int]:
    """A process and its descendants, from /proc."""
    children = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie (a dead process whose status its new parent has not read yet holds nothing)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_resume_after_kill_9_loses_at_most_an_epoch(data, tmp_path):
    """A run killed by SIGKILL inside an epoch leaves no process behind (Pi's epoch worker dies with it) and resumes
    from its last finished epoch."""
    args = [sys.executable, os.path.join(ROOT, "train_denoiser.py"), "--preset", "smoke", "--repair-every", "0",
            "--data", str(data), "--out", str(tmp_path), "--epochs", "6", "--patience", "9"]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 120
    while not (tmp_path / "last.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # somewhere inside the next epoch
    run = processes_of(proc.pid)
    assert len(run) == 2, run  # the run and its epoch worker
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 60  # (the worker runs at idle priority: on a busy machine its exit waits for a core;
    #                                an orphan would stay for good)
    while [pid for pid in run if alive(pid)] and time.time() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in run if alive(pid)], "a process of the killed run is left"
    done = harness.load_checkpoint(str(tmp_path / "last.pt"), needs=("state",))["state"]["epoch"]
    assert 1 <= done < 6
    resumed = subprocess.run(args + ["--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {tmp_path / 'last.pt'} after epoch {done}" in resumed.stderr
    assert len(epoch_losses(resumed.stderr)) == 6 - done
    state = harness.load_checkpoint(str(tmp_path / "last.pt"), needs=("state",))["state"]
    assert [h["epoch"] for h in state["history"]] == [1, 2, 3, 4, 5, 6]
    assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]


def test_bad_input_is_one_line_exit_2_and_writes_nothing(data, denoiser, tmp_path, capsys):
    other = tmp_path / "other"
    make_sanstype.main(["--out", str(other), "--labeled", "20", "--unlabeled", "20", "--num-eval", "4",
                        "--vocab-size", "120", "--seed", "4"])
    not_a_checkpoint = tmp_path / "junk.pt"
    not_a_checkpoint.write_text("hello")
    out = tmp_path / "out"
    cases = [
        (("finetune.py", "--method", "baseline", "--data", tmp_path / "nowhere"), "dataset.json"),
        (("finetune.py", "--method", "standard", "--data", data, "--denoiser", not_a_checkpoint), "not a checkpoint"),
        (("finetune.py", "--method", "standard", "--data", other, "--denoiser", denoiser[0]),
         "different tokenizers: make the data with `python make_sanstype.py` (no flags) under sentencepiece 0.2.3"),
        (("finetune.py", "--method", "magic", "--data", data), "invalid choice"),
        (("finetune.py", "--method", "composed", "--data", data, "--init", tmp_path / "none.pt"), "no checkpoint"),
        (("finetune.py", "--method", "composed", "--data", data, "--init", denoiser[0], "--unlabeled-inputs", "-1"),
         "at least 0"),
        (("finetune.py", "--method", "composed", "--data", data, "--init", denoiser[0], "--reinforce-baseline",
          "leave-one-out"), "invalid choice"),  # (one sample: no other sample to leave out)
        (("train_denoiser.py", "--data", tmp_path / "nowhere"), "dataset.json"),
        (("train_denoiser.py", "--data", data, "--epochs", "-3"), "--epochs -3: must be at least 1"),
        (("finetune.py", "--method", "baseline", "--data", data, "--epochs", "0"), "--epochs 0: must be at least 1"),
        (("finetune.py", "--method", "baseline", "--data", data, "--labeled", "5000"), "has only 40 labeled pairs"),
        (("finetune.py", "--method", "baseline", "--data", data, "--dropout", "1.5"), "within [0, 1)"),
        (("finetune.py", "--method", "standard", "--data", data, "--denoiser", denoiser[0], "--layers", "2"),
         "encoder_layers 1 (this run: 2)"),  # the run's model must fit the weights it starts from
        (("evaluate.py", not_a_checkpoint, "--data", data), "not a checkpoint"),
    ]
    mains = {"finetune.py": finetune.main, "train_denoiser.py": train_denoiser.main, "evaluate.py": evaluate.main}
    capsys.readouterr()  # (make_sanstype's lines)
    for args, message in cases:  # in this process (a second each, not a fresh Python's two)
        argv = [str(arg) for arg in args[1:]] + ["--out", str(out)] * (args[0] != "evaluate.py")
        with pytest.raises(SystemExit) as exit_:
            mains[args[0]](argv)
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2, (args, err)
        assert len(err.splitlines()) == 1 and message in err, (args, err)
    assert not out.exists()


def test_evaluate_a_model_with_and_without_the_test_time_denoiser(data, denoiser, tmp_path):
    result = script("finetune.py", "--method", "standard", "--preset", "smoke", "--data", data, "--denoiser",
                    denoiser[0], "--out", tmp_path, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    for extra in ([], ["--denoiser", denoiser[0]]):
        result = script("evaluate.py", tmp_path / "model.pt", "--data", data, "--splits", "test", *extra)
        assert result.returncode == 0, result.stderr
        assert f"{tmp_path / 'model.pt'} on cpu" in result.stderr.splitlines()
        (line,) = result.stdout.splitlines()  # one line per split
        assert line.startswith("test Pi(f(x)): n=8 " if extra else "test: n=8 ")
    for name in ("eval_test", "eval_test_denoised"):
        summary = json.load(open(tmp_path / f"{name}.json"))
        rows = [json.loads(line) for line in open(tmp_path / f"{name}.jsonl")]
        assert summary["n"] == len(rows) == 8
        assert summary["accuracy"] == sum(row["verdict"] == "correct" for row in rows) / 8
        assert summary["compiled"] == sum(row["verdict"] != "compile_error" for row in rows) / 8
        assert all(row["verdict"] in ("correct", "wrong_output", "compile_error", "runtime_error", "timeout")
                   for row in rows)
    assert "base" in rows[0]  # the denoised rows keep the base predictor's output too
    unevaluated = tmp_path / "unevaluated"
    assert script("finetune.py", "--method", "baseline", "--preset", "smoke", "--data", data, "--out", unevaluated,
                  "--epochs", "1").returncode == 0
    table = script("evaluate.py", "--table", tmp_path, unevaluated, denoiser[0].parent)  # (a denoiser needs none)
    lines = table.stdout.strip().splitlines()  # only the table (`> table.txt`): its header, two rows,
    assert table.returncode == 0 and len(lines) == 5  # then Pi's gain on the run, paired
    assert lines[-1].startswith(f"| {tmp_path.name} + Pi - {tmp_path.name}, paired (1 run) | ")
    assert table.stderr.strip().endswith(f"not evaluated (no eval_*.json): {unevaluated}")


def test_the_table_names_rows_by_their_folder_and_a_pi_of_another_noise(tmp_path, capsys):
    """Rows are named by the folder they were found in (a run folder may have been moved since it was evaluated); a
    run judged with Table 5's random-deletion Pi too is a row of its own, named so, beside the paper's numbers."""
    def summary(name, denoised, accuracy, **noise):
        os.makedirs(tmp_path / "runs/standard", exist_ok=True)
        row = {"method": "standard", "deep": False, "denoised": denoised, "corruption": "code", "layers": 4,
               "own_noise": True, "paper_table": "Table 2", "split": "test", "n": 10, "compiled": 0.5,
               "accuracy": accuracy, "model": "moved/model.pt", **noise}
        json.dump(row, open(tmp_path / "runs/standard" / f"{name}.json", "w"))
    summary("eval_test", False, 0.2)
    summary("eval_test_denoised", True, 0.3)
    summary("eval_test_denoised_random", True, 0.4, corruption="random", own_noise=False, paper_table="Table 5")
    evaluate.main(["--table", str(tmp_path / "runs/standard")])
    assert capsys.readouterr().out.splitlines()[2:5] == ["| standard (1 run) | 50.0 | 20.0 | 86.8 / 79.8 |",
                                                         "| standard + Pi (1 run) | 50.0 | 30.0 | 87.3 / 80.4 |",
                                                         "| standard + Pi (random Pi) (1 run) | 50.0 | 40.0 |  |"]


def test_the_table_aggregates_seeds_and_pairs_them(tmp_path, capsys):
    """Runs that differ only by seed are one row, mean ± std (the sample's) with their number; paired rows subtract
    seed by seed. Fabricated from the per-seed test accuracies of Table 2's earlier runs (EXPERIMENTS.md, "the runs
    behind Table 2")."""
    accuracies = {("baseline", False): [34.2, 41.4, 34.2], ("standard", False): [48.4, 46.2, 48.0],
                  ("standard", True): [48.0, 46.8, 47.4], ("composed", True): [48.4, 48.0, 50.6]}
    for (method, denoised), values in accuracies.items():
        for seed, accuracy in enumerate(values):
            folder = tmp_path / f"{method}_{seed}"
            os.makedirs(folder, exist_ok=True)
            settings = {"method": method, "lr": 1e-4 if method == "composed" else 1e-3, "preset": "cpu"}
            row = {"method": method, "deep": False, "denoised": denoised, "corruption": None if method == "baseline"
                   else "code", "own_noise": True, "paper_table": "Table 2", "layers": "2+2", "split": "test", "n": 500,
                   "compiled": 0.5 + seed / 100,
                   "accuracy": accuracy / 100, "model": f"{folder}/model.pt", "seed": seed, "settings": settings}
            json.dump(row, open(folder / f"eval_test{'_denoised' * (denoised and method != 'composed')}.json", "w"))
    # the control: composed with another setting, one seed: a row of its own, paired with seed 0 alone
    os.makedirs(tmp_path / "control_0")
    json.dump({**row, "accuracy": 0.492, "seed": 0, "settings": {**settings, "composed_weight": 0.0}},
              open(tmp_path / "control_0" / "eval_test.json", "w"))
    evaluate.main(["--table", *sorted(str(p) for p in tmp_path.iterdir())])
    assert capsys.readouterr().out.splitlines() == [
        "| runs (seeds) | test compiled | test accuracy | paper: test compiled / accuracy |",
        "| --- | --- | --- | --- |",
        "| baseline_{0,1,2} (3 seeds) | 51.0 ± 1.0 | 36.6 ± 4.2 | 48.6 / 36.6 |",
        "| standard_{0,1,2} (3 seeds) | 51.0 ± 1.0 | 47.5 ± 1.2 | 86.8 / 79.8 |",
        "| standard_{0,1,2} + Pi (3 seeds) | 51.0 ± 1.0 | 47.4 ± 0.6 | 87.3 / 80.4 |",
        "| composed_{0,1,2} (3 seeds) | 51.0 ± 1.0 | 49.0 ± 1.4 | 90.4 / 84.4 |",
        "| control_0 (1 run) | 52.0 | 49.2 |  |",  # (the control is not the paper's composed)
        "| standard_{0,1,2} - baseline_{0,1,2}, paired (3 seeds) | +0.0 ± 0.0 | +10.9 ± 5.3 | +38.2 / +43.2 |",
        "| standard_{0,1,2} + Pi - standard_{0,1,2}, paired (3 seeds) | +0.0 ± 0.0 | -0.1 ± 0.6 | +0.5 / +0.6 |",
        "| composed_{0,1,2} - standard_{0,1,2}, paired (3 seeds) | +0.0 ± 0.0 | +1.5 ± 1.3 | +3.6 / +4.6 |",
        "| composed_{0,1,2} - (standard_{0,1,2} + Pi), paired (3 seeds) | +0.0 ± 0.0 | +1.6 ± 1.4 | +3.1 / +4.0 |",
        "| composed_{0,1,2} - control_0, paired (1 run) | -2.0 | -0.8 |  |",
        "| control_0 - standard_{0,1,2}, paired (1 run) | +2.0 | +0.8 |  |",  # seed 0 alone
        "| control_0 - (standard_{0,1,2} + Pi), paired (1 run) | +2.0 | +1.2 |  |"]  # (Table 2's paired rows)


def test_the_table_aggregates_the_seeds_of_pi_and_pairs_runs_from_the_same_pi(tmp_path, capsys):
    """Runs that differ only by their seed or their Pi's are one row, said to be over both where both vary; composed
    pairs with the standard run from its own Pi and of its own seed, a baseline (no Pi) with the runs of its seed."""
    test_accuracy = {("standard", 0, 0): 40, ("standard", 1, 0): 44, ("standard", 2, 0): 48, ("standard", 1, 1): 41,
                     ("standard", 1, 2): 39, ("composed", 0, 0): 43, ("composed", 1, 0): 44, ("composed", 2, 0): 50,
                     ("composed", 1, 1): 42, ("composed", 1, 2): 45, ("standard", 2, 1): 50,
                     ("composed", 2, 1): 53}  # (method, Pi's seed, seed): %
    def evaluation(folder, name, **row):
        os.makedirs(folder, exist_ok=True)
        json.dump({"deep": False, "corruption": "code", "own_noise": True, "paper_table": "Table 2", "layers": "2+2",
                   "split": "test", "n": 500, "compiled": 0.5, "pi": {"epochs": 25}, **row}, open(folder / name, "w"))
    for (method, pi_seed, seed), accuracy in test_accuracy.items():
        folder = tmp_path / f"{method}_pi{pi_seed}_{seed}"
        evaluation(folder, "eval_test_denoised.json", method=method, denoised=True, accuracy=accuracy / 100, seed=seed,
                   pi_seed=pi_seed, settings={"method": method, "preset": "cpu"})
        if method == "standard":  # and its f alone
            evaluation(folder, "eval_test.json", method=method, denoised=False, accuracy=(accuracy - 1) / 100,
                       seed=seed, pi_seed=pi_seed, settings={"method": method, "preset": "cpu"})
    for seed in range(3):  # a baseline, which no Pi made, pairs with the runs of every Pi
        evaluation(tmp_path / f"baseline_{seed}", "eval_test.json", method="baseline", corruption=None, pi=None,
                   denoised=False, accuracy=0.3 + seed / 100, seed=seed, pi_seed=None, settings={"preset": "cpu"})
    evaluate.main(["--table", *sorted(str(p) for p in tmp_path.iterdir())])
    runs = "{pi0_0,pi1_0,pi1_1,pi1_2,pi2_0,pi2_1}"
    assert capsys.readouterr().out.splitlines()[2:] == [
        "| baseline_{0,1,2} (3 seeds) | 50.0 ± 0.0 | 31.0 ± 1.0 | 48.6 / 36.6 |",
        f"| standard_{runs} (6 Pi seeds and seeds) | 50.0 ± 0.0 | 42.7 ± 4.5 | 86.8 / 79.8 |",
        f"| standard_{runs} + Pi (6 Pi seeds and seeds) | 50.0 ± 0.0 | 43.7 ± 4.5 | 87.3 / 80.4 |",
        f"| composed_{runs} (6 Pi seeds and seeds) | 50.0 ± 0.0 | 46.2 ± 4.4 | 90.4 / 84.4 |",
        f"| standard_{runs} - baseline_{{0,1,2}}, paired (6 Pi seeds and seeds) | +0.0 ± 0.0 | +12.0 ± 4.8 | "
        "+38.2 / +43.2 |",
        f"| standard_{runs} + Pi - standard_{runs}, paired (6 Pi seeds and seeds) | +0.0 ± 0.0 | +1.0 ± 0.0 | "
        "+0.5 / +0.6 |",
        f"| composed_{runs} - standard_{runs}, paired (6 Pi seeds and seeds) | +0.0 ± 0.0 | +3.5 ± 2.1 | +3.6 / +4.6 |",
        f"| composed_{runs} - (standard_{runs} + Pi), paired (6 Pi seeds and seeds) | +0.0 ± 0.0 | +2.5 ± 2.1 | "
        "+3.1 / +4.0 |"]


def frozen(pi, args):
    """composed_loss's Pi, frozen, and Eq. 1's settings, as finetune.py hands them to harness.train."""
    pi.eval().requires_grad_(False)
    return dict(denoiser=pi, error_free=None, estimator=args.estimator, baseline=args.reinforce_baseline,
                gamma=args.gamma, weight=args.composed_weight, lam=args.lam)


@pytest.mark.parametrize("estimator, precision", [("reinforce", "fp32"), ("straight-through", "fp32"),
                                                   ("reinforce", "bf16"), ("straight-through", "bf16")])
def test_composed_keeps_its_denoiser_frozen(data, denoiser, tmp_path, estimator, precision, monkeypatch):
    """Eq. 1 trains f only: after composed epochs Pi is bit-identical, in eval mode, without grads, whichever
    estimator carries the gradient (straight-through's goes through Pi to its input); in a CPU's bf16 f's fp32
    weights train through its bf16 copy, beside a bf16 copy of Pi."""
    args = finetune.parse_args(["--method", "composed", "--preset", "smoke", "--data", str(data), "--epochs", "2",
                                "--out", str(tmp_path), "--estimator", estimator, "--precision", precision])
    tokenizer = common.load_tokenizer(harness.read_data_folder(str(data))["spm"])
    pairs = finetune.load_pairs(str(data), "train", tokenizer)
    checkpoint = harness.load_checkpoint(str(denoiser[0]))
    model, pi = harness.model_from_checkpoint(checkpoint), harness.model_from_checkpoint(checkpoint)
    before = {name: p.clone() for name, p in pi.state_dict().items()}
    dtypes, composed_loss = set(), common.composed_loss  # what f and Pi compute in, at each composed step
    monkeypatch.setattr(common, "composed_loss", lambda f, denoiser, **kw: dtypes.add(
        (f.embed.weight.dtype, denoiser.embed.weight.dtype)) or composed_loss(f, denoiser, **kw))
    state = harness.train(model, args, {}, lambda epoch: pairs, pairs[:8], composed=frozen(pi, args))
    assert dtypes == {(torch.bfloat16,) * 2 if precision == "bf16" else (torch.float32,) * 2}
    assert [h["epoch"] for h in state["history"]] == [0, 1, 2] and not pi.training  # 0: the f it started from
    assert all(p.grad is None and not p.requires_grad for p in pi.parameters())
    assert all(torch.equal(before[name], p) for name, p in pi.state_dict().items())
    assert not all(torch.equal(checkpoint["model"][name], p) for name, p in model.state_dict().items())


def test_composed_keeps_the_f_it_starts_from_when_no_epoch_does_better(data, denoiser, tmp_path, monkeypatch):
    """Epoch 0 is Pi(f(x))'s validation loss before any composed step, a candidate like any epoch: where every later
    epoch scores worse (here the criterion is made to), model.pt holds the f composed fine-tuning started from."""
    args = finetune.parse_args(["--method", "composed", "--preset", "smoke", "--data", str(data), "--epochs", "2",
                                "--out", str(tmp_path)])
    tokenizer = common.load_tokenizer(harness.read_data_folder(str(data))["spm"])
    pairs = finetune.load_pairs(str(data), "train", tokenizer)
    checkpoint = harness.load_checkpoint(str(denoiser[0]))
    model, pi = harness.model_from_checkpoint(checkpoint), harness.model_from_checkpoint(checkpoint)
    start = {name: p.clone() for name, p in model.state_dict().items()}
    scores = iter([1.0, 1.5, 1.2])  # epochs 0, 1, 2
    monkeypatch.setattr(common, "composed_validation_loss", lambda *args: next(scores))
    state = harness.train(model, args, {}, lambda epoch: pairs, pairs[:8], composed=frozen(pi, args))
    assert (state["best_epoch"], [h["val_loss"] for h in state["history"]]) == (0, [1.0, 1.5, 1.2])
    kept = harness.load_checkpoint(str(tmp_path / "model.pt"), needs=("model",))
    assert kept["epoch"] == 0 and all(torch.equal(start[name], p) for name, p in kept["model"].items())
    assert not all(torch.equal(start[name], p) for name, p in model.state_dict().items())  # (f did train)


@pytest.mark.parametrize("run", ["finetune", "train_denoiser"])
def test_a_run_reads_its_data_folder_once_and_its_checkpoints_keep_no_copy(data, denoiser, tmp_path, monkeypatch,
                                                                           capsys, run):
    """Reading the flags reads --data's folder (dataset.json and the tokenizer), and the run goes on with what was read:
    one read a run, which neither the settings its checkpoints keep nor its settings line hold."""
    reads, read = [], harness.read_data_folder
    monkeypatch.setattr(harness, "read_data_folder", lambda folder: reads.append(folder) or read(folder))
    flags = ["--preset", "smoke", "--data", str(data), "--epochs", "1", "--out", str(tmp_path)]
    if run == "finetune":
        finetune.finetune(finetune.parse_args(["--method", "standard", "--denoiser", str(denoiser[0]), *flags]))
    else:
        train_denoiser.train(train_denoiser.parse_args([*flags, "--repair-every", "0"]))
    assert reads == [str(data)]
    assert "manifest" not in harness.load_checkpoint(str(tmp_path / "model.pt"), needs=("args",))["args"]
    assert "manifest" not in capsys.readouterr().err.split("settings: ")[1].splitlines()[0]


def test_a_corruption_registered_once_reaches_the_help_and_the_table(data, tmp_path, monkeypatch, capsys):
    """A noise added to train_denoiser.CORRUPTIONS alone: --help lists it; a Pi trained on it names its rows in
    evaluate.py's table, with no paper numbers beside them, and its evaluations go into files of their own (it is not
    the dataset's noise), beside those without it."""
    monkeypatch.setitem(train_denoiser.CORRUPTIONS, "reverse", train_denoiser.Noise(
        lambda text, rng, args, tokenizer: " ".join(reversed(text.split())), {}))
    with pytest.raises(SystemExit):
        train_denoiser.main(["--data", str(data), "--help"])
    assert "--corruption {code,edits,line,random,reverse,smiles}" in " ".join(capsys.readouterr().out.split())
    train_denoiser.main(["--data", str(data), "--preset", "smoke", "--corruption", "reverse", "--epochs", "1",
                         "--out", str(tmp_path / "pi")])
    finetune.main(["--method", "baseline", "--data", str(data), "--preset", "smoke", "--epochs", "1", "--out",
                   str(tmp_path / "baseline")])
    for denoiser in ([], ["--denoiser", str(tmp_path / "pi" / "model.pt")]):
        evaluate.main([str(tmp_path / "baseline" / "model.pt"), "--data", str(data), *denoiser])
    assert {"eval_test.json", "eval_test_denoised_reverse.json"} <= set(os.listdir(tmp_path / "baseline"))
    capsys.readouterr()
    evaluate.main(["--table", str(tmp_path / "baseline")])
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:4]]  # test and ood side by side
    assert [(row[0], row[-2:]) for row in rows] == [("| baseline (1 run)", ["48.6 / 36.6", "37.2 / 14.2 |"]),
                                                    ("| baseline + Pi (reverse Pi) (1 run)", ["", " |"])]


def test_composed_model_is_evaluated_through_its_denoiser(data, denoiser, tmp_path):
    standard = script("finetune.py", "--method", "standard", "--preset", "smoke", "--data", data, "--denoiser",
                      denoiser[0], "--out", tmp_path / "standard", "--epochs", "1")
    assert standard.returncode == 0, standard.stderr
    result = script("finetune.py", "--method", "composed", "--preset", "smoke", "--data", data, "--init",
                    tmp_path / "standard" / "model.pt", "--denoiser", denoiser[0], "--out", tmp_path, "--epochs", "2")
    assert result.returncode == 0, result.stderr
    assert len(epoch_losses(result.stderr, "surrogate")) == 2 and not epoch_losses(result.stderr)
    assert "batches, surrogate " in result.stderr and "batches, loss " not in result.stderr  # its progress lines too
    composed = harness.load_checkpoint(str(tmp_path / "model.pt"))
    original = harness.load_checkpoint(str(denoiser[0]))["model"]
    assert all(torch.equal(original[name], p) for name, p in composed["denoiser"]["model"].items())
    result = script("evaluate.py", tmp_path / "model.pt", "--data", data, "--splits", "test")
    assert result.returncode == 0, result.stderr
    summary = json.load(open(tmp_path / "eval_test_denoised.json"))
    assert summary["method"] == "composed" and summary["denoised"]
    rows = [json.loads(line) for line in open(tmp_path / "eval_test_denoised.jsonl")]
    assert len(rows) == 8 and all("base" in row for row in rows)


def test_backtranslation_runs_its_three_stages(data, tmp_path):
    result = script("finetune.py", "--method", "backtranslation", "--preset", "smoke", "--data", data,
                    "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    reverse = harness.load_checkpoint(str(tmp_path / "reverse" / "model.pt"))
    assert reverse["method"] == "backtranslation-reverse"
    synthetic = (tmp_path / "synthetic.src").read_text().splitlines()
    programs = (tmp_path / "synthetic.tgt").read_text().splitlines()
    assert len(synthetic) == len(programs) == 16 and programs == common.read_lines(str(data / "unlabeled.tgt"))[:16]
    assert "40 labeled + 16 synthetic pairs" in result.stderr
    assert harness.load_checkpoint(str(tmp_path / "model.pt"))["method"] == "backtranslation"


def test_saving_removes_what_a_killed_save_left(tmp_path):
    (tmp_path / "last.pt.tmp999").write_bytes(b"half a checkpoint")  # kill -9 during torch.save
    harness.save_checkpoint(str(tmp_path / "last.pt"), {"state": 1})
    assert os.listdir(tmp_path) == ["last.pt"]
    assert harness.load_checkpoint(str(tmp_path / "last.pt"), needs=("state",))["state"] == 1


def test_inverse_sqrt_schedule_warms_up_from_its_start_rate_then_decays():
    """The paper preset's schedule, fairseq's inverse_sqrt: the denoiser warms up from 1e-7 to 1e-3 in 4000 updates."""
    rate = [common.learning_rate(step, 10 ** 6, 1e-3, "inverse-sqrt", 4000, 1e-7)
            for step in (0, 1999, 3999, 15999, 63999)]
    assert rate[0] < 1e-6 and abs(rate[1] - 0.5e-3) < 1e-6 and rate[2] == 1e-3
    assert abs(rate[3] - 0.5e-3) < 1e-12 and abs(rate[4] - 0.25e-3) < 1e-12  # peak * sqrt(4000 / step)


def test_the_recipe_is_the_authors_in_every_preset(data):
    """No label smoothing, no clipping, composed at a tenth of standard's rate; the paper preset's rates,
    warm-ups and dropout are those of the authors' fairseq commands. A flag still wins."""
    for preset in ("cpu", "paper", "smoke"):
        runs = {method: finetune.parse_args(["--method", method, "--preset", preset, "--data", str(data)])
                for method in ("baseline", "standard", "composed")}
        runs["denoiser"] = train_denoiser.parse_args(["--preset", preset, "--data", str(data)])
        assert all(common.label_smoothing_at(1, args.label_smoothing) == 0 and args.clip_norm == 0
                   for args in runs.values())
        assert runs["composed"].lr == pytest.approx(runs["standard"].lr / 10)
    paper = {method: finetune.parse_args(["--method", method, "--preset", "paper", "--data", str(data)])
             for method in finetune.METHODS}
    assert [(paper[m].lr, paper[m].warmup_steps, paper[m].warmup_start_lr) for m in ("baseline", "standard")] == \
        [(2e-3, 400, 5e-4), (2e-3, 150, 1e-4)]
    assert (paper["composed"].lr, paper["composed"].warmup_steps) == (pytest.approx(2e-4), 90)
    assert all(args.lr_schedule == "inverse-sqrt" and args.epochs >= 300 for args in paper.values())
    assert all((args.dropout, args.attention_dropout, args.activation_dropout) == (0.1, 0.2, 0.2)
               for args in paper.values())
    denoiser = train_denoiser.parse_args(["--preset", "paper", "--data", str(data)])
    assert (denoiser.dropout, denoiser.lr, denoiser.warmup_steps, denoiser.warmup_start_lr) == (0.4, 1e-3, 4000, 1e-7)
    assert finetune.parse_args(["--method", "composed", "--lr", "5e-4", "--data", str(data)]).lr == 5e-4


def test_the_paper_presets_limits_are_the_authors_epochs_and_a_patience_of_50_composed_20(data):
    """The authors' epochs as the limit, a patience of 50 epochs (composed 20); Pi's patience lets it train all 50."""
    paper = {method: finetune.parse_args(["--method", method, "--preset", "paper", "--data", str(data)])
             for method in ("baseline", "standard", "composed")}
    assert {method: (args.epochs, args.patience) for method, args in paper.items()} == \
        {"baseline": (500, 50), "standard": (300, 50), "composed": (300, 20)}
    denoiser = train_denoiser.parse_args(["--preset", "paper", "--data", str(data)])
    assert denoiser.patience >= denoiser.epochs == 50


def fit_on(monkeypatch, losses, shares=None, patience=99):
    """common.fit over made-up epochs, nothing trained: validate gives epoch e loss losses[e - 1] and judged share
    shares[e - 1]; the epochs it ran and the one model.pt holds."""
    validated, judged, saved = iter(losses), iter(shares or [None] * len(losses)), []
    monkeypatch.setattr(common, "train_one_epoch", lambda *args: 0.0)
    state = common.fit(torch.nn.Linear(1, 1), None, itertools.repeat([]), None, dict(
        epoch=0, step=0, best_epoch=0, best_loss=math.inf, best_share=None, history=[]), len(losses), patience,
        lambda model: (next(validated), next(judged)), lambda state, improved: saved.append(improved))
    ran = [row["epoch"] for row in state["history"]]
    kept = [epoch for epoch, improved in zip(ran, saved) if improved][-1]
    assert kept == state["best_epoch"]
    return ran, kept


def test_a_run_stops_patience_epochs_after_its_best(monkeypatch):
    """A better epoch starts the wait again; `patience` epochs with no better one end the run, unseen what follows."""
    assert fit_on(monkeypatch, [0.9, 0.5, 0.6, 0.4, 0.7, 0.8, 0.1, 0.1], patience=2) == ([1, 2, 3, 4, 5, 6], 4)
    assert fit_on(monkeypatch, [0.5, 0.6, 0.7, 0.8, 0.1], patience=3) == ([1, 2, 3, 4], 1)


@pytest.mark.parametrize("shares, losses, kept", [
    (None, [0.9, 0.5, 0.7, 0.5], 2),                      # no share: the lowest loss, first reached
    ([0.2, 0.5, 0.5], [0.9, 0.8, 0.7], 3),                # a tie, the later epoch's loss lower
    ([0.2, 0.5, 0.5], [0.9, 0.7, 0.8], 2),                # a tie, the later epoch's loss higher
    ([0.3, 0.3, 0.3], [0.6, 0.7, 0.5], 3),                # tied throughout: the loss alone
    ([0.2, 0.5, 0.4, 0.5], [0.1, 0.9, 0.2, 0.8], 4),      # a tie with the best, not with the epoch before
    ([0.5, 0.6], [0.5, 0.9], 2),                          # a better share with a worse loss
    ([0.6, 0.5], [0.9, 0.5], 1)])                         # a worse share with a better loss
def test_the_kept_epoch_has_the_highest_share_its_ties_broken_by_the_lower_loss(monkeypatch, shares, losses, kept):
    """common.fit keeps (--keep-by) the highest judged share, ties broken by the lower loss; else the lowest loss."""
    assert fit_on(monkeypatch, losses, shares)[1] == kept


@pytest.mark.parametrize("method", ["standard", "bart", "composed"])
def test_fine_tuning_trains_with_its_own_dropout_not_the_denoisers(data, tmp_path, monkeypatch, method):
    """On the paper preset Pi trains with dropout 0.4; a predictor that starts from its weights trains with
    its own row's 0.1 / 0.2 / 0.2 (the authors rebuild the model from the fine-tuning command)."""
    spm = harness.read_data_folder(str(data))["spm"]
    paper = dict(vocab_size=150, d_model=256, n_heads=2, encoder_layers=3, decoder_layers=3, d_ff=1024)
    pi = common.Transformer(common.TransformerConfig(**paper, dropout=0.4, attention_dropout=0.2,
                                                     activation_dropout=0.2))
    checkpoint = {"config": dataclasses.asdict(pi.config), "model": pi.state_dict(), "spm": spm, "role": "denoiser"}
    harness.save_checkpoint(str(tmp_path / "pi.pt"), checkpoint)
    built = []
    monkeypatch.setattr(harness, "train", lambda model, *args, **kwargs: built.append(model) or
                        {"best_epoch": 1, "best_loss": 1.0, "best_share": None})
    f = {**checkpoint, "role": "predictor"}  # composed's f, with the same weights
    monkeypatch.setattr(harness, "load_checkpoint",  # (bart reloads its first stage's)
                        lambda path, needs=(), flag=None: f if path.endswith("f.pt") else checkpoint)
    init = ["--init", str(tmp_path / "f.pt")] if method == "composed" else []
    finetune.finetune(finetune.parse_args(["--method", method, "--preset", "paper", "--data", str(data), *init,
                                           "--denoiser", str(tmp_path / "pi.pt"), "--out", str(tmp_path / method)]))
    model = built[0]
    assert torch.equal(model.embed.weight, pi.embed.weight)  # Pi's weights ...
    layer = model.decoder[0]
    assert (model.config.dropout, layer.dropout, layer.self_attention.dropout, layer.ffn[2].p) == \
        (0.1, 0.1, 0.2, 0.2)  # ... and the fine-tuning row's dropout


def test_an_epoch_trains_the_same_whatever_the_number_of_epochs(data, tmp_path):
    """The batch order is the seed's and the epoch's: at a constant rate, epoch 1 of a 1-epoch run and of
    a 2-epoch run see the same batches and end with the same loss."""
    first = [epoch_losses(script("finetune.py", "--method", "baseline", "--preset", "smoke", "--data", data,
                                 "--out", tmp_path / str(n), "--epochs", n, "--lr-schedule", "constant").stderr)[0]
             for n in (1, 2)]
    assert first[0] == first[1]


def test_each_epoch_serves_the_same_pairs_in_an_order_of_its_own(data, tmp_path, monkeypatch):
    """harness.train draws each epoch's batches from the seed and the epoch: the same pairs, in another order."""
    args = finetune.parse_args(["--method", "baseline", "--preset", "smoke", "--data", str(data), "--epochs", "3",
                                "--out", str(tmp_path)])
    tokenizer = common.load_tokenizer(harness.read_data_folder(str(data))["spm"])
    pairs, served = finetune.load_pairs(str(data), "train", tokenizer), []
    monkeypatch.setattr(common, "fit", lambda model, optimizer, upcoming, *rest: served.extend(upcoming) or dict(
        best_loss=1.0))
    model = common.Transformer(harness.transformer_config(args, tokenizer.get_piece_size()))
    harness.train(model, args, {}, lambda epoch: pairs, pairs[:8])
    orders = [[row for src, _, _ in epoch for row in src.tolist()] for epoch in served]
    assert len(orders) == 3 and all(a != b for a, b in itertools.combinations(orders, 2))
    assert all(sorted(order) == sorted(orders[0]) for order in orders) and len(orders[0]) == len(pairs)


def run_killed_and_resumed(command: list, out, kill_after: list[float]):
    """Run `command` (with --out out), SIGKILL it kill_after[i] seconds after its next epoch is saved, resume it with
    --resume, and so on; then let the last resumed run finish."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    last, done = out / "last.pt", 0
    for i, delay in enumerate(kill_after):
        proc = subprocess.Popen(command + ["--resume"] * bool(i), stderr=subprocess.DEVNULL, env=env)
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:  # until an epoch beyond the last kill's is saved
            if last.exists() and harness.load_checkpoint(str(last), needs=("state",))["state"]["epoch"] > done:
                break
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, "the run ended before it was killed: kill it sooner"
        done = harness.load_checkpoint(str(last), needs=("state",))["state"]["epoch"]
    result = subprocess.run(command + ["--resume"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert f"resumed from {last} after epoch {done}" in result.stderr


@pytest.mark.parametrize("stage", ["denoiser", "standard", "composed"])
def test_a_run_killed_twice_and_resumed_ends_bit_for_bit_as_an_unbroken_one(data, denoiser, tmp_path, stage):
    """SIGKILL at two moments inside an epoch (or its validation, or its save), --resume each time: the final model.pt
    and last.pt (weights, optimizer state) and the history (but its seconds) equal an unbroken run's, torch.equal on
    every tensor. Pi, standard under its linear schedule, composed (f's samples)."""
    flags = {"denoiser": ["train_denoiser.py", "--repair-every", "0"],
             "standard": ["finetune.py", "--method", "standard", "--denoiser", denoiser[0], "--warmup-steps", "2"],
             "composed": ["finetune.py", "--method", "composed", "--denoiser", denoiser[0], "--init",
                          tmp_path / "standard" / "model.pt", "--lr-schedule", "linear", "--warmup-steps", "2"]}[stage]
    if stage == "composed":  # an f to start from
        result = script("finetune.py", "--method", "standard", "--preset", "smoke", "--data", data, "--denoiser",
                        denoiser[0], "--out", tmp_path / "standard", "--epochs", "1")
        assert result.returncode == 0, result.stderr
    command = [sys.executable, os.path.join(ROOT, flags[0]), *map(str, flags[1:]), "--preset", "smoke", "--data",
               str(data), "--epochs", "5", "--patience", "9"]
    unbroken = subprocess.run(command + ["--out", str(tmp_path / "unbroken")], capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert unbroken.returncode == 0, unbroken.stderr
    rng = random.Random(stage)
    run_killed_and_resumed(command + ["--out", str(tmp_path / "killed")], tmp_path / "killed",
                           [rng.uniform(0, 0.3), rng.uniform(0, 0.3)])
    for name in ("model.pt", "last.pt"):
        whole, broken = (harness.load_checkpoint(str(tmp_path / run / name)) for run in ("unbroken", "killed"))
        assert whole["model"].keys() == broken["model"].keys()
        assert all(torch.equal(whole["model"][key], broken["model"][key]) for key in whole["model"]), name
    whole, broken = (harness.load_checkpoint(str(tmp_path / run / "last.pt")) for run in ("unbroken", "killed"))
    for a, b in zip(whole["optimizer"]["state"].values(), broken["optimizer"]["state"].values()):
        assert all(torch.equal(a[key], b[key]) for key in a)
    without_seconds = lambda history: json.dumps([{k: v for k, v in h.items() if k != "seconds"}  # noqa: E731
                                                  for h in history])  # (as text: composed's epoch 0 has NaN)
    assert without_seconds(whole["state"]["history"]) == without_seconds(broken["state"]["history"])
    assert len(whole["state"]["history"]) >= 5


def test_resume_without_a_last_checkpoint_says_so(data, tmp_path):
    result = script("finetune.py", "--method", "baseline", "--preset", "smoke", "--data", data, "--out", tmp_path,
                    "--epochs", "1", "--resume")
    assert result.returncode == 0, result.stderr
    assert f"there is no {tmp_path / 'last.pt'} yet, so this run starts from its beginning" in result.stderr


def test_a_run_killed_before_its_first_last_checkpoint_resumes_with_its_settings(data, tmp_path):
    """A run killed in its first epoch has model.pt (composed's epoch 0, or epoch 1's best) but no last.pt: --resume
    takes the settings model.pt ran with, and refuses others, as with last.pt."""
    ran = script("finetune.py", "--method", "baseline", "--preset", "smoke", "--data", data, "--out", tmp_path,
                 "--epochs", "1", "--lr", "5e-4")
    assert ran.returncode == 0, ran.stderr
    os.remove(tmp_path / "last.pt")
    flags = ["--method", "baseline", "--preset", "smoke", "--data", str(data), "--out", str(tmp_path), "--resume"]
    assert finetune.parse_args(flags).lr == 5e-4  # (the preset's is 1e-3)
    with pytest.raises(common.UsageError, match=r"--lr 0.002 \(it ran with 0.0005\)"):
        harness.claim_output(finetune.parse_args([*flags, "--lr", "2e-3"]))


@pytest.mark.parametrize("method", ["bart", "backtranslation"])
def test_a_staged_run_resumed_in_a_later_stage_keeps_its_settings(data, denoiser, tmp_path, method):
    """Killed in its last stage before that stage saved anything (as if: its top-level checkpoints, and
    backtranslation's mixed/, removed), --resume with no flags goes on with the settings the run ran with, not the
    preset's, and ends bit for bit as the unbroken run; a changed setting is refused, as in a run of one stage."""
    flags = {"bart": ["--denoiser", denoiser[0], "--frozen-epochs", "1"],
             "backtranslation": ["--reverse-epochs", "1", "--labeled-epochs", "2", "--synthetic-programs", "8"]}[method]
    flags = ["--method", method, "--preset", "smoke", "--data", data, *flags, "--epochs", "3", "--patience", "9"]
    unbroken = script("finetune.py", *flags, "--out", tmp_path / "unbroken")
    assert unbroken.returncode == 0, unbroken.stderr
    shutil.copytree(tmp_path / "unbroken", tmp_path / "killed")
    for name in ("model.pt", "last.pt", "mixed"):
        path = tmp_path / "killed" / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    refused = script("finetune.py", "--method", method, "--preset", "smoke", "--data", data, "--out",
                     tmp_path / "killed", "--resume", "--lr", "5e-4")
    assert refused.returncode == 2 and "--lr 0.0005 (it ran with 0.001)" in refused.stderr, refused.stderr
    resumed = script("finetune.py", "--method", method, "--preset", "smoke", "--data", data, "--out",
                     tmp_path / "killed", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    settings = resumed.stderr.split("settings: ")[1].splitlines()[0]
    assert "epochs=3," in settings and "patience=9," in settings, settings
    whole, broken = (harness.load_checkpoint(str(tmp_path / run / "model.pt")) for run in ("unbroken", "killed"))
    assert (broken["args"]["epochs"], broken["args"]["patience"]) == (3, 9)
    assert all(torch.equal(whole["model"][key], broken["model"][key]) for key in whole["model"])


@pytest.mark.parametrize("command, stage", [(["train_denoiser.py"], ""), (["finetune.py", "--method", "baseline"], ""),
                                            (["finetune.py", "--method", "bart", "--frozen-epochs", "1"], "frozen"),
                                            (["finetune.py", "--method", "backtranslation"], "reverse"),
                                            (["finetune.py", "--method", "composed"], "")])
def test_a_run_whose_loss_never_improves_says_so_and_claims_no_model(data, denoiser, tmp_path, command, stage):
    """A run that diverges (validation loss nan from its first epoch) ends in one line and exit code 1, and no
    model.pt, in its folder or a stage's; it does not claim one (bart and backtranslation: in their first stage;
    composed: its epoch 0, the f it starts from, scored by a Pi whose weights are nan)."""
    command = [*command, *["--denoiser", denoiser[0]] * (stage == "frozen")]  # (a copy: the parameter stays)
    if "composed" in command:
        pi = torch.load(denoiser[0], weights_only=False)
        torch.save({**pi, "role": "predictor"}, tmp_path / "f.pt")
        torch.save({**pi, "model": {k: torch.full_like(v, math.nan) for k, v in pi["model"].items()}},
                   tmp_path / "pi.pt")
        command = [*command, "--denoiser", tmp_path / "pi.pt", "--init", tmp_path / "f.pt"]
    result = script(*command, "--preset", "smoke", "--data", data, "--out", tmp_path, "--lr", "1e6", "--lr-schedule",
                    "constant", "--warmup-steps", "0")
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[-1] == f"{command[0]}: no epoch had a finite validation loss (the last: nan), " \
        f"so {tmp_path / stage} holds no model.pt: a lower --lr may help"
    assert "Traceback" not in result.stderr and "->" not in result.stdout
    assert not glob.glob(str(tmp_path / "**" / "model.pt"), recursive=True)


def test_a_resume_goes_on_with_what_the_last_resume_changed(data, denoiser, tmp_path):
    """Composed keeps its epoch 0 here, so model.pt holds the settings of the first run and last.pt those of the
    resume that changed --epochs (a change a resume may make): the next --resume goes on with the latter, even where
    a copy made model.pt the newer file."""
    f = tmp_path / "f.pt"
    torch.save({**torch.load(denoiser[0], weights_only=False), "role": "predictor"}, f)  # Pi's weights as f
    flags = ["--method", "composed", "--preset", "smoke", "--data", data, "--denoiser", denoiser[0], "--init", f,
             "--out", tmp_path / "run", "--lr", "1e-9", "--lr-schedule", "constant"]  # (no epoch beats epoch 0)
    for more in (["--epochs", "1"], ["--epochs", "2", "--resume"]):
        assert script("finetune.py", *flags, *more).returncode == 0
    kept, last = (harness.load_checkpoint(str(tmp_path / "run" / name)) for name in ("model.pt", "last.pt"))
    assert (kept["epoch"], kept["args"]["epochs"], last["args"]["epochs"]) == (0, 1, 2)
    os.utime(tmp_path / "run" / "model.pt", (time.time() + 60,) * 2)
    again = script("finetune.py", *flags, "--resume")
    assert again.returncode == 0, again.stderr
    assert "epochs=2," in again.stderr.split("settings: ")[1].splitlines()[0]


def test_composed_resumes_only_against_the_pi_it_trained_against(data, denoiser, tmp_path):
    """Its settings name Pi's path: a Pi retrained at that path since is refused, not trained against unnoticed."""
    pi, f = tmp_path / "pi.pt", tmp_path / "f.pt"
    shutil.copy(denoiser[0], pi)
    torch.save({**torch.load(pi, weights_only=False), "role": "predictor"}, f)  # an f to start from: Pi's weights
    flags = ["--method", "composed", "--preset", "smoke", "--data", str(data), "--denoiser", str(pi), "--init", str(f),
             "--out", str(tmp_path / "run")]
    ran = script("finetune.py", *flags, "--epochs", "1")
    assert ran.returncode == 0, ran.stderr
    retrained = torch.load(pi, weights_only=False)
    retrained["model"]["embed.weight"] += 0.01
    torch.save(retrained, pi)
    with pytest.raises(common.UsageError, match="is not the Pi this run trained against"):
        finetune.finetune(finetune.parse_args([*flags, "--epochs", "2", "--resume"]))


@pytest.mark.parametrize("ran, command", [("denoiser", ["finetune.py", "--method", "baseline"]),
                                          ("standard", ["train_denoiser.py"])])
def test_resume_refuses_a_run_of_another_script_or_method(data, denoiser, tmp_path, ran, command):
    """A copy of a denoiser's run resumed as a baseline, or of a standard run as a denoiser, is refused in one line
    before any work: its weights and settings would train as the other's, into its own model.pt."""
    if ran == "standard":
        made = script("finetune.py", "--method", "standard", "--preset", "smoke", "--data", data, "--denoiser",
                      denoiser[0], "--out", tmp_path / "standard", "--epochs", "1")
        assert made.returncode == 0, made.stderr
    shutil.copytree(denoiser[0].parent if ran == "denoiser" else tmp_path / "standard", tmp_path / "copy")
    files = {path: path.read_bytes() for path in (tmp_path / "copy").iterdir()}
    result = script(*command, "--preset", "smoke", "--data", data, "--out", tmp_path / "copy", "--epochs", "5",
                    "--resume")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    ran_by = "train_denoiser.py" if ran == "denoiser" else "finetune.py --method standard"
    assert f"{tmp_path / 'copy' / 'last.pt'} holds a run of {ran_by}" in result.stderr
    assert {path: path.read_bytes() for path in (tmp_path / "copy").iterdir()} == files


def test_a_staged_run_refuses_to_lengthen_a_stage_it_has_begun(data, tmp_path):
    """backtranslation's --epochs is its mixed/ stage's: once mixed/ has begun, the next stage starts from its end, so
    a resume with another --epochs (even with the next stage's files removed) is refused in one line, every file as it
    was; the checkpoints never record a length a stage did not train."""
    flags = ["--method", "backtranslation", "--preset", "smoke", "--data", data, "--out", tmp_path, "--reverse-epochs",
             "1", "--labeled-epochs", "1", "--synthetic-programs", "8", "--patience", "9"]
    ran = script("finetune.py", *flags, "--epochs", "1")
    assert ran.returncode == 0, ran.stderr
    for top_files_removed in (False, True):
        for name in ("model.pt", "last.pt") if top_files_removed else ():
            (tmp_path / name).unlink()
        files = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
        resumed = script("finetune.py", *flags, "--epochs", "3", "--resume")
        assert resumed.returncode == 2, resumed.stderr
        assert resumed.stderr.splitlines()[-1] == "finetune.py: error: --resume: mixed/ began with at most 1 epochs " \
            "and patience 9 and keeps them: resume with the settings it ran with, or --overwrite"
        assert not epoch_losses(resumed.stderr)  # no epoch trained again
        assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == files
    assert script("finetune.py", *flags, "--resume").returncode == 0
    assert harness.load_checkpoint(str(tmp_path / "model.pt"))["args"]["epochs"] == 1


def test_a_folder_holds_a_run_whichever_script_asks(data, tmp_path):
    """A backtranslation run killed after its first stage (reverse/ alone) is refused by train_denoiser.py, with or
    without --resume, and by another --method, each naming the command that resumes it; that command then does."""
    flags = ["--method", "backtranslation", "--preset", "smoke", "--data", data, "--out", tmp_path, "--reverse-epochs",
             "1", "--labeled-epochs", "1", "--synthetic-programs", "8", "--epochs", "1"]
    assert script("finetune.py", *flags).returncode == 0
    for name in ("model.pt", "last.pt", "mixed", "synthetic.src", "synthetic.tgt"):
        shutil.rmtree(tmp_path / name) if (tmp_path / name).is_dir() else (tmp_path / name).unlink()
    files = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    taken = script("train_denoiser.py", "--preset", "smoke", "--data", data, "--out", tmp_path)
    assert taken.returncode == 2 and f"{tmp_path} holds a run (reverse/last.pt)" in taken.stderr, taken.stderr
    for command in (["train_denoiser.py"], ["finetune.py", "--method", "baseline"]):
        resumed = script(*command, "--preset", "smoke", "--data", data, "--out", tmp_path, "--resume")
        assert resumed.returncode == 2 and len(resumed.stderr.splitlines()) == 1, resumed.stderr
        assert "holds a run of finetune.py --method backtranslation: resume it with that" in resumed.stderr
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == files
    assert script("finetune.py", "--method", "backtranslation", "--data", data, "--out", tmp_path,
                  "--resume").returncode == 0


def test_a_missing_default_checkpoint_names_the_flag_that_gives_another(data, tmp_path):
    """standard and composed take Pi (and composed f) from default paths: where none is there, the line says which flag
    names one (a new user's Pi was elsewhere)."""
    for method, flag in (("standard", "--denoiser"), ("composed", "--init")):
        result = script("finetune.py", "--method", method, "--preset", "smoke", "--data", data, cwd=tmp_path)
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stderr.rstrip().endswith(f"model.pt (from {tmp_path}): train it, or give {flag} PATH")


def test_a_denoiser_resumes_with_another_report_of_its_repairs(data, tmp_path):
    """--repair-every and --repair-programs say how Pi reports, not what it learns: a resume may change them."""
    flags = ["--preset", "smoke", "--data", data, "--out", tmp_path, "--repair-programs", "4"]
    assert script("train_denoiser.py", *flags, "--epochs", "1").returncode == 0
    resumed = script("train_denoiser.py", *flags, "--epochs", "2", "--repair-every", "0", "--repair-programs", "2",
                     "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "repair_every=0," in resumed.stderr and "repair_programs=2," in resumed.stderr


def test_a_staged_run_resumes_with_its_last_stages_settings_whatever_the_files_times(data, denoiser, tmp_path):
    """bart resumed with a larger --epochs goes on in its last stage alone (frozen/ stays as it was); a copy that made
    frozen/'s checkpoints and model.pt newer than last.pt does not bring back the settings they hold."""
    flags = ["--method", "bart", "--preset", "smoke", "--data", str(data), "--denoiser", str(denoiser[0]), "--out",
             str(tmp_path), "--frozen-epochs", "1", "--patience", "9"]
    assert script("finetune.py", *flags, "--epochs", "2").returncode == 0
    frozen = {path: path.read_bytes() for path in (tmp_path / "frozen").iterdir()}
    resumed = script("finetune.py", *flags, "--epochs", "3", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert {path: path.read_bytes() for path in (tmp_path / "frozen").iterdir()} == frozen
    last = harness.load_checkpoint(str(tmp_path / "last.pt"))
    assert (last["state"]["epoch"], last["args"]["epochs"]) == (2, 3)  # its last stage: --epochs 3 less frozen/'s 1
    for later, path in enumerate(["model.pt", "frozen/model.pt", "frozen/last.pt"], start=1):  # frozen/last.pt newest
        os.utime(tmp_path / path, (time.time() + 60 * later,) * 2)
    assert finetune.parse_args([*flags, "--resume"]).epochs == 3


def test_overwrite_removes_the_old_runs_stages(data, tmp_path):
    """A backtranslation run started over with --overwrite, which fails in its first stage, leaves none of the old
    run's stages (mixed/, synthetic.*) for a --resume to take as its own."""
    flags = ["--method", "backtranslation", "--preset", "smoke", "--data", data, "--out", tmp_path, "--reverse-epochs",
             "1", "--labeled-epochs", "1", "--synthetic-programs", "8"]
    assert script("finetune.py", *flags).returncode == 0
    assert {"reverse", "synthetic.src", "synthetic.tgt", "mixed", "model.pt"} <= set(os.listdir(tmp_path))
    diverged = script("finetune.py", *flags, "--overwrite", "--lr", "1e6", "--lr-schedule", "constant",
                      "--warmup-steps", "0")
    assert diverged.returncode == 1, diverged.stderr
    assert os.listdir(tmp_path) == ["reverse"] and os.listdir(tmp_path / "reverse") == ["last.pt"]


def denoiser_pairs(data, *flags):
    """pairs(epoch): the denoiser's training pairs of an epoch (smoke preset), and its batch size."""
    args = train_denoiser.parse_args(["--preset", "smoke", "--data", str(data), "--device", "cpu", *flags])
    tokenizer = common.load_tokenizer(harness.read_data_folder(str(data))["spm"])
    programs = train_denoiser.training_outputs(args)
    clean_ids = tokenizer.encode(programs)
    return lambda epoch: train_denoiser.corrupted_pairs(programs, clean_ids, tokenizer, args, epoch), args.batch_size


def test_the_authors_pi_data_is_the_unlabeled_programs_corrupted_once(data):
    """--pi-data authors: each unlabeled program corrupted once, the same pairs every epoch; ours: the unlabeled and
    the labeled code, corrupted afresh every epoch."""
    unlabeled, labeled = (common.read_lines(str(data / name)) for name in ("unlabeled.tgt", "train.tgt"))
    tokenizer = common.load_tokenizer(harness.read_data_folder(str(data))["spm"])
    for pi_data, programs in (("authors", unlabeled), ("ours", unlabeled + labeled)):
        pairs, _ = denoiser_pairs(data, "--pi-data", pi_data, "--unlabeled", "0")
        epochs = [pairs(epoch) for epoch in (1, 2, 3)]
        assert [tokenizer.decode(clean) for _, clean in epochs[0]] == programs
        assert (epochs[0] == epochs[1] == epochs[2]) == (pi_data == "authors"), pi_data
        assert sum(noisy != clean for noisy, clean in epochs[0]) > len(programs) / 2  # corrupted, once or afresh


def test_the_worker_process_makes_each_epoch_as_this_process_would(data):
    """harness.train's worker process (epochs_ahead) hands over each epoch's batches byte for byte as made here: the same
    corruption streams, so a run's results do not depend on where its epochs were made; and making them draws
    nothing from the training's random generator (dropout, f's samples)."""
    pairs, batch_size = denoiser_pairs(data)
    make_epoch = lambda epoch: common.batches(pairs(epoch), batch_size, random.Random(epoch))  # noqa: E731
    torch.manual_seed(0)
    generator = torch.get_rng_state()
    from_worker = list(harness.epochs_ahead(make_epoch, range(1, 4)))
    assert torch.equal(torch.get_rng_state(), generator)
    here = [make_epoch(epoch) for epoch in range(1, 4)]
    assert [len(epoch) for epoch in from_worker] == [len(epoch) for epoch in here]
    for theirs, ours in zip(from_worker, here):
        for batch_theirs, batch_ours in zip(theirs, ours):
            for a, b in zip(batch_theirs, batch_ours):
                assert a.dtype == b.dtype == torch.long and a.shape == b.shape and torch.equal(a, b)
    assert not torch.equal(here[0][0][0], here[1][0][0])  # fresh corruptions and order each epoch


def test_batches_hold_one_length_each_in_an_order_and_company_the_rng_draws():
    """With an rng, each batch holds pairs of one length, but which pairs of a length share a batch and the order the
    batches come in are the rng's: not shortest first, and others with another seed."""
    pairs = [([10 + i], [5] * (1 + i // 16)) for i in range(64)]  # outputs of 4 lengths, 16 of each; inputs all apart

    def served(seed):
        """(output lengths, inputs) of each batch, in the order they come."""
        return [((tgt_out != common.PAD_ID).sum(1).tolist(), sorted(src[:, 0].tolist()))
                for src, _, tgt_out in common.batches(pairs, 8, random.Random(seed))]
    first, second = served(0), served(1)
    for batches in (first, second):
        assert sorted(i for _, inputs in batches for i in inputs) == [10 + i for i in range(64)]
        assert all(len(set(lengths)) == 1 for lengths, _ in batches)
    assert [lengths for lengths, _ in first] != sorted(lengths for lengths, _ in first)
    assert sorted(inputs for _, inputs in first) != sorted(inputs for _, inputs in second)


def test_padding_to_a_multiple_of_8_changes_no_loss(data):
    """On a GPU, batches are padded to lengths that are multiples of 8 (harness.train): a few shapes. The
    padding is masked as keys and ignored as targets, so each batch's loss is the unpadded batch's."""
    pairs, batch_size = denoiser_pairs(data)
    tight, padded = (common.batches(pairs(1), batch_size, random.Random(0), multiple) for multiple in (1, 8))
    torch.manual_seed(0)
    model = common.Transformer(common.TransformerConfig(vocab_size=150, d_model=32, n_heads=2, encoder_layers=1,
                                                        decoder_layers=1, d_ff=64)).eval()
    assert len(tight) == len(padded)
    for (src, tgt_in, tgt_out), (src8, tgt_in8, tgt_out8) in zip(tight, padded):
        assert src8.shape[1] % 8 == tgt_in8.shape[1] % 8 == 0 and tgt_in8.shape == tgt_out8.shape
        assert torch.equal(src8[:, :src.shape[1]], src) and torch.equal(tgt_out8[:, :tgt_out.shape[1]], tgt_out)
        with torch.no_grad():
            loss, loss8 = (common.sequence_loss(model(s, i), o) for s, i, o in ((src, tgt_in, tgt_out),
                                                                              (src8, tgt_in8, tgt_out8)))
        assert loss8.item() == pytest.approx(loss.item(), abs=1e-5)
    assert any(src8.shape != src.shape for (src, _, _), (src8, _, _) in zip(tight, padded))  # some were padded


def test_inputs_with_no_gold_come_in_batches_of_their_own_the_next_ones_each_epoch(data, denoiser, tmp_path):
    """composed --unlabeled-inputs N: epoch e adds lines (e - 1) N .. e N - 1 of unlabeled.src (from the start again
    after the end) as inputs alone, which common.batches never mixes with labeled pairs; a run trains with them; a
    data folder without unlabeled.src is refused in one line, nothing written."""
    args = finetune.parse_args(["--method", "composed", "--preset", "smoke", "--data", str(data), "--out",
                                str(tmp_path / "run"), "--unlabeled-inputs", "25"])
    tokenizer = common.load_tokenizer(harness.read_data_folder(str(data))["spm"])
    inputs_alone = finetune.unlabeled_inputs(args, tokenizer)
    sources = tokenizer.encode(common.read_lines(str(data / "unlabeled.src")))  # 60 of them
    assert inputs_alone(2) == [(x, None) for x in sources[25:50]] and inputs_alone(3) == [
        (x, None) for x in sources[50:] + sources[:15]]
    pairs = finetune.load_pairs(str(data), "train", tokenizer)
    made = common.batches(pairs + inputs_alone(1), 8, random.Random(0))
    alone = [batch for batch in made if (batch[2] == common.PAD_ID).all()]  # targets of one PAD each
    labeled = [batch for batch in made if (batch[2][:, 0] != common.PAD_ID).all()]  # every row with its gold
    assert sorted(len(src) for src, _, _ in alone) == [1, 8, 8, 8] and all(t.shape[1] == 1 for _, t, _ in alone)
    assert sum(len(src) for src, _, _ in labeled) == 40 and len(alone) + len(labeled) == len(made)
    f = script("finetune.py", "--method", "standard", "--preset", "smoke", "--data", data, "--denoiser", denoiser[0],
               "--epochs", "1", "--out", tmp_path / "f")
    result = script("finetune.py", "--method", "composed", "--preset", "smoke", "--data", data, "--init",
                    tmp_path / "f" / "model.pt", "--denoiser", denoiser[0], "--unlabeled-inputs", "25", "--epochs", "1",
                    "--out", tmp_path / "run")
    assert f.returncode == 0 and result.returncode == 0, f.stderr + result.stderr
    assert harness.load_checkpoint(str(tmp_path / "run" / "model.pt"))["args"]["unlabeled_inputs"] == 25
    bare = tmp_path / "bare"
    shutil.copytree(data, bare)
    os.remove(bare / "unlabeled.src")
    result = script("finetune.py", "--method", "composed", "--preset", "smoke", "--data", bare, "--init",
                    tmp_path / "f" / "model.pt", "--denoiser", denoiser[0], "--unlabeled-inputs", "25", "--out",
                    tmp_path / "refused")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "unlabeled.src" in result.stderr and not (tmp_path / "refused").exists()
