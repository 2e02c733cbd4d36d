"""Molecules: chemical names to SMILES (make_molecules.py), the denoiser's SMILES noise (common.corrupt_smiles), RDKit
as the judge, and the chain end to end at the smoke preset.

tests/fixtures/molecules/identifiers.tsv holds the first 700 rows of the PubChem identifier table the `chemicals`
package ships (MIT, Caleb Bell; PubChem's data are in the public domain: see tests/fixtures/molecules/LICENSE).
"""
import importlib.util
import json
import os
import random
import sys

import pytest

import common
import harness
import evaluate
import finetune
import make_molecules
import train_denoiser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "tests", "fixtures", "molecules", "identifiers.tsv")
SMALL = ["--table", TABLE, "--labeled", "60", "--num-eval", "20", "--vocab-size", "300"]
SPLITS = ("train", "val", "test", "ood")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("molecules") / "data"
    make_molecules.main([*SMALL, "--out", str(out)])
    return out


def test_splits_hold_canonical_smiles_of_distinct_molecules(data):
    tgt = {split: common.read_lines(str(data / f"{split}.tgt")) for split in (*SPLITS, "unlabeled")}
    assert [len(tgt[split]) for split in SPLITS] == [60, 20, 20, 20] and len(tgt["unlabeled"]) > 400
    every = sum(tgt.values(), [])
    assert len(set(every)) == len(every)  # each molecule once, in one split
    assert all(common.canonical_smiles(smiles) == smiles for smiles in every)
    assert [len(common.read_lines(str(data / f"{split}.src"))) for split in SPLITS] == [60, 20, 20, 20]
    manifest = harness.read_data_folder(str(data))
    assert manifest["dataset"] == "molecules" and 0.5 < manifest["noise"]["rejected"] < 0.8
    assert manifest["corruption"] == "smiles"  # the noise Pi learns on molecules


def test_train_names_are_pubchems_and_ood_names_rephrase_them(data):
    """train, val, test: PubChem's IUPAC name of the molecule; ood: another of its names, in another style."""
    rows = {}
    for row in make_molecules.read_table(TABLE):
        canonical = common.canonical_smiles(row[make_molecules.SMILES]) if "." not in row[make_molecules.SMILES] \
            else None
        rows.setdefault(canonical, row)
    for split in SPLITS:
        for name, smiles in zip(common.read_lines(str(data / f"{split}.src")),
                                common.read_lines(str(data / f"{split}.tgt"))):
            row = rows[smiles]
            iupac = row[make_molecules.IUPAC_NAME]
            assert (name == iupac) == (split != "ood"), (split, name, iupac)
            assert split != "ood" or name in row[make_molecules.FIRST_OTHER_NAME:]


def test_same_seed_same_bytes(data, tmp_path):
    make_molecules.main([*SMALL, "--out", str(tmp_path / "again")])
    for name in [f"{split}.{ext}" for split in SPLITS for ext in ("src", "tgt")] + ["unlabeled.tgt", "spm.model"]:
        assert (tmp_path / "again" / name).read_bytes() == (data / name).read_bytes(), name


def test_smiles_noise_edits_a_few_tokens_and_rdkit_rejects_most():
    smiles = [common.canonical_smiles(row[make_molecules.SMILES]) for row in make_molecules.read_table(TABLE)
              if "." not in row[make_molecules.SMILES]][:300]
    rng = random.Random(0)
    noisy = [common.corrupt_smiles(s, rng) for s in smiles for _ in range(3)]
    clean = [s for s in smiles for _ in range(3)]
    unchanged = sum(n == s for n, s in zip(noisy, clean)) / len(noisy)
    verdicts = [common.canonical_smiles(n) for n, s in zip(noisy, clean) if n != s]
    rejected = sum(v is None for v in verdicts) / len(verdicts)
    other = sum(v is not None and v not in clean for v in verdicts) / len(verdicts)
    assert 0.08 < unchanged < 0.2 and 0.55 < rejected < 0.9 and other > 0.1
    changes = sorted(abs(len(n) - len(s)) for n, s in zip(noisy, clean))  # one or two tokens, or a branch
    assert changes[len(changes) // 2] <= 1 and changes[int(0.9 * len(changes))] <= 6
    assert common.corrupt_smiles("", rng) == ""  # nothing to edit: nothing breaks


def test_rdkit_judges_validity_and_the_molecule_not_its_spelling():
    verdicts = evaluate.judge_molecules(["OCC", "CC(", "CCC", ""], ["CCO"] * 4)
    assert [v["verdict"] for v in verdicts] == ["correct", "invalid", "wrong_molecule", "invalid"]
    assert evaluate.summarize(verdicts) == {"n": 4, "compiled": 0.5, "accuracy": 0.25}


def test_the_chain_runs_on_molecules(data, tmp_path, capsys):
    smoke = ["--data", str(data), "--preset", "smoke"]
    pi, f = str(tmp_path / "pi" / "model.pt"), str(tmp_path / "standard" / "model.pt")
    train_denoiser.main([*smoke, "--out", str(tmp_path / "pi")])
    assert "val outputs (noise " in capsys.readouterr().err
    finetune.main(["--method", "standard", *smoke, "--denoiser", pi, "--out", str(tmp_path / "standard")])
    for estimator in ("reinforce", "straight-through"):
        finetune.main(["--method", "composed", *smoke, "--denoiser", pi, "--init", f, "--estimator", estimator,
                       "--out", str(tmp_path / estimator)] + (["--composed-weight", "1"] if estimator != "reinforce"
                                                              else []))
    evaluate.main([f, "--data", str(data), "--denoiser", pi])
    evaluate.main([str(tmp_path / "reinforce" / "model.pt"), "--data", str(data)])
    capsys.readouterr()
    evaluate.main(["--table", str(tmp_path / "standard"), str(tmp_path / "reinforce")])
    header, _, *rows = capsys.readouterr().out.splitlines()  # standard + Pi, composed, then composed's lead, paired
    assert [row.split(" | ")[0] for row in rows] == ["| standard + Pi (1 run)", "| reinforce (1 run)",
                                                     "| reinforce - (standard + Pi), paired (1 run)"]
    # judged as valid and exact, and no paper columns: the paper runs no molecules
    assert header == "| runs (seeds) | test valid | test exact | ood valid | ood exact |"
    with open(tmp_path / "standard" / "eval_ood_denoised.json") as summary:
        assert json.load(summary)["dataset"] == "molecules"


@pytest.mark.parametrize("fault, word", [("no chemicals", "pip install chemicals==1.5.2"),
                                         ("no rdkit", "pip install -r requirements.txt"),
                                         ("not a table", "is not PubChem's identifier table")])
def test_missing_pieces_are_one_line_naming_the_way_on(fault, word, tmp_path, monkeypatch, capsys):
    argv = ["--out", str(tmp_path / "data")]
    if fault == "no chemicals":
        monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    if fault == "no rdkit":
        monkeypatch.setitem(sys.modules, "rdkit", None)  # an import of it then fails
        argv += ["--table", TABLE]
    if fault == "not a table":
        argv += ["--table", os.path.join(ROOT, "requirements.txt")]
    with pytest.raises(SystemExit) as stop:
        make_molecules.main(argv)
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and word in err, err
    assert not (tmp_path / "data").exists()
