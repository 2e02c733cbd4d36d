"""evaluate.py's --table over made-up evaluations (eval_*.json as evaluate_model writes them), the files a model's
evaluations go to, and the paper's table a Pi's rows are compared with."""
import dataclasses
import json
import os

import pytest

import common
import harness
import evaluate
import make_sanstype
import train_denoiser

# An evaluation of test as evaluate_model writes it, from a Pi of SansType's own noise: what each made-up run changes.
EVALUATION = {"dataset": "sanstype", "deep": False, "layers": "2+2", "preset": "cpu", "corruption": "code",
              "own_noise": True, "paper_table": "Table 2", "denoised": False, "split": "test", "authors_split": False,
              "n": 500, "compiled": 0.5}


def made_up(folder, method, accuracy, seed=0, pi_seed=None, denoised=False, test_pi=None, **fields):
    """(folder, file, summary): a run's evaluation; pi_seed: the Pi it was fine-tuned from (a baseline has none);
    test_pi: the Pi its outputs went through ("own", or another's seed, whose settings are those of every Pi here)."""
    if isinstance(test_pi, int):
        test_pi = {"seed": test_pi, "settings": {"epochs": 25}}
    name = "eval_test" + "_denoised" * denoised
    settings = {"method": method, "preset": "cpu", "lr": 1e-3, "labeled": None, **fields.pop("settings", {})}
    return folder, name, {**EVALUATION, "method": method, "accuracy": accuracy / 100, "seed": seed, "pi_seed": pi_seed,
                          "pi": {"epochs": 25} if pi_seed is not None else None, "denoised": denoised,
                          "test_pi": test_pi, "settings": settings, **fields}


HEADER = ["| runs (seeds) | test compiled | test accuracy | paper: test compiled / accuracy |",
          "| --- | --- | --- | --- |"]
