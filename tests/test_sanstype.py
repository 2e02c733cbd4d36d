"""make_sanstype.py end to end on a tiny dataset, and the tokenizer it trains (common.py section 1).

tests/fixtures/released/ holds the released SansType train and val splits (MIT License,
Copyright (c) 2020 Michael Xie: see tests/fixtures/released/LICENSE).
"""
import hashlib
import os
import random
import re
import subprocess
import sys

import pytest

import common
import harness
import judge
import make_sanstype
import sanstype_fidelity

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "fixtures", "released")
TINY = ["--labeled", "30", "--unlabeled", "100", "--num-eval", "20", "--vocab-size", "200", "--seed", "1"]
SPLITS = ["train", "val", "test", "ood"]
FILES = [f"{s}.{e}" for s in SPLITS for e in ("src", "tgt", "inp", "out")] + ["unlabeled.tgt", "unlabeled.src",
                                                                              "spm.model", "dataset.json"]


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text.endswith("\n")
    return text.split("\n")[:-1]


def run_script(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "make_sanstype.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def statement_shapes(lines):
    """Every statement of every line, with variables and values replaced by placeholders."""
    shapes = set()
    for line in lines:
        for statement in line.split(" $ "):
            statement = re.sub(r"var_\d", "V", statement.strip())
            statement = re.sub(r'"str_\d"', "S", statement)
            statement = re.sub(r"\b\d+\b", "N", statement)
            shapes.add(re.sub(r"\b(true|false)\b", "B", statement))
    return shapes - {""}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """The tiny dataset made twice with one seed: by the command line, and by main() in this process."""
    by_cli, in_process = tmp_path_factory.mktemp("cli"), tmp_path_factory.mktemp("main")
    result = run_script("--out", str(by_cli), "--judge-unlabeled", *TINY)
    assert result.returncode == 0, result.stderr
    make_sanstype.main(["--out", str(in_process), *TINY])
    return by_cli, in_process, result.stderr


def test_same_seed_same_bytes(dataset):
    by_cli, in_process, _ = dataset
    assert sorted(os.listdir(by_cli)) == sorted(FILES)
    for name in FILES:
        assert (by_cli / name).read_bytes() == (in_process / name).read_bytes(), name


def test_other_seed_other_programs():
    assert make_sanstype.make_split("train", 20, 1, make_sanstype.IN_DISTRIBUTION) != \
           make_sanstype.make_split("train", 20, 2, make_sanstype.IN_DISTRIBUTION)


def test_progress_lines_while_judging(dataset):
    stderr = dataset[2]
    # train+val+test+ood and, with --judge-unlabeled, the unlabeled programs too (a repeat is judged once)
    assert re.search(r"judging gold programs: \d+/\d+ .*ETA", stderr)
    assert re.search(r"judging gold programs: (\d+)/\1 ", stderr)
    assert int(re.search(r"judging gold programs: (\d+)/\1 ", stderr).group(1)) > 180


def test_files_line_up(dataset):
    out = dataset[0]
    for split, size in zip(SPLITS, [30, 20, 20, 20]):
        columns = [read_lines(out / f"{split}.{ext}") for ext in ("src", "tgt", "inp", "out")]
        assert [len(c) for c in columns] == [size] * 4, split
        for src, tgt, inp in zip(*columns[:3]):
            assert src.startswith(" $ ") and src.endswith(";  $ ")
            assert tgt.startswith("int main () { $ ") and tgt.endswith(" $ return 0; }")
            # one .src statement per .tgt statement, one stdin value per cin
            assert src.count(" $ ") == tgt.count(" $ ")
            assert len(inp.split("\t")) == tgt.count("cin >>") or (inp == "" and "cin" not in tgt)
    assert len(read_lines(out / "unlabeled.tgt")) == len(read_lines(out / "unlabeled.src")) == 100


def test_every_gold_program_prints_its_out(dataset):
    out = dataset[0]
    programs, stdins, expected = [], [], []
    for split in SPLITS:
        programs += read_lines(out / f"{split}.tgt")
        stdins += read_lines(out / f"{split}.inp")
        expected += read_lines(out / f"{split}.out")
    results = judge.run_programs(programs, stdins, cache=False)
    assert [r.status for r in results] == ["ok"] * len(programs)
    assert [r.stdout.strip() for r in results] == expected
    assert all(expected)  # every program prints its variables


def test_pseudocode_never_names_a_type(dataset):
    lines = sum((read_lines(dataset[0] / f"{split}.src") for split in SPLITS), [])
    lines += make_sanstype.make_split("train", 2000, 0, make_sanstype.IN_DISTRIBUTION)[0]
    lines += make_sanstype.make_split("ood", 2000, 0, make_sanstype.OUT_OF_DISTRIBUTION)[0]
    assert not [line for line in lines if re.search(r"\b(int|string|bool)\b", line)]
    # while the code always does, and `set V to ...` both declares and updates
    code = make_sanstype.make_split("train", 2000, 0, make_sanstype.IN_DISTRIBUTION)[1]
    assert {"int V = N ;", "string V ; V = S ;", "V = N ;", "V = S ;"} <= statement_shapes(code)


def templates(lines):
    return {t for line in lines for t in sanstype_fidelity.pseudocode_templates(line)}


# The reference's OOD templates (X a value, V a variable, F min or max), with those kept from training.
OOD_TEMPLATES = {
    "set V to X", "instantiate V", "TAB set V to X", "set V to F applied to V and V",
    "read V", "V from stdin", "print V to stdout", "output V", "stdout V",
    "set V to V plus X", "V to X plus V", "set V to X plus the value of V",
    "V to X minus V", "set V to X minus the value of V", "add X to V end", "add X to end of V",
    "add X to V beginning", "add X to beginning of V", "set V to V and X", "and V with X", "V and X",
    "if V X,", "if V,", "set V to V and set V to V", "set V to the value of V and V to V", "swap V and V"}


def test_the_templates_are_the_released_ones():
    """train and test use exactly the released train's 15 templates; ood the reference's OOD set."""
    released = templates(read_lines(os.path.join(DATA, "train.src")))
    assert len(released) == 15 and templates(read_lines(os.path.join(DATA, "val.src"))) == released
    assert templates(make_sanstype.make_split("train", 1000, 0, make_sanstype.IN_DISTRIBUTION)[0]) == released
    assert templates(make_sanstype.make_split("test", 500, 0, make_sanstype.IN_DISTRIBUTION)[0]) == released
    ood = make_sanstype.make_split("ood", 500, 0, make_sanstype.OUT_OF_DISTRIBUTION)[0]
    assert templates(ood) == OOD_TEMPLATES
    train = make_sanstype.make_split("train", 1000, 0, make_sanstype.IN_DISTRIBUTION)[0]
    assert 0.5 < sanstype_fidelity.unseen_template_share(train, ood) < 0.7  # the released ood: about 60%


def test_the_programs_are_distributed_as_the_released_ones():
    released = sanstype_fidelity.describe(*(read_lines(os.path.join(DATA, f"train.{e}")) for e in ("src", "tgt",
                                                                                                   "inp")))
    for split, templates_ in (("train", make_sanstype.IN_DISTRIBUTION), ("ood", make_sanstype.OUT_OF_DISTRIBUTION)):
        ours = sanstype_fidelity.describe(*make_sanstype.make_split(split, 2000, 0, templates_))
        for key in ("operations per program", "variables declared outside blocks", "code tokens per program"):
            assert abs(ours[key] / released[key] - 1) < 0.1, (split, key, ours[key], released[key])
        for key in ("programs with an if-block", "programs that read stdin"):
            assert abs(ours[key] - released[key]) < 0.05, (split, key, ours[key], released[key])


def test_every_type_is_determined_by_the_pseudocode(dataset):
    """The checker on hand-made lines, then on the released data and on every split we generate."""
    undetermined = sanstype_fidelity.undetermined_variables
    assert undetermined(" $ instantiate var_1;  $ read var_1 from stdin;  $ print var_1;  $ ") == ["var_1"]
    assert undetermined(" $ set var_1 to 5;  $ instantiate var_2;  $ read var_2 from stdin;  $ "
                        "if var_3 is true, swap the values of var_1 and var_2;  $ ") == []  # var_2 is var_1's type
    assert undetermined(" $ instantiate var_2;  $ read var_2 from stdin;  $ if var_3 is true, "
                        "TAB set var_2 to 4; TAB set var_5 to 7; swap the values of var_2 and var_5;  $ ") == ["var_2"]
    assert not [line for line in read_lines(os.path.join(DATA, "train.src")) if undetermined(line)]
    lines = sum((read_lines(dataset[0] / f"{split}.src") for split in SPLITS), [])
    for split, templates_ in (("train", make_sanstype.IN_DISTRIBUTION), ("unlabeled", make_sanstype.IN_DISTRIBUTION),
                              ("ood", make_sanstype.OUT_OF_DISTRIBUTION)):
        lines += make_sanstype.make_split(split, 2000, 0, templates_)[0]
    assert not [line for line in lines if undetermined(line)]


def test_in_distribution_covers_the_released_code():
    """Every statement of the released programs' code is one we generate too."""
    tgt = make_sanstype.make_split("train", 3000, 0, make_sanstype.IN_DISTRIBUTION)[1]
    assert not statement_shapes(read_lines(os.path.join(DATA, "train.tgt"))) - statement_shapes(tgt)


def test_tokenizer_keeps_structure_in_one_piece(dataset):
    out = dataset[0]
    sp = common.load_tokenizer((out / "spm.model").read_bytes())
    assert sp.get_piece_size() == 200
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (common.PAD_ID, common.UNK_ID,
                                                                   common.BOS_ID, common.EOS_ID)
    code = read_lines(out / "train.tgt") + read_lines(out / "unlabeled.tgt") + read_lines(out / "ood.tgt")
    for line in code:
        pieces = sp.encode(line, out_type=str)
        assert sp.decode(sp.encode(line)) == line  # code survives the round trip exactly
        assert pieces.count("▁$") == line.split(" ").count("$")
        assert pieces.count("▁~") == line.split(" ").count("~")
    assert any("~" in line for line in code)
    for line in read_lines(out / "train.src") + read_lines(out / "ood.src"):
        pieces = sp.encode(line, out_type=str)
        assert sp.unk_id() not in sp.encode(line)
        assert pieces.count("▁TAB") == line.split(" ").count("TAB")


def test_train_tokenizer_is_deterministic():
    lines = read_lines(os.path.join(DATA, "train.src"))[:50] + read_lines(os.path.join(DATA, "train.tgt"))[:50]
    random.Random(0).shuffle(lines)
    assert common.train_tokenizer(lines, 150) == common.train_tokenizer(lines, 150)


def test_a_broken_gold_program_stops_with_its_name(tmp_path, monkeypatch):
    make_split = make_sanstype.make_split

    def make_split_with_a_bug(name, size, seed, templates, avoid=frozenset()):
        src, tgt, inp = make_split(name, size, seed, templates, avoid)
        if name == "test":
            tgt[1] = tgt[1].replace("cout <<", "cout >>", 1)
        return src, tgt, inp

    monkeypatch.setattr(make_sanstype, "make_split", make_split_with_a_bug)
    with pytest.raises(SystemExit) as stop:
        make_sanstype.main(["--out", str(tmp_path / "data"), "--labeled", "3", "--unlabeled", "3",
                            "--num-eval", "2", "--vocab-size", "80"])
    message = str(stop.value.code)
    broken = make_split_with_a_bug("test", 2, 0, make_sanstype.IN_DISTRIBUTION)[1][1]
    assert "test.tgt line 2" in message and "compile_error" in message and "operator>>" in message
    assert broken in message
    assert not (tmp_path / "data").exists()  # nothing half-written


@pytest.mark.parametrize("flags", [["--labeled", "0"], ["--num-eval", "-5"], ["--unlabeled", "x"],
                                   ["--labeled", "2", "--unlabeled", "2", "--num-eval", "1",
                                    "--vocab-size", "10"]])
def test_bad_flags_exit_2_with_one_error_line(flags, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        make_sanstype.main(["--out", str(tmp_path / "data"), *flags])
    assert stop.value.code == 2
    stderr = capsys.readouterr().err.splitlines()
    assert len(stderr) == 1 and stderr[0].startswith("make_sanstype.py: error: ")
    assert not (tmp_path / "data").exists()


def test_describe_prints_the_statistics_of_existing_splits(capsys, tmp_path):
    sanstype_fidelity.print_description([os.path.join(DATA, "train"), os.path.join(DATA, "val")])
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 10 and table[0].count("|") == 4
    assert "| programs with a variable of undetermined type | 0% | 0% |" in table
    assert "| pseudocode templates | 15 | 15 |" in table
    with pytest.raises(SystemExit) as stop:
        harness.run_main("sanstype_fidelity.py", sanstype_fidelity.print_description, [str(tmp_path / "nothing")])
    assert stop.value.code == 2 and capsys.readouterr().err.strip() == \
        f"sanstype_fidelity.py: error: missing file: {tmp_path / 'nothing'}.src"


def test_small_data_gets_a_smaller_vocabulary_with_a_message(tmp_path, capsys):
    """600 pieces need more text than 60 labeled and 200 unlabeled programs hold: the tokenizer takes as many
    as the data supports, and says so, instead of failing."""
    make_sanstype.main(["--out", str(tmp_path / "data"), "--labeled", "60", "--unlabeled", "200",
                        "--num-eval", "20"])
    out = capsys.readouterr().out
    pieces = int(out.split("supports at most ")[1].split(" ")[0])
    assert pieces < 600 and f"trained a {pieces}-piece" in out
    assert common.load_tokenizer(open(tmp_path / "data" / "spm.model", "rb").read()).get_piece_size() == pieces


# --released: the authors' splits one flag away

@pytest.fixture(scope="module")
def released_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("released") / "data"
    make_sanstype.main(["--released", DATA, "--out", str(out), "--unlabeled", "2000", "--num-eval", "20",
                        "--vocab-size", "300"])
    return out


def test_released_splits_are_taken_byte_for_byte_and_the_rest_generated(released_data, capsys):
    for name in [f"{s}.{e}" for s in ("train", "val") for e in ("src", "tgt", "inp", "out")]:
        assert open(released_data / name, "rb").read() == open(os.path.join(DATA, name), "rb").read(), name
    assert [len(read_lines(released_data / f"{s}.src")) for s in SPLITS] == [1000, 500, 20, 20]
    manifest = harness.read_data_folder(str(released_data))
    assert manifest["authors_splits"] == ["train", "val"] and manifest["dataset"] == "sanstype"
    assert manifest["corruption"] == "code"  # the noise Pi learns on SansType
    # the unlabeled programs avoid every released one (2 of the first 2000 generated would be one)
    unlabeled = read_lines(released_data / "unlabeled.tgt")
    released = set(read_lines(os.path.join(DATA, "train.tgt")) + read_lines(os.path.join(DATA, "val.tgt")))
    assert len(unlabeled) == 2000 and not released & set(unlabeled)


def test_released_says_which_splits_it_took(tmp_path, capsys):
    only_val = tmp_path / "authors"
    only_val.mkdir()
    for ext in ("src", "tgt", "inp", "out"):
        (only_val / f"val.{ext}").write_bytes(open(os.path.join(DATA, f"val.{ext}"), "rb").read())
    make_sanstype.main(["--released", str(only_val), "--out", str(tmp_path / "data"), "--labeled", "30",
                        "--unlabeled", "100", "--num-eval", "20", "--vocab-size", "200"])
    assert f"took val from {only_val} as they are; generated train, test, ood, unlabeled" in capsys.readouterr().out


@pytest.mark.parametrize("fault, word", [("no inp", "val.src without val.inp"),
                                         ("short out", "500 lines in .src, 500 lines in .tgt, 500 lines in .inp, "
                                                       "499 lines in .out"),
                                         ("empty folder", "holds no split files"),
                                         ("labeled", "--labeled applies to generated splits")])
def test_released_faults_are_one_line_and_write_nothing(fault, word, tmp_path, capsys):
    authors = tmp_path / "authors"
    authors.mkdir()
    for ext in ("src", "tgt", "inp", "out"):
        lines = read_lines(os.path.join(DATA, f"val.{ext}"))
        if fault != "empty folder" and not (fault == "no inp" and ext == "inp"):
            common.write_lines(str(authors / f"val.{ext}"), lines[:-1] if fault == "short out" and ext == "out"
                               else lines)
    extra = ["--labeled", "5"] if fault == "labeled" else []
    if fault == "labeled":  # train released too
        for ext in ("src", "tgt", "inp", "out"):
            (authors / f"train.{ext}").write_bytes(open(os.path.join(DATA, f"train.{ext}"), "rb").read())
    with pytest.raises(SystemExit) as stop:
        make_sanstype.main(["--released", str(authors), "--out", str(tmp_path / "data"), *extra])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and word in err, err
    assert not (tmp_path / "data").exists()


def test_the_chain_runs_on_the_authors_splits_and_the_table_marks_them(released_data, tmp_path, capsys):
    import evaluate
    import finetune
    import train_denoiser
    smoke = ["--data", str(released_data), "--preset", "smoke"]
    train_denoiser.main([*smoke, "--out", str(tmp_path / "pi"), "--epochs", "1", "--repair-every", "0"])
    few = ["--epochs", "1", "--labeled", "40"]  # the table's marks are the point here, not the training
    finetune.main(["--method", "standard", *smoke, *few, "--denoiser", str(tmp_path / "pi/model.pt"), "--out",
                   str(tmp_path / "standard")])
    finetune.main(["--method", "composed", *smoke, *few, "--denoiser", str(tmp_path / "pi/model.pt"), "--init",
                   str(tmp_path / "standard/model.pt"), "--out", str(tmp_path / "composed")])
    for run in ("standard", "composed"):
        evaluate.main([str(tmp_path / run / "model.pt"), "--data", str(released_data), "--splits", "val,test"])
    capsys.readouterr()
    evaluate.main(["--table", str(tmp_path / "standard"), str(tmp_path / "composed")])
    header = capsys.readouterr().out.splitlines()[0]  # the authors' val (val*) apart from our test
    assert header.startswith("| runs (seeds) | test compiled | test accuracy | val* compiled | val* accuracy |")


# The tokenizer make_sanstype.py writes with no flags, by its sha256: a pre-trained Pi holds these bytes, and fits only
# data made with them (sentencepiece's version, which decides them, is pinned in requirements.txt).
SANSTYPE_TOKENIZER_SHA256 = "d4cc68d328f0f6bc2179f18e5f71764720ae083f45316fd727142fbb90e020b0"


def test_make_sanstype_with_no_flags_writes_the_same_tokenizer_on_every_machine(tmp_path):
    result = run_script("--out", str(tmp_path / "data"))
    assert result.returncode == 0, result.stderr
    spm = (tmp_path / "data" / "spm.model").read_bytes()
    assert hashlib.sha256(spm).hexdigest() == SANSTYPE_TOKENIZER_SHA256
