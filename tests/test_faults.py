"""A new user's faults: every bad input is one line on stderr and exit code 2, before any work, and nothing
the user made is lost or misread (a finished run is never replaced unasked, a checkpoint of the wrong role is
refused, a resumed run keeps its settings).

The table FAULTS holds the bad inputs as data: the script, its arguments, and a word its one line must hold.
The scripts run in this process (their main(argv)), so the table stays fast."""
import json
import os
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
import fonts
import make_molecules
import make_sanstype
import make_spoc
import make_task
import predict
import staircase
import train_denoiser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPOC = os.path.join(ROOT, "tests", "fixtures", "spoc")
MAINS = {"make_sanstype.py": make_sanstype.main, "make_spoc.py": make_spoc.main, "train_denoiser.py":
         train_denoiser.main, "finetune.py": finetune.main, "evaluate.py": evaluate.main, "fonts.py": fonts.main,
         "staircase.py": staircase.main, "make_task.py": make_task.main, "predict.py": predict.main}
SMOKE = ("--preset", "smoke")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return make_work(tmp_path_factory.mktemp("faults"))


def make_work(w):
    """A tiny data folder and a copy of it, a denoiser and a standard predictor trained on it, both also as an older
    version of this code saved them (its parameters named otherwise), a junk file, data folders with a truncated
    and an empty tokenizer, and a finished fonts checkpoint: what the faults below point at."""
    make_sanstype.main(["--out", str(w / "data"), "--labeled", "40", "--unlabeled", "60", "--num-eval", "8",
                        "--vocab-size", "150", "--seed", "3"])
    train_denoiser.main(["--data", str(w / "data"), *SMOKE, "--out", str(w / "pi"), "--repair-every", "0"])
    finetune.main(["--method", "standard", "--data", str(w / "data"), *SMOKE, "--denoiser", str(w / "pi/model.pt"),
                   "--out", str(w / "standard"), "--epochs", "1"])
    for run, old in (("pi", "old_pi.pt"), ("standard", "old_f.pt")):
        checkpoint = torch.load(w / run / "model.pt", weights_only=False)
        checkpoint["model"] = {f"transformer.{name}": weight for name, weight in checkpoint["model"].items()}
        torch.save(checkpoint, w / old)
    (w / "junk.pt").write_text("hello")
    for folder, tokenizer in (("copy", None), ("broken", slice(0, 100)), ("empty", slice(0, 0)), ("odd", None)):
        (w / folder).mkdir()
        for name in ("dataset.json", "train.src", "train.tgt", "val.src", "val.tgt", "unlabeled.tgt", "spm.model"):
            content = (w / "data" / name).read_bytes()
            (w / folder / name).write_bytes(content[tokenizer] if name == "spm.model" and tokenizer else content)
    facts = json.loads((w / "odd" / "dataset.json").read_text())
    (w / "odd" / "dataset.json").write_text(json.dumps({**facts, "corruption": "nonsense"}))  # a noise we lack
    (w / "fonts_run.pt").write_bytes(b"a finished fonts run")
    (w / "glyphs.npz").write_bytes(b"rendered fonts")
    torch.save({"kind": "denoiser", "config": {}, "state_dict": {}}, w / "fonts_pi.pt")  # as fonts.py writes one
    return w