CASES = {
    # Pi seeds and seeds both vary: one row of all five runs
    "every run in a row": ([made_up(f"standard_pi{p}_{s}", "standard", 40 + 10 * p + s, s, p)
                            for p, s in [(0, 0), (0, 1), (0, 2), (1, 0), (2, 1)]], [
        "| standard_{pi0_0,pi0_1,pi0_2,pi1_0,pi2_1} (5 Pi seeds and seeds) | 50.0 ± 0.0 | 46.8 ± 8.9 | 86.8 / 79.8 |"]),
    # each run from its own Pi, and one more composed run (Pi 0, seed 1): still one row each, the three pairs shown
    "one more run": ([made_up(f"{m}_pi{p}_{s}", m, 40 + (5 + s) * (m == "composed") + s + p, s, p,
                              denoised=m == "composed", test_pi="own" if m == "composed" else None)
                      for m in ("standard", "composed") for p, s in [(0, 0), (1, 1), (2, 2)]] +
                     [made_up("composed_pi0_1", "composed", 60, 1, 0, denoised=True, test_pi="own")], [
        "| standard_{pi0_0,pi1_1,pi2_2} (3 Pi seeds and seeds) | 50.0 ± 0.0 | 42.0 ± 2.0 | 86.8 / 79.8 |",
        "| composed_{pi0_0,pi0_1,pi1_1,pi2_2} (4 Pi seeds and seeds) | 50.0 ± 0.0 | 51.0 ± 6.5 | 90.4 / 84.4 |",
        "| composed_{pi0_0,pi0_1,pi1_1,pi2_2} - standard_{pi0_0,pi1_1,pi2_2}, paired (3 Pi seeds and seeds) | +0.0 ± 0.0 | "
        "+6.0 ± 1.0 | +3.6 / +4.6 |"]),
    # pairs only alike: composed with standard from the same Pi (pi) and through the same Pi (test_pi); a
    # test-time Pi of another noise (corruption) is not compared with the run without one
    "pairs only alike": ([made_up("standard_0", "standard", 40, 0, 0),
                          made_up("standard_0", "standard", 41, 0, 0, True, "own"),
                          made_up("standard_other_0", "standard", 42, 0, 0, True, 5),
                          made_up("standard_random_0", "standard", 43, 0, 0, True, 6, corruption="random",
                                  own_noise=False, paper_table="Table 5"),
                          made_up("composed_0", "composed", 50, 0, 0, True, "own"),
                          made_up("composed_pi_0", "composed", 60, 0, 0, True, "own", pi={"epochs": 50})], [
        "| standard_0 (1 run) | 50.0 | 40.0 | 86.8 / 79.8 |",
        "| standard_0 + Pi (1 run) | 50.0 | 41.0 | 87.3 / 80.4 |",
        "| standard_other_0 + Pi (Pi seed 5) (1 run) | 50.0 | 42.0 | 87.3 / 80.4 |",
        "| composed_0 (1 run) | 50.0 | 50.0 | 90.4 / 84.4 |",
        "| composed_pi_0 (1 run) | 50.0 | 60.0 | 90.4 / 84.4 |",
        "| standard_random_0 + Pi (random Pi seed 6) (1 run) | 50.0 | 43.0 |  |",
        "| standard_0 + Pi - standard_0, paired (1 run) | +0.0 | +1.0 | +0.5 / +0.6 |",
        "| standard_other_0 + Pi (Pi seed 5) - standard_0, paired (1 run) | +0.0 | +2.0 | +0.5 / +0.6 |",
        "| composed_0 - standard_0, paired (1 run) | +0.0 | +10.0 | +3.6 / +4.6 |",
        "| composed_0 - (standard_0 + Pi), paired (1 run) | +0.0 | +9.0 | +3.1 / +4.0 |"]),
    # each run from its own Pi, with its Pi's seed: one row over both, paired run by run
    "each seed its own Pi": ([made_up(f"{m}_pi{s}_{s}", m, 40 + (5 + s) * (m == "composed") + s, s, s,
                                      denoised=m == "composed", test_pi="own" if m == "composed" else None)
                              for m in ("standard", "composed") for s in range(3)], [
        "| standard_{pi0_0,pi1_1,pi2_2} (3 Pi seeds and seeds) | 50.0 ± 0.0 | 41.0 ± 1.0 | 86.8 / 79.8 |",
        "| composed_{pi0_0,pi1_1,pi2_2} (3 Pi seeds and seeds) | 50.0 ± 0.0 | 47.0 ± 2.0 | 90.4 / 84.4 |",
        "| composed_{pi0_0,pi1_1,pi2_2} - standard_{pi0_0,pi1_1,pi2_2}, paired (3 Pi seeds and seeds) | +0.0 ± 0.0 | "
        "+6.0 ± 1.0 | +3.6 / +4.6 |"]),
    # standard seed 0 from Pis 0-2 and the baselines, all judged by Pi 1: its own Pi for standard_pi1_0 alone
    "a test-time Pi": ([made_up(f"standard_pi{p}_0", "standard", 40 + p, 0, p) for p in range(3)] +
                       [made_up(f"standard_pi{p}_0", "standard", 50 + 2 * p, 0, p, True, "own" if p == 1 else 1)
                        for p in range(3)] +
                       [made_up(f"baseline_{s}", "baseline", 30 + s, s, corruption=None) for s in range(3)] +
                       [made_up(f"baseline_{s}", "baseline", 35 + s, s, None, True, 1) for s in range(3)], [
        "| baseline_{0,1,2} (3 seeds) | 50.0 ± 0.0 | 31.0 ± 1.0 | 48.6 / 36.6 |",
        "| baseline_{0,1,2} + Pi (3 seeds) | 50.0 ± 0.0 | 36.0 ± 1.0 | 76.4 / 58.4 |",
        "| standard_{pi0_0,pi1_0,pi2_0} (3 Pi seeds) | 50.0 ± 0.0 | 41.0 ± 1.0 | 86.8 / 79.8 |",
        "| standard_{pi0_0,pi2_0} + Pi (Pi seed 1) (2 Pi seeds) | 50.0 ± 0.0 | 52.0 ± 2.8 | 87.3 / 80.4 |",
        "| standard_pi1_0 + Pi (1 run) | 50.0 | 52.0 | 87.3 / 80.4 |",
        "| baseline_{0,1,2} + Pi - baseline_{0,1,2}, paired (3 seeds) | +0.0 ± 0.0 | +5.0 ± 0.0 | +27.8 / +21.8 |",
        "| standard_{pi0_0,pi1_0,pi2_0} - baseline_{0,1,2}, paired (3 Pi seeds) | +0.0 ± 0.0 | +11.0 ± 1.0 | "
        "+38.2 / +43.2 |",  # each against baseline_0, the run of its seed
        "| standard_{pi0_0,pi2_0} + Pi (Pi seed 1) - standard_{pi0_0,pi1_0,pi2_0}, paired (2 Pi seeds) | +0.0 ± 0.0 | "
        "+11.0 ± 1.4 | +0.5 / +0.6 |",
        "| standard_pi1_0 + Pi - standard_{pi0_0,pi1_0,pi2_0}, paired (1 run) | +0.0 | +11.0 | +0.5 / +0.6 |"]),
    # composed on 200 labeled pairs is not paired with standard on all of them; composed's own rate is its method's
    "paired settings": ([made_up("standard_0", "standard", 40, 0, 0),
                         made_up("composed_0", "composed", 45, 0, 0, True, "own", settings={"lr": 1e-4}),
                         made_up("composed_few_0", "composed", 30, 0, 0, True, "own",
                                 settings={"lr": 1e-4, "labeled": 200})], [
        "| standard_0 (1 run) | 50.0 | 40.0 | 86.8 / 79.8 |",
        "| composed_0 (1 run) | 50.0 | 45.0 | 90.4 / 84.4 |",
        "| composed_few_0 (1 run) | 50.0 | 30.0 | 90.4 / 84.4 |",
        "| composed_0 - standard_0, paired (1 run) | +0.0 | +5.0 | +3.6 / +4.6 |"]),
    # the control (composed, --composed-weight 0) pairs with composed seed by seed, as with standard (issue: a user's
    # table had no composed - control row, which the README's reading of composed rests on)
    "composed - control": ([made_up(f"{m}_{s}", "composed", a + s * (2 if m == "composed" else 1), s, 0, True, "own",
                                    settings={"lr": 1e-4, "composed_weight": w})
                            for m, a, w in (("composed", 50, 0.1), ("control", 48, 0.0)) for s in range(3)] +
                           [made_up(f"standard_{s}", "standard", 40, s, 0) for s in range(3)], [
        "| standard_{0,1,2} (3 seeds) | 50.0 ± 0.0 | 40.0 ± 0.0 | 86.8 / 79.8 |",
        "| composed_{0,1,2} (3 seeds) | 50.0 ± 0.0 | 52.0 ± 2.0 | 90.4 / 84.4 |",
        "| control_{0,1,2} (3 seeds) | 50.0 ± 0.0 | 49.0 ± 1.0 |  |",
        "| composed_{0,1,2} - standard_{0,1,2}, paired (3 seeds) | +0.0 ± 0.0 | +12.0 ± 2.0 | +3.6 / +4.6 |",
        "| composed_{0,1,2} - control_{0,1,2}, paired (3 seeds) | +0.0 ± 0.0 | +3.0 ± 1.0 |  |",
        "| control_{0,1,2} - standard_{0,1,2}, paired (3 seeds) | +0.0 ± 0.0 | +9.0 ± 1.0 |  |"]),
    # two runs whose folders end alike: named by as much of their path as tells them apart
    "folder names": ([made_up("runs/a/standard", "standard", 40, 0, 0),
                      made_up("runs/b/standard", "standard", 60, 0, 0, settings={"lr": 2e-3})], [
        "| a/standard (1 run) | 50.0 | 40.0 | 86.8 / 79.8 |",
        "| b/standard (1 run) | 50.0 | 60.0 | 86.8 / 79.8 |"]),
}


