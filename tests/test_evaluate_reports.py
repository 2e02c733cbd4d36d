"""What a run and its evaluation report where they say less than they seem to (a user's dates-to-ISO task): a composed
run that kept the f it started from says so, from finetune.py's last line to the table; evaluate.py judges a model on
the data it was trained on unless --data names another, and names --data where that folder is gone; one-word outputs
get no words or token F1, which would only repeat exact match."""
import contextlib
import dataclasses
import io
import json

import pytest

import common
import evaluate
import finetune
import harness
import make_sanstype


@pytest.fixture(scope="module")
def kept_start(tmp_path_factory):
    """(folder, finetune.py's last line): a composed run that cannot beat the f it starts from, as no term of its loss
    (--lam 0, --composed-weight 0) and no weight decay move f's weights, so that no epoch it trains lowers the val loss
    of epoch 0; f and Pi are untrained models of the smoke preset's size."""
    w = tmp_path_factory.mktemp("kept_start")
    make_sanstype.main(["--out", str(w / "data"), "--labeled", "40", "--unlabeled", "60", "--num-eval", "4",
                        "--vocab-size", "150", "--seed", "3"])
    spm = harness.read_data_folder(str(w / "data"))["spm"]
    config = common.TransformerConfig(vocab_size=common.load_tokenizer(spm).get_piece_size(), d_model=32, n_heads=2,
                                      encoder_layers=1, decoder_layers=1, d_ff=64)
    for name, role in (("f", "predictor"), ("pi", "denoiser")):
        harness.save_checkpoint(str(w / f"{name}.pt"), {"config": dataclasses.asdict(config), "spm": spm, "role": role,
                                                        "model": common.Transformer(config).state_dict()})
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        finetune.main(["--method", "composed", "--data", str(w / "data"), "--preset", "smoke", "--init",
                       str(w / "f.pt"), "--denoiser", str(w / "pi.pt"), "--lam", "0", "--composed-weight", "0",
                       "--weight-decay", "0", "--epochs", "1", "--out", str(w / "composed")])
    return w, printed.getvalue().splitlines()[-1]


def test_a_run_that_kept_the_f_it_started_from_says_so_and_what_might_train_it(kept_start):
    """finetune.py's last line says that epoch 0 is the f it started from, unchanged, how many epochs it trained in
    vain, and the flags that might train one past it; model.pt records the kept epoch for evaluate.py."""
    folder, line = kept_start
    assert line.startswith("best epoch 0 (val loss ") and "the f it started from (--init), unchanged" in line
    assert "no epoch it trained (of 1) beat it on val" in line
    assert all(flag in line for flag in ("--epochs", "--patience", "--lr"))
    assert harness.load_checkpoint(str(folder / "composed/model.pt"), ("epoch",))["epoch"] == 0


def test_a_model_is_judged_on_its_own_data_and_the_table_names_it(kept_start, tmp_path, monkeypatch, capsys):
    """Without --data, evaluate.py reads the data folder the model was trained on (its checkpoint's args), from any
    working folder; its evaluation records the kept epoch, for which the table names the run."""
    folder, _ = kept_start
    monkeypatch.chdir(tmp_path)  # (where data/sanstype, the old default, is not)
    monkeypatch.setattr(common, "translate", lambda model, tokenizer, texts, *args, **kwargs: list(texts))
    monkeypatch.setattr(evaluate, "load_judge", lambda data, split: (4, lambda outputs: [{"verdict": "correct"}]
                                                                     * len(outputs)))
    evaluate.main([str(folder / "composed/model.pt"), "--splits", "test"])
    summary = json.load(open(folder / "composed/eval_test_denoised.json"))
    assert (summary["kept_epoch"], summary["accuracy"]) == (0, 1.0)
    capsys.readouterr()
    evaluate.main(["--table", str(folder / "composed")])
    out, err = capsys.readouterr()
    assert out.splitlines()[2] == "| composed (1 run) | 100.0 | 100.0 |  |"
    assert err.startswith("kept epoch 0, the f they started from") and ": composed; try more --epochs" in err


def test_a_model_whose_data_is_gone_names_the_flag_that_gives_it(kept_start, tmp_path, monkeypatch, capsys):
    """The folder a model's checkpoint names, gone (moved, or another working folder): one line that names --data."""
    folder, _ = kept_start
    moved = harness.load_checkpoint(str(folder / "composed/model.pt"), ())
    moved["args"]["data"] = str(tmp_path / "gone")
    harness.save_checkpoint(str(tmp_path / "moved/model.pt"), moved)
    with pytest.raises(SystemExit) as exit:
        evaluate.main([str(tmp_path / "moved/model.pt"), "--splits", "test"])
    error = capsys.readouterr().err
    assert exit.value.code == 2 and len(error.splitlines()) == 1
    assert f"was trained on {tmp_path / 'gone'}" in error and error.strip().endswith("give --data")


def test_one_word_outputs_get_no_words_or_token_f1():
    """Where every gold output is one word (an ISO date), token F1 would be exact match again and words the outputs'
    own count: the summary has neither, and the line says why; gold of more words keeps both."""
    dates = evaluate.summarize(evaluate.judge_task(["2021-03-14", "2021-03-15"], ["2021-03-14", "2021-03-16"],
                                                   [True, True]))
    assert (dates["accuracy"], dates["words"], dates["token_f1"]) == (0.5, None, None)
    line = evaluate.result_line("test", dates)
    assert line.startswith("test: n=2  valid 100.0%  exact 50.0%  ") and "one word" in line
    assert "token F1 50.0" not in line and "words 100.0%" not in line
    phrases = evaluate.summarize(evaluate.judge_task(["a b", "c"], ["a b", "c d"], [True, True]))
    assert "words 75.0% of the gold's  token F1 83.3" in evaluate.result_line("test", phrases)