def fault_table(w):
    """(script, arguments, a word the one line must hold). {w}: the work folder; {file}/x: under a file."""
    data, pi, f = ["--data", f"{w}/data"], f"{w}/pi/model.pt", f"{w}/standard/model.pt"
    under_a_file, out = f"{w}/junk.pt/x", f"{w}/new_run"
    return [
        ("make_sanstype.py", ["--labeled", "0", "--out", out], "--labeled 0: must be at least 1"),
        ("make_sanstype.py", ["--out", under_a_file], "cannot write there"),
        ("make_sanstype.py", ["--out", f"{w}/data", "--labeled", "5"], "there is data there already (dataset.json)"),
        ("make_spoc.py", ["--spoc", SPOC, "--out", f"{w}/data"], "there is data there already (dataset.json)"),
        ("fonts.py", ["render", "--out", f"{w}/glyphs.npz"], "holds rendered fonts: --overwrite"),
        ("train_denoiser.py", ["--data", f"{w}/data/train.src", *SMOKE, "--out", out],
         f"is a file: name the data folder that holds it ({w}/data)"),
        ("fonts.py", ["train", "--method", "composed", "--denoiser", pi, "--out", f"{w}/fonts_new.pt"],
         "is a denoiser checkpoint of the code experiments (train_denoiser.py, finetune.py), not of fonts.py"),
        ("finetune.py", ["--method", "standard", *data, *SMOKE, "--denoiser", f"{w}/fonts_pi.pt", "--out", out],
         "is a denoiser checkpoint of fonts.py, not of the code experiments"),
        ("make_spoc.py", ["--spoc", f"{w}/nowhere", "--out", out], "missing file"),
        ("make_spoc.py", ["--spoc", SPOC, "--out", under_a_file], "cannot write there"),
        ("train_denoiser.py", ["--data", f"{w}/nowhere", "--out", out], "dataset.json"),
        ("train_denoiser.py", [*data, "--epochs", "-3", "--out", out], "at least 1"),
        ("train_denoiser.py", [*data, *SMOKE, "--out", under_a_file], "cannot write there"),
        ("train_denoiser.py", [*data, *SMOKE, "--out", f"{w}/pi"], "holds a run"),
        ("train_denoiser.py", [*data, *SMOKE, "--out", out, "--device", "tpu"], "this machine has cpu"),
        ("train_denoiser.py", [*data, *SMOKE, "--out", out, "--device", "cuda:7"], "this machine has"),
        ("train_denoiser.py", [*data, *SMOKE, "--out", out, "--corruption", "random", "--num-corruptions", "2"],
         "is for --corruption code"),
        ("train_denoiser.py", [*data, *SMOKE, "--out", out, "--unlabeled", "99999"], "has only 100 outputs"),
        ("train_denoiser.py", [*data, *SMOKE, "--out", f"{w}/pi", "--resume", "--lr", "0.5"], "it ran with 0.001"),
        ("train_denoiser.py", [*data, *SMOKE, "--out", f"{w}/pi", "--resume", "--overwrite"], "not allowed with"),
        ("train_denoiser.py", ["--data", f"{w}/broken", *SMOKE, "--out", out], "not a sentencepiece model"),
        ("train_denoiser.py", ["--data", f"{w}/empty", *SMOKE, "--out", out], "not a sentencepiece model"),
        ("train_denoiser.py", ["--data", f"{w}/copy", *SMOKE, "--out", f"{w}/pi", "--resume"], "it ran with"),
        ("train_denoiser.py", [*data, *SMOKE, "--out", f"{w}/pi", "--resu"], "unrecognized arguments: --resu"),
        ("finetune.py", ["--method", "standard", "--data"], "argument --data: expected one argument"),
        ("evaluate.py", ["--data"], "argument --data: expected one argument"),
        ("finetune.py", ["--method", "bart", *data, *SMOKE, "--denoiser", pi, "--frozen-epochs", "0", "--out", out],
         "--frozen-epochs 0: must be at least 1"),
        ("train_denoiser.py", ["--data", f"{w}/odd", *SMOKE, "--out", out], "names the corruption 'nonsense'"),
        ("finetune.py", ["--method", "composed", *data, *SMOKE, "--init", f, "--denoiser", pi, "--keep-by", "valid",
                         "--out", out],
         "names no validity command"),
        ("finetune.py", ["--method", "baseline", *data, "--init", f, "--out", out], "does not apply"),
        ("finetune.py", ["--method", "standard", *data, "--frozen-epochs", "2", "--out", out], "does not apply"),
        ("finetune.py", ["--method", "standard", *data, *SMOKE, "--denoiser", f, "--out", out],
         "predictor checkpoint, where a denoiser is needed"),
        ("finetune.py", ["--method", "composed", *data, *SMOKE, "--init", pi, "--denoiser", pi, "--out", out],
         "denoiser checkpoint, where a predictor is needed"),
        ("finetune.py", ["--method", "composed", *data, *SMOKE, "--init", f, "--denoiser", f, "--out", out],
         "where a denoiser is needed"),
        ("finetune.py", ["--method", "standard", *data, *SMOKE, "--denoiser", pi, "--out", f"{w}/standard"],
         "holds a run"),
        ("finetune.py", ["--method", "baseline", *data, "--gamma", "-5", "--out", out], "does not apply"),
        ("finetune.py", ["--method", "baseline", *data, *SMOKE, "--labeled", "5000", "--out", out], "only 40"),
        ("finetune.py", ["--method", "baseline", *data, "--dropout", "1.5", "--out", out], "within [0, 1)"),
        ("finetune.py", ["--method", "magic", *data, "--out", out], "invalid choice"),
        ("finetune.py", ["--method", "standard", *data, "--denoiser", f"{w}/junk.pt", "--out", out],
         "not a checkpoint"),
        ("finetune.py", ["--method", "baseline", *data, "--device", "tpu", "--out", out], "this machine has cpu"),
        ("finetune.py", ["--method", "baseline", "--data", f"{w}/broken", *SMOKE, "--out", out],
         "spm.model is not a sentencepiece model"),
        ("finetune.py", ["--method", "bart", *data, *SMOKE, "--denoiser", pi, "--frozen-epochs", "5", "--out", out],
         "must be below --epochs"),
        ("finetune.py", ["--method", "standard", *data, *SMOKE, "--denoiser", pi, "--out", f"{w}/standard",
                         "--resume", "--batch-size", "4"], "--batch-size 4 (it ran with 8)"),
        ("evaluate.py", [pi, *data], "denoiser checkpoint, where a predictor is needed"),
        ("evaluate.py", [f, *data, "--denoiser", f], "where a denoiser is needed"),
        ("evaluate.py", [f"{w}/junk.pt", *data], "not a checkpoint"),
        ("evaluate.py", ["--table", f"{w}/standard", "--denoiser", pi], "does not apply to --table"),
        ("evaluate.py", [f, *data, "--json", f"{w}/x.json"], "does not apply to a model"),
        ("evaluate.py", ["--predictions", f"{w}/nowhere.txt", *data], "missing file"),
        ("evaluate.py", [f, "--data", f"{w}/broken"], "not a sentencepiece model"),
        ("evaluate.py", [f, "--data", f"{w}/empty"], "not a sentencepiece model"),
        ("evaluate.py", [f, *data, "--device", "tpu"], "this machine has cpu"),
        ("evaluate.py", [f, *data, "--splits", "test,nonsense"], "has no nonsense split (it has ood, test, train, val)"),
        ("evaluate.py", ["--predictions", f"{w}/junk.pt", *data, "--split", "tset"], "has no tset split"),
        ("evaluate.py", ["--predictions", f"{w}/junk.pt", "--data", f"{w}/junk.pt"], "is a file: name the data folder"),
        ("evaluate.py", ["--predictions", f"{w}/junk.pt", "--data", f"{w}/nowhere"], "missing"),
        ("evaluate.py", [], "give one of"),
        ("fonts.py", ["train", "--method", "direct", "--epochs", "0"], "--epochs 0"),
        ("fonts.py", ["denoiser", "--out", f"{under_a_file}.pt"], "cannot write there"),
        ("fonts.py", ["train", "--method", "direct", "--out", f"{w}/fonts_run.pt"], "holds a finished run"),
        ("fonts.py", ["evaluate", "--plot", f"{under_a_file}.png"], "cannot write there"),
        ("staircase.py", ["--plot", f"{under_a_file}.png"], "cannot write there"),
        ("staircase.py", ["--n", "1"], "need --n >= 2"),
        ("finetune.py", ["--method", "baseline", *data, "--preset", "gpu", "--out", out], "invalid choice: 'gpu'"),
        ("train_denoiser.py", [*data, "--preset", "gpu", "--out", out], "invalid choice: 'gpu'"),
        ("train_denoiser.py", [*data, *SMOKE, "--label-smoothing", "1.5", "--out", out],
         "--label-smoothing 1.5: must be within [0, 1)"),
        ("finetune.py", ["--method", "baseline", *data, *SMOKE, "--label-smoothing=-0.5", "--out", out],
         "--label-smoothing -0.5: must be within [0, 1)"),
        ("finetune.py", ["--method", "baseline", *data, *SMOKE, "--label-smoothing", "0.2:1,0.1:1,1", "--out", out],
         "--label-smoothing 1: must be within [0, 1)"),
        ("finetune.py", ["--method", "baseline", *data, *SMOKE, "--label-smoothing", "0.2:1,0.1:x,0", "--out", out],
         "a number, or VALUE:EPOCHS,...,VALUE"),
        ("train_denoiser.py", [*data, *SMOKE, "--label-smoothing", "0.2:0,0.1", "--out", out], "(EPOCHS >= 1)"),
        ("finetune.py", ["--method", "baseline", *data, *SMOKE, "--label-smoothing", "0.2:2,0.1:-1,0", "--out", out],
         "--label-smoothing '0.2:2,0.1:-1,0': a number, or VALUE:EPOCHS,...,VALUE (EPOCHS >= 1)"),
        ("evaluate.py", [f"{w}/old_f.pt", *data], f"{w}/old_f.pt was made by an older version of this code: retrain"),
        ("predict.py", [f"{w}/old_f.pt", "--input", f"{w}/data/test.src"], "made by an older version of this code"),
        ("finetune.py", ["--method", "standard", *data, *SMOKE, "--denoiser", f"{w}/old_pi.pt", "--out", out],
         f"{w}/old_pi.pt was made by an older version of this code"),
        ("finetune.py", ["--method", "composed", *data, *SMOKE, "--init", f"{w}/old_f.pt", "--denoiser", pi, "--out",
                         out], f"{w}/old_f.pt was made by an older version of this code"),
        ("evaluate.py", [f, *data, "--denoiser", f"{w}/old_pi.pt"], "old_pi.pt was made by an older version"),
    ]