@pytest.mark.parametrize("runs, rows", CASES.values(), ids=CASES.keys())
def test_the_table_shows_every_run_once_named_apart_and_pairs_runs_alike(tmp_path, capsys, runs, rows):
    """Every run lands in a row (its group's rows over Pi seeds and over seeds, and one more for the runs in
    neither); a test-time Pi that is not the runs' own is a row of its own, named; runs pair only where their
    settings differ by what the pair compares; rows of folders with the same last part are told apart."""
    for folder, name, summary in runs:
        os.makedirs(tmp_path / folder, exist_ok=True)
        json.dump(summary, open(tmp_path / folder / f"{name}.json", "w"))
    evaluate.main(["--table", *sorted({str(tmp_path / folder) for folder, _, _ in runs})])
    assert capsys.readouterr().out.splitlines() == HEADER + rows


def test_a_folder_given_twice_counts_once(tmp_path, capsys):
    """The same folder named two ways (a trailing slash, a ./ or a ..) is one run, named as it was first given."""
    for seed, accuracy in enumerate((40, 50)):
        folder, name, summary = made_up(f"standard_{seed}", "standard", accuracy, seed, 0)
        os.makedirs(tmp_path / folder)
        json.dump(summary, open(tmp_path / folder / f"{name}.json", "w"))
    evaluate.main(["--table", str(tmp_path / "standard_0"), str(tmp_path / "standard_1"), f"{tmp_path}/standard_0/",
                   f"{tmp_path}/standard_1/../standard_1"])
    assert capsys.readouterr().out.splitlines()[2:] == [
        "| standard_{0,1} (2 seeds) | 50.0 ± 0.0 | 45.0 ± 7.1 | 86.8 / 79.8 |"]


