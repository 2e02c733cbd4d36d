"""Every command the README and EXPERIMENTS.md show uses flags its script has (a renamed flag would leave a
reader's copied command failing), every link to one of their sections finds its heading, and the README's numbers of
epochs are the presets'."""
import argparse
import ast
import contextlib
import io
import os
import re

import pytest

import evaluate
import finetune
import fonts
import make_sanstype
import make_spoc
import make_task
import predict
import staircase
import train_denoiser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAINS = {"make_sanstype.py": make_sanstype.main, "make_spoc.py": make_spoc.main, "train_denoiser.py":
         train_denoiser.main, "finetune.py": finetune.main, "evaluate.py": evaluate.main, "fonts.py": fonts.main,
         "staircase.py": staircase.main, "make_task.py": make_task.main, "predict.py": predict.main}


def help_of(script: str, subcommand: str | None) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        MAINS[script]([subcommand, "--help"] if subcommand else ["--help"])
    return out.getvalue()


def flags_of(script: str, subcommand: str | None) -> set[str]:
    """The flags a script's --help lists as its options (not those its docstring or help texts mention)."""
    options = [re.split(r"\s{2,}", line.strip())[0] for line in help_of(script, subcommand).splitlines()
               if re.match(r"  +-", line)]
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", " ".join(options)))


def test_help_shows_the_examples_as_written():
    """An example's lines stay lines (a backslash ending a docstring's line would join the next to it after a run of
    spaces), and each fonts.py subcommand's --help is its own, not the module's whole description again."""
    for script, subcommand in [(name, None) for name in MAINS] + [("fonts.py", name) for name in
                                                                  ("render", "denoiser", "train", "evaluate")]:
        description = help_of(script, subcommand).split("options:")[0]
        assert not re.search(r"\S {4,}--[a-z]", description), (script, subcommand)
    assert fonts.__doc__.splitlines()[0] not in help_of("fonts.py", "render")


def test_a_flag_named_only_in_a_docstring_is_not_a_flag():
    assert "--epochs" in flags_of("train_denoiser.py", None) and "--method" not in flags_of("train_denoiser.py", None)


def documented_commands():
    """(file, script, subcommand, flags) for each `python SCRIPT ...` in the docs' code blocks."""
    for name in ("README.md", "EXPERIMENTS.md"):
        text = open(os.path.join(ROOT, name), encoding="utf-8").read().replace("\\\n", " ")
        for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
            for line in block.splitlines():
                command = line.split("#")[0]
                for part in re.split(r"&&|;|\|\||\bdo\b", command):
                    words = part.split()
                    if len(words) > 1 and words[0] == "python" and words[1] in MAINS:
                        subcommand = words[2] if words[1] == "fonts.py" and len(words) > 2 else None
                        yield name, words[1], subcommand, {w.split("=")[0] for w in words[2:] if w.startswith("--")}


def test_every_documented_flag_exists():
    commands = list(documented_commands())
    assert len(commands) > 40  # both files were read
    known = {}
    for name, script, subcommand, flags in commands:
        known.setdefault((script, subcommand), flags_of(script, subcommand))
        unknown = flags - known[script, subcommand]
        assert not unknown, f"{name}: python {script} {subcommand or ''} uses {sorted(unknown)}"


def test_the_readme_shows_the_table_2_block_the_gpu_bench_runs():
    """tests/bench_gpu.py times the README's Table 2 block for a GPU: the README must show exactly what it runs."""
    import bench_gpu
    assert bench_gpu.TABLE2_BLOCK in open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def test_the_readmes_numbers_of_epochs_are_the_presets():
    """The epochs the README says a run trains, or waits for a better one, are those the presets set (cpu: default)."""
    readme = " ".join(open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split())  # (lines joined)
    sanstype, task = {"dataset": "sanstype", "corruption": "code"}, {"dataset": "task"}
    pi = train_denoiser.preset_values(sanstype, argparse.Namespace(preset="cpu"))

    def preset(data, name, method):
        return finetune.preset_values(data, argparse.Namespace(preset=name, method=method))
    claims = [  # (what the README says, for each number the values of the presets it stands for)
        (r"Π, (\d+) epochs of undoing", [{pi["epochs"]}]),
        (r"--method composed +# [^>]*? up to (\d+) epochs", [{preset(sanstype, "cpu", "composed")["epochs"]}]),
        (r"each run stops (\d+) epochs after its best \(composed (\d+)\)", [
            {preset(sanstype, "paper", m)["patience"] for m in finetune.METHODS if m != "composed"},
            {preset(sanstype, "paper", "composed")["patience"]}]),
        (r"baseline and standard wait (\d+) epochs for a better one", [
            {preset(task, "cpu", m)["patience"] for m in ("baseline", "standard")}]),
        (r"(\d+) denoiser steps, predictors up to (\d+) epochs", [
            {fonts.DENOISER_PRESETS["steps"][1]}, {fonts.TRAIN_PRESETS["epochs"][1]}])]  # (fonts' cpu column)
    for claim, presets in claims:
        said = re.search(claim, readme)
        assert said and [{int(number)} for number in said.groups()] == presets, (claim, presets)


def heading_anchors(path: str) -> set[str]:
    """The anchors GitHub gives a markdown file's headings: lower case, punctuation dropped, spaces to hyphens, a
    repeated one numbered."""
    anchors, text = set(), open(path, encoding="utf-8").read()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), flags=re.M):
        anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        numbered, n = anchor, 0
        while numbered in anchors:
            n += 1
            numbered = f"{anchor}-{n}"
        anchors.add(numbered)
    return anchors


def test_every_link_to_a_section_finds_its_heading():
    broken = []
    for name in ("README.md", "EXPERIMENTS.md"):
        text = open(os.path.join(ROOT, name), encoding="utf-8").read()
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)?#([^)\s]+)\)", text):
            if anchor not in heading_anchors(os.path.join(ROOT, target or name)):
                broken.append(f"{name}: {target}#{anchor}")
    assert not broken, broken


def test_every_module_uses_what_it_imports_and_no_test_edits_the_path():
    """An import nothing reads is a reader's dead end; tests import the scripts and benches as pytest puts them on
    the path (conftest.py: the scripts), not by editing sys.path themselves."""
    files = [os.path.join(folder, name) for folder in (ROOT, os.path.join(ROOT, "tests"))
             for name in sorted(os.listdir(folder)) if name.endswith(".py")]
    for path in files:
        tree = ast.parse(open(path).read())
        imported = {(alias.asname or alias.name).split(".")[0] for node in tree.body
                    if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        assert imported <= read, (path, imported - read)
        if os.path.basename(path).startswith("test_"):
            assert not any(isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "")
                           == "sys" for node in ast.walk(tree)), path