def snapshot(folder):
    """Every file below folder with its size and modification time: what a fault must leave as it was."""
    return {os.path.join(d, name): (os.stat(os.path.join(d, name)).st_size, os.stat(os.path.join(d, name)).st_mtime_ns)
            for d, _, names in os.walk(folder) for name in names}


def test_every_fault_is_one_line_exit_2_and_writes_nothing(work, capsys):
    faults = [fault for fault in fault_table(work) if "cuda:7" not in fault[1] or torch.cuda.device_count() < 8]
    assert len(faults) >= 30
    before = snapshot(work)
    for script, argv, word in faults:
        with pytest.raises(SystemExit) as exit_:
            MAINS[script](argv)
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2, (script, argv, err)
        assert len(err.splitlines()) == 1 and word in err, (script, argv, err)
        assert snapshot(work) == before, (script, argv, "wrote something")


def test_a_second_run_never_replaces_a_finished_one_unasked(work, tmp_path):
    """The finished model.pt stays byte for byte; --overwrite starts over and removes the stale evaluations, and the
    run it starts resumes as any other."""
    run = tmp_path / "run"
    flags = ["--method", "baseline", "--data", str(work / "data"), *SMOKE, "--out", str(run), "--epochs", "1"]
    finetune.main(flags)
    evaluate.main([str(run / "model.pt"), "--data", str(work / "data"), "--splits", "test"])
    finished = (run / "model.pt").read_bytes()
    with pytest.raises(SystemExit) as exit_:
        finetune.main(flags)
    assert exit_.value.code == 2 and (run / "model.pt").read_bytes() == finished
    finetune.main([*flags, "--overwrite", "--seed", "1"])
    assert (run / "model.pt").read_bytes() != finished and not list(run.glob("eval_*"))
    finetune.main([*flags, "--seed", "1", "--epochs", "2", "--resume"])
    assert harness.load_checkpoint(str(run / "last.pt"))["state"]["epoch"] == 2