def test_runs_that_kept_the_model_they_started_from_are_named(tmp_path, capsys):
    """A composed run whose kept epoch is 0 (evaluate_model records its checkpoint's "epoch") is the f it started from,
    and its +0.0 beside that f no finding: --table names each such run once, and what might train one past its start;
    runs that trained (and evaluations made before the field) are not named."""
    runs = [made_up(f"standard_{s}", "standard", 40, s, 0, kept_epoch=30) for s in range(3)] + \
        [made_up(f"composed_{s}", "composed", 40, s, 0, denoised, "own", kept_epoch=0, settings={"lr": 1e-4})
         for s in range(3) for denoised in (True, False)] + [made_up("baseline_0", "baseline", 30, 0, corruption=None)]
    for folder, name, summary in runs:
        os.makedirs(tmp_path / folder, exist_ok=True)
        json.dump(summary, open(tmp_path / folder / f"{name}.json", "w"))
    evaluate.main(["--table", *sorted({str(tmp_path / folder) for folder, _, _ in runs})])
    out, err = capsys.readouterr()
    pair = "| composed_{0,1,2} - standard_{0,1,2}, paired (3 seeds) | +0.0 ± 0.0 | +0.0 ± 0.0 | +3.6 / +4.6 |"
    assert pair in out  # (the rows as they were: stderr names the runs)
    assert err.splitlines() == ["kept epoch 0, the f they started from (their rows are that f's; a +0.0 beside it, no "
                                "finding): composed_0 composed_1 composed_2; try more --epochs or --patience, or another "
                                "--lr"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("sanstype")
    make_sanstype.main(["--out", str(out), "--labeled", "40", "--unlabeled", "60", "--num-eval", "4",
                        "--vocab-size", "150", "--seed", "3"])
    return out


def checkpoint(data, path, role, **fields):
    """An untrained model of the smallest size, as a training script would have saved it."""
    spm = harness.read_data_folder(str(data))["spm"]
    config = common.TransformerConfig(vocab_size=common.load_tokenizer(spm).get_piece_size(), d_model=8,
                                      n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=16)
    harness.save_checkpoint(str(path), {"config": dataclasses.asdict(config), "spm": spm, "role": role,
                                       "model": common.Transformer(config).state_dict(), **fields})
    return str(path)


def test_an_evaluation_names_its_pis_and_never_writes_over_another(data, tmp_path, monkeypatch):
    """A Pi of another noise than its data's (random deletions) gets files of its own, and Table 5's numbers; an
    evaluation with another Pi than the one whose file is there is refused; a run's pi_seed is its own Pi's, the one
    its outputs went through is test_pi."""
    monkeypatch.setattr(common, "translate", lambda model, tokenizer, texts, *args, **kwargs: list(texts))
    monkeypatch.setattr(evaluate, "load_judge", lambda data, split: (4, lambda outputs: [{"verdict": "wrong_output"}]
                                                                     * len(outputs)))
    pi = {seed: {"seed": seed, "corruption": "code", "preset": "smoke", "out": f"pi{seed}"} for seed in (0, 1)}
    code = [checkpoint(data, tmp_path / f"pi{seed}.pt", "denoiser", args=pi[seed], corruption="code", own_noise=True,
                       paper_table="Table 2") for seed in (0, 1)]
    random = checkpoint(data, tmp_path / "random.pt", "denoiser", corruption="random", own_noise=False,
                        paper_table="Table 5", args={"seed": 0, "corruption": "random", "preset": "smoke"})
    baseline = checkpoint(data, tmp_path / "baseline/model.pt", "predictor", method="baseline",
                          args={"seed": 0, "method": "baseline", "preset": "smoke"})
    standard = {"method": "standard", "args": {"seed": 2, "method": "standard", "preset": "smoke"},
                "denoiser_corruption": "code", "denoiser_own_noise": True, "denoiser_paper_table": "Table 2",
                "denoiser_args": pi[0]}  # (fine-tuned from Pi 0)
    for folder in ("standard", "standard_own"):
        checkpoint(data, tmp_path / folder / "model.pt", "predictor", **standard)
    composed = checkpoint(data, tmp_path / "composed/model.pt", "predictor", **{
        **standard, "method": "composed", "denoiser": harness.load_checkpoint(code[0])})  # Pi(f(x)), Pi 0 inside

    def evaluation(folder, name):
        return json.load(open(tmp_path / folder / f"{name}.json"))
    evaluate.main([baseline, "--data", str(data), "--splits", "test", "--denoiser", code[0]])
    evaluate.main([baseline, "--data", str(data), "--splits", "test", "--denoiser", random])
    assert sorted(os.listdir(tmp_path / "baseline")) == ["eval_test_denoised.json", "eval_test_denoised.jsonl",
                                                         "eval_test_denoised_random.json",
                                                         "eval_test_denoised_random.jsonl", "model.pt"]
    assert (evaluation("baseline", "eval_test_denoised")["corruption"], evaluation("baseline", "eval_test_denoised")
            ["test_pi"]) == ("code", {"seed": 0, "settings": {"corruption": "code", "preset": "smoke"}})
    assert {key: evaluation("baseline", "eval_test_denoised_random")[key] for key in ("own_noise", "paper_table")} == \
        {"own_noise": False, "paper_table": "Table 5"}
    with pytest.raises(SystemExit):  # Pi 1's evaluation would go where Pi 0's is
        evaluate.main([baseline, "--data", str(data), "--splits", "test", "--denoiser", code[1]])
    assert evaluation("baseline", "eval_test_denoised")["test_pi"]["seed"] == 0
    evaluate.main([str(tmp_path / "standard/model.pt"), "--data", str(data), "--splits", "test"])
    evaluate.main([str(tmp_path / "standard/model.pt"), "--data", str(data), "--splits", "test", "--denoiser", code[1]])
    evaluate.main([str(tmp_path / "standard_own/model.pt"), "--data", str(data), "--splits", "test", "--denoiser",
                   code[0]])
    evaluate.main([composed, "--data", str(data), "--splits", "test"])
    fields = ("own_noise", "paper_table", "pi_seed", "test_pi")
    assert [[evaluation(folder, name)[key] for key in fields] for folder, name in [
        ("standard", "eval_test"), ("standard", "eval_test_denoised"), ("standard_own", "eval_test_denoised"),
        ("composed", "eval_test_denoised")]] == [
        [True, "Table 2", 0, None], [True, "Table 2", 0, {"seed": 1, "settings": {"corruption": "code",
                                                                                   "preset": "smoke"}}],
        [True, "Table 2", 0, "own"], [True, "Table 2", 0, "own"]]


def test_paper_numbers_only_beside_the_rows_the_paper_has():
    """The paper's tables: SansType with its code noise (Table 2) and with random deletions (Table 5), SPoC with its
    one-line noise (Table 2); a SansType Pi of SPoC's noise, or any other pairing, has none."""
    tables = {(noise, dataset): train_denoiser.CORRUPTIONS[noise].paper_tables.get(dataset)
              for noise in train_denoiser.CORRUPTIONS for dataset in harness.DATASETS}
    assert {pair: table for pair, table in tables.items() if table} == {
        ("code", "sanstype"): "Table 2", ("random", "sanstype"): "Table 5", ("line", "spoc"): "Table 2"}


def test_a_tasks_table_is_headed_as_the_task_is_judged(tmp_path, capsys):
    """--table on runs of a task of one's own (or molecules): valid and exact, and no paper columns (it has none)."""
    for folder, name, summary in [made_up(f"standard_{s}", "standard", 90 + s, s, dataset="task", corruption="edits",
                                          own_noise=True, paper_table=None) for s in range(2)]:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{name}.json").write_text(json.dumps(summary))
    evaluate.main(["--table", *(str(tmp_path / f"standard_{s}") for s in range(2))])
    assert capsys.readouterr().out.splitlines() == [
        "| runs (seeds) | test valid | test exact |", "| --- | --- | --- |",
        "| standard_{0,1} (2 seeds) | 50.0 ± 0.0 | 90.5 ± 0.7 |"]