def test_resume_continues_with_the_runs_own_settings(work, tmp_path, capsys):
    """A flag given changes only itself: --patience, given at the start and not on resuming, stays the run's; --help
    with --resume shows the run's values."""
    run = tmp_path / "run"
    flags = ["--method", "baseline", "--data", str(work / "data"), *SMOKE, "--out", str(run)]
    finetune.main([*flags, "--epochs", "1", "--patience", "400"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        finetune.main([*flags, "--resume", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--patience PATIENCE epochs after the best (default: 400)" in help_text
    finetune.main([*flags, "--epochs", "2", "--resume"])
    err = capsys.readouterr().err
    assert err.startswith("--resume: changed --epochs 2 (it ran with 1)\n") and "epoch 2:" in err
    assert harness.load_checkpoint(str(run / "last.pt"))["args"]["patience"] == 400


def test_help_before_any_data_shows_the_presets_values_and_says_so(tmp_path, capsys):
    """A reader may ask --help before making data: it shows the preset's values (here the paper preset's composed
    learning rate and Eq. 1's gamma) and says a data folder may change them; a run without data is still refused."""
    flags = ["--method", "composed", "--preset", "paper", "--data", str(tmp_path / "none")]
    with pytest.raises(SystemExit):
        finetune.main([*flags, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--lr LR AdamW's peak rate (default: 0.0002)" in help_text and "floor (default: -50.0)" in help_text
    assert f"Shown: those for --data {tmp_path / 'none'} (no data there yet); --data DIR --help shows" in help_text
    with pytest.raises(SystemExit) as exit_:
        finetune.main(flags)
    assert exit_.value.code == 2


def test_help_names_the_data_folder_whose_defaults_it_shows(tmp_path, capsys):
    """Plain --help shows SansType's defaults (its data folder is the default --data): it says so, and how to see a
    task's own (a new user read SansType's 80 epochs as their task's)."""
    with pytest.raises(SystemExit):
        train_denoiser.main(["--help"])
    assert "Shown: those for --data data/sanstype" in " ".join(capsys.readouterr().out.split())


def test_an_empty_tokenizer_is_one_line_even_from_sentencepiece(work):
    """sentencepiece logs from C++ straight to the process's stderr, where capsys does not look: a subprocess."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, "train_denoiser.py"), "--data", str(work / "empty"),
                             *SMOKE, "--out", str(work / "never")], capture_output=True, text=True)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_evaluation_says_layers_as_encoder_plus_decoder(work):
    """A smoke run's settings say layers=1 (each side); its evaluation says 1+1, as the paper's 6 layers are 3+3."""
    evaluate.main([str(work / "standard" / "model.pt"), "--data", str(work / "data"), "--splits", "test"])
    assert json.load(open(work / "standard" / "eval_test.json"))["layers"] == "1+1"


def test_ctrl_c_exits_130_and_says_how_to_resume(work, tmp_path):
    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "finetune.py"), "--method", "baseline", "--data",
                                str(work / "data"), *SMOKE, "--out", str(tmp_path / "run"), "--epochs", "1000",
                                "--patience", "1000"], stderr=subprocess.PIPE, text=True,
                               # Ctrl-C as from a terminal, even where the suite runs as a shell's background job
                               # (which ignores it, and so would the script)
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in process.stderr:  # interrupt once it trains
        if line.startswith("epoch 1:"):
            break
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    err = process.stderr.read()
    assert process.wait(timeout=60) == 130 and "--resume" in err.strip().splitlines()[-1]


# === Every number flag's bad value, generated from the parsers ===

SCRIPTS = {**MAINS, "make_molecules.py": make_molecules.main}
# Where zero means something though the flag's help does not say "0: ..." (a help that does allows zero itself): by
# the flag's name, or the script's and the flag's.
ZERO_MEANS = {"warmup_steps": "no warm-up", "warmup_start_lr": "the warm-up starts from 0", "dropout": "none",
              "attention_dropout": "none", "activation_dropout": "none", "unet_dropout": "none", "weight_decay": "none",
              "composed_weight": "Eq. 1's direct term alone",
              "lam": "the composed term alone", "l2": "no penalty (the grid's first strength)",
              "duplicate_mse": "only identical fonts are duplicates",
              "fonts.py unlabeled": "Pi learns from the labeled training glyphs alone"}
NEGATIVE_MEANS = {"gamma": "the clamp's floor on a log-probability"}


class Accepted(Exception):
    """A bad value got past every check: raised where the script's work would start, so that none starts."""


def parsers_of(script, monkeypatch, capsys):
    """{subcommand or None: the parser}, each as the script builds it: main(["--help"]) with harness.ArgumentParser
    recording what it builds (fonts.py's subcommands' parsers are of the same class; a first pass without --help,
    which reads the flags the defaults depend on, is not the script's parser)."""
    built = []

    class Recording(harness.ArgumentParser):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            if kwargs.get("add_help", True):
                built.append(self)

    with monkeypatch.context() as patch, pytest.raises(SystemExit):
        patch.setattr(harness, "ArgumentParser", Recording)
        SCRIPTS[script](["--help"])
    capsys.readouterr()
    return {" ".join(parser.prog.split()[1:]) or None: parser for parser in built}


def bad_values(action, script):
    """A negative value, and zero unless zero means something (its help says what, or ZERO_MEANS)."""
    name = action.dest
    if name.endswith("seed") or name in NEGATIVE_MEANS:
        return []
    zero_means = "0:" in (action.help or "") or name in ZERO_MEANS or f"{script} {name}" in ZERO_MEANS
    return ["-1"] + ["0"] * (not zero_means)


@pytest.fixture(scope="module")
def folders(work):
    """A tiny data folder of each kind the training scripts read: SansType's (work's), SPoC's, molecules', a task's."""
    w = work / "kinds"
    spoc_tsv = os.path.join(SPOC, "spoc-train-test.tsv"), os.path.join(SPOC, "spoc-train-eval.tsv")
    make_spoc.main(["--spoc", SPOC, "--out", str(w / "spoc"), "--splits", "train,val,testw", "--train", spoc_tsv[0],
                    "--val", spoc_tsv[1], "--testw", spoc_tsv[1]])
    make_molecules.main(["--table", os.path.join(ROOT, "tests", "fixtures", "molecules", "identifiers.tsv"),
                         "--labeled", "20", "--num-eval", "5", "--unlabeled", "20", "--vocab-size", "100",
                         "--out", str(w / "molecules")])
    common.write_lines(str(w / "in.txt"), [f"{a} plus {b}" for a in range(6) for b in range(5)])
    common.write_lines(str(w / "out.txt"), [f"{a + b}" for a in range(6) for b in range(5)])
    make_task.main(["--pairs", str(w / "in.txt"), str(w / "out.txt"), "--val", "3", "--test", "3", "--vocab-size",
                    "40", "--out", str(w / "task")])
    return {"sanstype": work / "data", "spoc": w / "spoc", "molecules": w / "molecules", "task": w / "task"}


def contexts(work, folders, out):
    """(script, subcommand, the arguments a flag is tried with): every script, each training script on every kind of
    data folder (every method, every noise), fonts.py's every subcommand; out: where a run would write."""
    model, kinds = str(work / "standard" / "model.pt"), [str(folder) for folder in folders.values()]
    return [("make_sanstype.py", None, ["--out", out]), ("make_spoc.py", None, ["--spoc", SPOC, "--out", out]),
            ("make_molecules.py", None, ["--out", out]),
            ("make_task.py", None, ["--pairs", f"{work}/kinds/in.txt", f"{work}/kinds/out.txt", "--out", out]),
            *[("train_denoiser.py", None, ["--data", data, *SMOKE, "--out", out, *corruption]) for data in kinds
              for corruption in [[], *(["--corruption", name] for name in train_denoiser.CORRUPTIONS)]],
            *[("finetune.py", None, ["--method", method, "--data", data, *SMOKE, "--out", out]) for data in kinds
              for method in finetune.METHODS],
            *[("evaluate.py", None, [model, "--data", data]) for data in kinds], ("predict.py", None, [model]),
            ("fonts.py", "render", ["render", "--out", f"{out}.npz"]),
            *[("fonts.py", command, [command, "--data", f"{work}/glyphs.npz", "--preset", "smoke", *more,
                                     "--out", f"{out}.pt"])
              for command, more in (("denoiser", []), ("train", ["--method", "direct"]),
                                    ("train", ["--method", "composed", "--denoiser", f"{work}/fonts_pi.pt"]))],
            ("staircase.py", None, ["--plot", f"{out}.png"])]


def does_not_fit(parser, folders, out):
    """(script, arguments, the flag) where a valid value of the flag is for another kind of data folder:
    train_denoiser.py's flags of one noise (their help names it, "code: ...", and their default) on a folder whose
    noise is another, and SPoC's error detector on the others."""
    noise_flags = [(action.option_strings[0], action.help.split(":")[0], action.default)
                   for action in parser._actions if action.option_strings and not action.choices and
                   (action.help or "").split(":")[0] in train_denoiser.CORRUPTIONS]
    assert len(noise_flags) >= 3, noise_flags
    return [("train_denoiser.py", ["--data", str(data), *SMOKE, "--out", out, f"{flag}={value}"], flag)
            for kind, data in folders.items() for flag, noise, value in noise_flags
            if noise != harness.read_data_folder(str(data))["corruption"]] + \
        [("train_denoiser.py", ["--data", str(data), *SMOKE, "--out", out, "--error-detector=compile"],
          "--error-detector") for kind, data in folders.items() if kind != "spoc"]


def test_every_number_flags_bad_value_is_one_line_exit_2_and_writes_nothing(work, folders, tmp_path, monkeypatch,
                                                                             capsys):
    """Every int or float flag of every script (read from its parser), on every kind of data folder: a negative
    value, and zero where zero means nothing, is refused before any work, in one line naming the flag, exit code 2,
    and nothing written; and so is a flag for another kind of data folder."""
    parsers = {script: parsers_of(script, monkeypatch, capsys) for script in SCRIPTS}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = str(scratch / "out")
    cases = [(script, [*context, f"{action.option_strings[0]}={value}"], action.option_strings[0])
             for script, command, context in contexts(work, folders, out)
             for action in parsers[script][command]._actions
             if action.type in (int, float) and action.option_strings for value in bad_values(action, script)]
    cases += does_not_fit(parsers["train_denoiser.py"][None], folders, out)
    assert {script for script, _, _ in cases} == set(SCRIPTS) and len({(s, f) for s, _, f in cases}) >= 70

    def accepted(*args, **kwargs):
        raise Accepted()
    monkeypatch.setattr(harness, "run_main", accepted)  # where every script's work starts
    monkeypatch.setattr(staircase, "run", accepted)  # (staircase.py's, without run_main)
    monkeypatch.setattr(staircase, "sweep", accepted)
    monkeypatch.chdir(scratch)  # where a default output (runs/..., data/...) would land
    before, problems = snapshot(work), {}
    for script, argv, flag in cases:
        try:
            SCRIPTS[script](argv)
            problems.setdefault((script, argv[-1], "returned"), argv)
        except Accepted:
            problems.setdefault((script, argv[-1], "accepted"), argv)
        except SystemExit as exit_:
            err = capsys.readouterr().err.strip()
            if exit_.code != 2 or len(err.splitlines()) != 1 or flag not in err:
                problems.setdefault((script, argv[-1], f"exit {exit_.code}: {err}"), argv)
        if os.listdir(scratch):
            problems.setdefault((script, argv[-1], f"wrote {os.listdir(scratch)}"), argv)
        capsys.readouterr()
    assert not problems, "\n".join(f"{script} {value}: {what} (as in {' '.join(argv)})"
                                    for (script, value, what), argv in problems.items())
    assert snapshot(work) == before, "wrote something"
