"""Judge a model's outputs the way the paper does: the share that is valid (SansType: compiles) and the share that is
right (accuracy: SansType's print the gold output on the test's input; a task's are the gold output).

    python evaluate.py runs/standard/model.pt --splits test,ood                 # decode greedily, judge
    python evaluate.py runs/standard/model.pt --denoiser runs/denoiser/model.pt # Pi(f(x)): test-time denoiser
    python evaluate.py runs/composed/model.pt                                   # composed: Pi(f(x)) by itself
    python evaluate.py runs/composed/model.pt --denoiser none                   # its base predictor f alone
    python evaluate.py --table runs/*/                                           # our numbers beside the paper's
    python evaluate.py --predictions preds.txt --data data/sanstype --split test [--json summary.json]
    python evaluate.py --predictions data/spoc/testw.tgt --data data/spoc --split testw   # SPoC (make_spoc.py)
    python evaluate.py --predictions data/spoc/testw.tgt --data data/spoc --split testw \\
        --denoiser runs/spoc/denoiser/model.pt    # Pi(gold): how many correct programs Pi keeps correct
    python evaluate.py runs/standard/model.pt --data data/spoc --splits testw,testp      # a model trained on it
    python evaluate.py runs/molecules/standard/model.pt --data data/molecules   # SMILES judged by RDKit

A model's verdicts go beside it, one JSON line per program (`eval_<split>[_denoised][_<noise>].jsonl`; _<noise>
when the denoiser in play learned another noise than its dataset's, as Table 5's _random), with a summary (`.json`);
an evaluation through another Pi than the one whose file is there is refused (move that file away first).
For --predictions (one program per line, in the order of the split's `.inp`/`.out`, or of a SPoC split's
`.ids`, whose programs are judged on their problem's hidden test cases), they go to
`preds.txt.verdicts.jsonl`. Verdicts: correct, wrong_output, compile_error (with the compiler's
first error), runtime_error, timeout; for molecules (make_molecules.py), where "compiled" means that RDKit reads
the SMILES: correct, wrong_molecule, invalid; for a task of one's own (make_task.py), correct (the gold output
exactly), wrong_output, invalid (its --valid-command says so; "compiled" is the share it calls valid).
"""
import argparse
import collections
import glob
import json
import math
import os
import statistics
import sys

from PIL import Image, ImageDraw, ImageFont

import common
import judge
import spoc

# The paper's SansType numbers (compiled %, accuracy %) from Tables 1-4, all with the code-based
# denoiser, keyed by (method, deep, test-time denoiser, split). deep: the 12-layer rows, which we
# run as twice the preset's layers. Composed models always apply their denoiser.
PAPER_TABLES = {
    ("baseline", False, False, "test"): (48.6, 36.6), ("baseline", False, False, "ood"): (37.2, 14.2),
    ("baseline", False, True, "test"): (76.4, 58.4), ("baseline", False, True, "ood"): (64.8, 29.0),
    ("baseline", True, False, "test"): (58.6, 41.6), ("baseline", True, False, "ood"): (48.2, 22.4),
    ("standard", False, False, "test"): (86.8, 79.8), ("standard", False, False, "ood"): (65.0, 42.4),
    ("standard", False, True, "test"): (87.3, 80.4), ("standard", False, True, "ood"): (76.2, 49.8),
    ("standard", True, False, "test"): (87.0, 79.8), ("standard", True, False, "ood"): (74.0, 58.4),
    ("standard", True, True, "test"): (None, 81.2),
    ("composed", False, True, "test"): (90.4, 84.4), ("composed", False, True, "ood"): (81.6, 52.8),
    ("bart", False, False, "test"): (89.4, 83.2), ("bart", False, True, "test"): (90.0, 83.6),
    ("bart", True, False, "test"): (87.8, 81.2), ("composed+bart", False, True, "test"): (91.4, 85.4),
    ("backtranslation", False, False, "test"): (96.4, 86.4), ("backtranslation", False, True, "test"): (96.6, 86.0),
    ("backtranslation", True, False, "test"): (98.8, 86.2),
    ("composed+backtranslation", False, True, "test"): (96.8, 87.0),
    # SPoC (10 layers): TestW, and TestP (unseen problems) as its OOD split.
    ("baseline", False, False, "testw"): (51.3, 34.5), ("baseline", False, False, "testp"): (24.5, 12.2),
    ("standard", False, False, "testw"): (52.5, 37.0), ("standard", False, False, "testp"): (24.7, 14.8),
    ("composed", False, True, "testw"): (53.9, 38.1), ("composed", False, True, "testp"): (25.8, 15.4),
}
# Table 5: the denoiser pre-trained on random word deletions instead (6 layers).
PAPER_TABLE5 = {
    ("baseline", True, "test"): (64.4, 46.2),
    ("standard", False, "test"): (92.0, 81.2), ("standard", False, "ood"): (69.8, 54.0),
    ("composed", True, "test"): (94.8, 86.2), ("composed", True, "ood"): (75.6, 60.2),
}


def paper_numbers(s: dict) -> tuple:
    """The paper's (compiled, accuracy) for a row: from the table its Pi's noise is compared with (the checkpoint's,
    train_denoiser.CORRUPTIONS'), Table 2 for a run without one."""
    table = s.get("paper_table") if s["corruption"] else "Table 2"
    if table is None or s.get("dataset") in ("molecules", "task") or s.get("settings", {}).get("composed_weight") == 0:
        return None, None  # the paper runs no such experiment (nor composed without its REINFORCE term)
    if table == "Table 5":
        key = (s["method"], s["denoised"], s["split"])
        return (None, None) if s["deep"] else PAPER_TABLE5.get(key, (None, None))
    return PAPER_TABLES.get((s["method"], s["deep"], s["denoised"], s["split"]), (None, None))


def pi_noise(record: dict, prefix: str = "") -> dict:
    """A Pi's noise as a denoiser's checkpoint, a predictor's (prefix denoiser_: the Pi it started from) or an
    evaluation records it: corruption, own_noise (its dataset's noise, or another's) and paper_table. Where these two
    are missing (recorded since 481fff2) they are derived as they were meant then: random deletions the one noise other
    than a dataset's (files _random, Table 5), code and line Table 2's (SansType's, SPoC's)."""
    noise = {key: record.get(prefix + key) for key in ("corruption", "own_noise", "paper_table")}
    if noise["corruption"] and prefix + "own_noise" not in record:
        noise.update(own_noise=noise["corruption"] != "random",
                     paper_table={"random": "Table 5", "code": "Table 2", "line": "Table 2"}.get(noise["corruption"]))
    return noise


def default_splits(data: str) -> str:
    """test,ood for SansType and molecules; SPoC's testw,testp, those of them make_spoc.py wrote; a task's test (and ood
    if it has one)."""
    if common.read_dataset(data) in ("sanstype", "molecules"):
        return "test,ood"
    if common.read_dataset(data) == "task":  # ood if make_task.py was given one
        return "test,ood" if os.path.isfile(os.path.join(data, "ood.src")) else "test"
    splits = [s for s in ("testw", "testp") if os.path.isfile(os.path.join(data, f"{s}.src"))]
    if not splits:
        raise common.UsageError(f"{data} has neither testw nor testp: name the splits with --splits")
    return ",".join(splits)


def check_splits(data: str, splits: str, flag: str) -> list[str]:
    """The splits a comma-separated list names, each checked before any work: one the data folder lacks is one line."""
    common.read_manifest(data)  # first, that --data is a data folder
    have = sorted({name.rsplit(".", 1)[0] for name in os.listdir(data) if name.endswith((".src", ".inp", ".ids"))}
                  - {"unlabeled"})  # (unlabeled.src and .tgt are not pairs)
    missing = [split for split in splits.split(",") if split not in have]
    if missing:
        raise common.UsageError(f"{flag} {splits}: {data} has no {', '.join(missing)} split (it has "
                                f"{', '.join(have)})")
    return splits.split(",")


def load_judge(data: str, split: str):
    """(how many programs the split has, a function from programs to their verdicts). A SPoC split has its
    problems' test cases ({split}.cases.jsonl); a SansType split one stdin and gold output per program
    ({split}.inp, .out); a molecules split its gold SMILES ({split}.tgt), RDKit the judge."""
    dataset = common.read_dataset(data)
    if dataset == "task":
        gold = common.read_lines(os.path.join(data, f"{split}.tgt"))
        return len(gold), lambda outputs: judge_task(outputs, gold, common.valid_outputs(data, outputs))
    if dataset == "molecules":
        gold = common.read_lines(os.path.join(data, f"{split}.tgt"))
        return len(gold), lambda outputs: judge_molecules(outputs, gold)
    if dataset == "spoc":
        cases = spoc.read_cases(data, split)
        return len(cases), lambda programs: judge.judge_spoc_programs(programs, cases, progress=meter(split, cases))
    stdins = common.read_lines(os.path.join(data, f"{split}.inp"))
    expected = common.read_lines(os.path.join(data, f"{split}.out"))
    if len(stdins) != len(expected):
        raise common.UsageError(f"line counts differ: {len(stdins)} in {data}/{split}.inp, {len(expected)} in .out")
    return len(stdins), lambda programs: judge.judge_programs(programs, stdins, expected,
                                                              progress=meter(split, stdins))


def judge_molecules(outputs: list[str], gold: list[str]) -> list[dict]:
    """RDKit as the judge: an output is valid where RDKit parses it (as a program compiles), correct where its
    canonical SMILES is the gold's; wrong_molecule: valid, but another molecule."""
    verdicts = []
    for output, answer in zip(outputs, gold):
        canonical = common.canonical_smiles(output)
        verdicts.append({"verdict": "invalid" if canonical is None else "correct" if canonical == answer else
                         "wrong_molecule"})
    return verdicts


def judge_task(outputs: list[str], gold: list[str], valid: list[bool] | None) -> list[dict]:
    """A task of one's own (make_task.py): correct where the output is the gold one exactly; invalid where its
    validity command says so; "unjudged" marks a task that has no such command (its share valid is then unknown).
    Where no output is exact, how near each is: its words and the gold's, and their token F1."""
    return [{"verdict": "correct" if output == answer else "invalid" if ok is False else "wrong_output",
             **({"unjudged": True} if valid is None else {}), "words": len(output.split()),
             "gold_words": len(answer.split()), "f1": token_f1(output, answer)}
            for output, answer, ok in zip(outputs, gold, valid or [None] * len(outputs))]


def token_f1(output: str, gold: str) -> float:
    """The F1 of the words two texts share (as multisets, order ignored): 1 for the gold itself, 0 for nothing in
    common. A short output that is valid but says little scores low."""
    common_words = sum((collections.Counter(output.split()) & collections.Counter(gold.split())).values())
    return 2 * common_words / (len(output.split()) + len(gold.split())) if common_words else float(output == gold)


def meter(split: str, programs: list):
    return common.Progress(len(programs), f"judging {split} programs").step


def summarize(verdicts: list[dict]) -> dict:
    """Fractions in [0, 1]: compiled counts every program that got past g++ (every SMILES RDKit read, every output of
    a task its validity command passed; None for a task that has none). A task's also: words, its outputs' words over
    the gold's, and token_f1, the mean of token_f1."""
    n = len(verdicts)
    summary = {"n": n,
               "compiled": None if any(v.get("unjudged") for v in verdicts) else
               sum(v["verdict"] not in ("compile_error", "invalid") for v in verdicts) / n,
               "accuracy": sum(v["verdict"] == "correct" for v in verdicts) / n}
    if "f1" in verdicts[0]:
        gold_words = sum(v["gold_words"] for v in verdicts)
        summary.update(words=sum(v["words"] for v in verdicts) / gold_words if gold_words else None,
                       token_f1=sum(v["f1"] for v in verdicts) / n)
    return summary


def write_jsonl(path: str, rows: list[dict]):
    common.write_lines(path, (json.dumps(row) for row in rows))


def judge_predictions(args):
    """--predictions mode: judge a file of programs against a split."""
    check_splits(args.data, args.split, "--split")
    programs = common.read_lines(args.predictions)
    common.check_output_file(args.predictions + ".verdicts.jsonl", "--predictions")  # the verdicts go beside it
    if args.json:
        common.check_output_file(args.json, "--json")
    n, judge_split = load_judge(args.data, args.split)
    if not programs:
        raise common.UsageError(f"empty predictions file: {args.predictions}")
    if len(programs) != n:
        raise common.UsageError(f"line counts differ: {len(programs)} predictions, {n} programs in "
                                f"{args.data}/{args.split}")
    denoised = bool(args.denoiser) and args.denoiser != "none"
    if denoised:  # Pi(programs): e.g. how many correct programs Pi leaves correct
        spm = common.read_tokenizer_bytes(args.data)
        denoiser, denoiser_checkpoint = common.load_model(args.denoiser, spm, f"{args.data}/spm.model", "denoiser")
        denoiser.to(common.pick_device(args.device))
        programs = common.denoise(denoiser, common.load_tokenizer(spm), programs, args.batch_size,
                                  common.error_detector(denoiser_checkpoint), progress=True)
    verdicts = judge_split(programs)
    rows = [{"line": i + 1, **({"prediction": p} if denoised else {}), **v} for i, (p, v) in enumerate(zip(programs,
                                                                                                          verdicts))]
    write_jsonl(args.predictions + (".denoised" if denoised else "") + ".verdicts.jsonl", rows)
    summary = summarize(verdicts)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f)
    print(result_line(args.split, summary))


def result_line(split: str, summary: dict) -> str:
    if "token_f1" in summary:  # a task of one's own, in its own words
        return f"{split}: n={summary['n']}  valid {spread([percent(summary['compiled'])])}%  exact " \
               f"{100 * summary['accuracy']:.1f}%  words {spread([percent(summary['words'])])}% of the gold's  " \
               f"token F1 {100 * summary['token_f1']:.1f}"
    return f"{split}: n={summary['n']}  compiled {spread([percent(summary['compiled'])])}%  " \
           f"accuracy {100 * summary['accuracy']:.1f}%"


def evaluate_model(args):
    """Model mode: decode every split greedily, denoise (given --denoiser, or a composed model's
    own denoiser), judge, write, print."""
    spm = common.read_tokenizer_bytes(args.data)
    splits = check_splits(args.data, args.splits or default_splits(args.data), "--splits")
    model, checkpoint = common.load_model(args.model, spm, f"{args.data}/spm.model", "predictor")
    tokenizer = common.load_tokenizer(spm)
    device = common.pick_device(args.device)
    model = model.to(device)
    manifest = common.read_manifest(args.data)
    dataset, authors_splits = manifest["dataset"], manifest.get("authors_splits", [])  # (make_sanstype --released)
    denoiser, denoiser_checkpoint = common.chosen_denoiser(checkpoint, args.denoiser, spm, f"{args.data}/spm.model")
    given = args.denoiser not in (None, "none")  # a test-time Pi's noise names the row, else the one f started from
    noise = pi_noise(denoiser_checkpoint) if given else pi_noise(checkpoint, "denoiser_")
    corruption = noise["corruption"]
    denoiser = denoiser.to(device) if denoiser else None
    error_free = common.error_detector(denoiser_checkpoint) if denoiser else None  # Pi's g, if it has one
    method = checkpoint.get("method", "?")
    if method == "composed" and checkpoint.get("init_method") not in (None, "standard"):
        method += "+" + checkpoint["init_method"]
    layers = f"{model.config.encoder_layers}+{model.config.decoder_layers}"  # a run's --layers is each side's
    # The run's own Pi (the one it was fine-tuned from; a baseline has none) names its row's Pi seed; the Pi its
    # outputs went through is test_pi: "own" where it is that one, else its own seed and settings.
    own_pi = pi_of(checkpoint.get("denoiser_args"))
    applied = pi_of(denoiser_checkpoint.get("args")) if denoiser else None
    test_pi = "own" if own_pi and applied == own_pi else applied
    named = args.denoiser or ("(its own)" if denoiser else None)
    folder = os.path.dirname(args.model)
    common.check_writable(folder, "the model's folder")  # its evaluations go beside it
    # a Pi of another noise than its dataset's (Table 5's random deletions) gets files of its own
    suffix = f"{'_denoised' if denoiser else ''}{f'_{corruption}' if noise['own_noise'] is False else ''}"
    names = {split: f"eval_{split}{suffix}" for split in splits}
    for name in names.values() if denoiser else ():
        check_same_pi(os.path.join(folder, name + ".json"), test_pi, named)
    print(f"{args.model} on {common.device_name(device)}", file=sys.stderr)

    for split, name in names.items():
        sources = common.read_lines(os.path.join(args.data, f"{split}.src"))
        _, judge_split = load_judge(args.data, split)
        base = common.translate(model, tokenizer, sources, args.batch_size, progress=True)
        programs = common.denoise(denoiser, tokenizer, base, args.batch_size, error_free, progress=True) \
            if denoiser else base
        verdicts = judge_split(programs)
        rows = [{"line": i + 1, "prediction": p, **({"base": b} if denoiser else {}), **v}
                for i, (p, b, v) in enumerate(zip(programs, base, verdicts))]
        write_jsonl(os.path.join(folder, name + ".jsonl"), rows)
        summary = dict(summarize(verdicts), dataset=dataset, method=method, layers=layers,
                       deep=checkpoint.get("deep", False),
                       preset=checkpoint["args"].get("preset"), **noise, denoised=bool(denoiser),
                       split=split, authors_split=split in authors_splits, model=args.model,
                       denoiser=named, seed=checkpoint["args"].get("seed"), settings=run_settings(checkpoint["args"]),
                       pi_seed=own_pi and own_pi["seed"], pi=own_pi and own_pi["settings"], test_pi=test_pi)
        with open(os.path.join(folder, name + ".json"), "w") as f:
            json.dump(summary, f, indent=1)
        print(result_line(split + " Pi(f(x))" * bool(denoiser), summary))


def check_same_pi(path: str, test_pi, named: str | None):
    """No evaluation writes over one through another Pi (its test_pi; in one made before test_pi was recorded, the
    --denoiser given): that one is to be moved away first, before any work."""
    if not os.path.isfile(path):
        return
    with open(path) as f:
        made = json.load(f)
    key = "test_pi" if "test_pi" in made else "denoiser"
    if made.get(key) != {"test_pi": test_pi, "denoiser": named}[key]:
        raise common.UsageError(f"{path} holds an evaluation through another Pi ({made.get('denoiser')}): move it "
                                "away to keep it")


def run_settings(args: dict) -> dict:
    """What a run trained with but its seed, device and its own paths: runs that differ only by seed share these."""
    return {name: value for name, value in sorted(args.items()) if name not in NOT_SETTINGS}


# (init: a seed's own standard run; denoiser: a Pi, told apart by its own settings, the evaluations' "pi")
NOT_SETTINGS = ("seed", "device", "out", "init", "denoiser", "resume", "overwrite")


def pi_of(args: dict | None) -> dict | None:
    """A Pi as an evaluation records it, from the args it trained with: its seed and settings (None: no Pi)."""
    return args and {"seed": args.get("seed"), "settings": run_settings(args)}


def show(x) -> str:
    return "  -  " if x is None else f"{x:5.1f}"


def percent(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


def spread(values: list[float | None], sign: str = "") -> str:
    """mean ± std (the sample's, over seeds), or the one value; - where a value is unknown (a task with no judge)."""
    if None in values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:{sign}.1f}"
    return f"{statistics.mean(values):{sign}.1f} ± {statistics.stdev(values):.1f}"


def group_label(group: list[dict]) -> str:
    """The runs' folder names: baseline_{0,1,2} for baseline_0, baseline_1, baseline_2 (what follows the last _ of
    the names' common start)."""
    names = [r["run"] for r in group]
    stem = os.path.commonprefix(names)
    stem = stem[:stem.rfind("_") + 1]
    if len(names) == 1 or not stem:
        return ",".join(names)
    return f"{stem}{{{','.join(name[len(stem):] for name in names)}}}"


def by_seed(summaries: list[dict]) -> list[list[dict]]:
    """Runs that differ only by seed, theirs or their Pi's (the same method, settings, split, kind of Pi, test-time
    Pi, ...), together, in the order of their seeds: each run in exactly one group, a row of the table. An evaluation
    made before evaluate.py recorded seeds stays alone; one made before it recorded Pi's settings is told apart by
    Pi's path."""
    groups = {}
    for s in summaries:
        key = tuple(str(s.get(name)) for name in ("dataset", "method", "layers", "deep", "preset", "corruption",
                                                   "denoised", "split", "authors_split"))
        key += (json.dumps(s["pi"], sort_keys=True),) if "pi" in s else (str(s.get("denoiser")),)
        key += (json.dumps(s.get("test_pi"), sort_keys=True),)
        key += (json.dumps(s["settings"], sort_keys=True),) if "settings" in s else (s["run"],)
        groups.setdefault(key, []).append(s)
    return [sorted(group, key=seeds_of) for group in groups.values()]


def seeds_of(s: dict) -> tuple:
    """(Pi's seed, the run's seed): a run's place among its group, and what pairs it with a run of another group."""
    return (s.get("pi_seed") or 0, s.get("seed") or 0)


def spread_of(group: list[dict]) -> str:
    """What a group's ± runs over: seeds, Pi seeds (runs from Pis that differ by their seed), or both."""
    varies = [name for name, key in (("Pi seeds", "pi_seed"), ("seeds", "seed"))
              if len({s.get(key) for s in group}) > 1]
    return " and ".join(varies) or "seeds"


def counted(n: int, group: list[dict]) -> str:
    """n runs (or pairs of runs) of a group, and what they differ by: 3 seeds, 3 Pi seeds, 1 run."""
    return "1 run" if n == 1 else f"{n} {spread_of(group)}"


METHOD_ORDER = ("baseline", "standard", "composed", "bart", "composed+bart", "backtranslation",
                "composed+backtranslation")
# The paired rows of the README's Table 2: (row, the row it is compared with), a row being (method, Pi?).
PAIRED = [(("standard", False), ("baseline", False)), (("baseline", True), ("baseline", False)),
          (("standard", True), ("standard", False)), (("composed", True), ("standard", False)),
          (("composed", True), ("standard", True))]


def is_predictor(path: str) -> bool:
    return os.path.isfile(path) and common.load_checkpoint(path, needs=("role",))["role"] == "predictor"


def print_table(args):
    """The README's layout: a row per run, or per runs that differ only by seed (mean ± std), each split's compiled
    and accuracy side by side, the paper's beside them; then the paired rows (PAIRED): per seed, one row minus
    another, over the seeds both have (and the paper's difference of the same rows)."""
    summaries, unevaluated = [], []
    folders = {}
    for folder in args.table:  # each folder once, however it is spelled
        folders.setdefault(os.path.realpath(folder), folder)
    folders = list(folders.values())
    names = run_names(folders)
    for folder in folders:
        paths = sorted(glob.glob(os.path.join(folder, "eval_*.json")))
        if not paths and is_predictor(os.path.join(folder, "model.pt")):
            unevaluated.append(folder)
        for path in paths:
            with open(path) as f:
                s = json.load(f)
            summaries.append({**s, **pi_noise(s), "run": names[folder]})
    if not summaries:
        raise common.UsageError(f"no eval_*.json in {' '.join(args.table)}: run evaluate.py on a model first")
    rank = lambda m: METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER)  # noqa: E731
    order = lambda s: (s["split"] != "test", s["split"], s.get("own_noise") is False, rank(s["method"]),  # noqa: E731
                       str(s["layers"]), s["denoised"], s["run"])
    groups = sorted(by_seed(summaries), key=lambda group: order(group[0]))
    paired = [(a, b, differences) for a in groups for b in groups if comparable(a[0], b[0])
              for differences in [seed_by_seed(a, b)] if differences]
    print(markdown_table(groups, paired))
    if unevaluated:
        print(f"not evaluated (no eval_*.json): {' '.join(unevaluated)}", file=sys.stderr)


def run_names(folders: list[str]) -> dict:
    """Each run folder's name in the table: its last part, with as many of its parents as tell it from every other
    folder given (runs/a/standard and runs/b/standard: a/standard and b/standard)."""
    parts = {folder: os.path.abspath(folder).split(os.sep) for folder in folders}

    def name(folder):
        mine, k = parts[folder], 1
        while k < len(mine) and any(parts[other][-k:] == mine[-k:] for other in folders if other != folder):
            k += 1
        return "/".join(mine[-k:])
    return {folder: name(folder) for folder in folders}


def markdown_table(groups: list[list[dict]], paired: list) -> str:
    splits = list(dict.fromkeys(split_name(group[0]) for group in groups))
    rows, differences = {}, {}
    for group in groups:
        rows.setdefault(row_name(group), {})[split_name(group[0])] = group
    for a, b, (compiled, accuracy) in paired:
        minus = f"({row_name(b)})" if " + " in row_name(b) else row_name(b)
        differences.setdefault(f"{row_name(a)} - {minus}, paired", {})[split_name(a[0])] = (a, b, compiled, accuracy)
    # A task of one's own and the molecules are judged as valid and exact, and the paper has no numbers for them.
    judged = ("valid", "exact") if all(g[0].get("dataset") in ("task", "molecules") for g in groups) else \
        ("compiled", "accuracy")
    with_paper = judged[0] == "compiled"
    lines = ["| runs (seeds) | " + " | ".join(f"{split} {judged[0]} | {split} {judged[1]}" for split in splits) +
             "".join(f" | paper: {split} compiled / accuracy" for split in splits if with_paper) + " |",
             "| --- " * (1 + (2 + with_paper) * len(splits)) + "|"]
    for name, by_split in rows.items():
        ours = [spread([percent(r[key]) for r in by_split[split]]) if split in by_split else ""
                for split in splits for key in ("compiled", "accuracy")]
        papers = [paper_numbers(by_split[split][0]) if split in by_split else (None, None) for split in splits]
        theirs = [" / ".join(show(x).strip() for x in paper) if paper != (None, None) else "" for paper in papers]
        group = next(iter(by_split.values()))
        lines.append(f"| {name} ({counted(len(group), group)}) | " + " | ".join(ours + theirs * with_paper) + " |")
    for name, by_split in differences.items():
        ours = [spread(by_split[split][k], "+") if split in by_split else "" for split in splits for k in (2, 3)]
        theirs = []
        for split in splits:
            a, b = (paper_numbers(by_split[split][k][0]) if split in by_split else (None, None) for k in (0, 1))
            theirs.append(" / ".join(f"{x - y:+.1f}" if None not in (x, y) else "-" for x, y in zip(a, b))
                          if (None, None) not in (a, b) else "")
        a, _, _, accuracy = next(iter(by_split.values()))
        lines.append(f"| {name} ({counted(len(accuracy), a)}) | " + " | ".join(ours + theirs * with_paper) + " |")
    return "\n".join(lines)


# A paired row compares methods: what a method sets (its rate, epochs, dropout, Eq. 1's estimator, ...) may differ
# between the runs it pairs; the data and how much of it, the preset, the model's size, the optimizer's constants that
# every method shares and the precision must be the same.
SAME_IN_PAIRS = ("data", "labeled", "preset", "d_model", "n_heads", "layers", "d_ff", "weight_decay", "clip_norm",
                 "precision")


def comparable(a: dict, b: dict) -> bool:
    """Rows PAIRED compares: a pair of its kinds, the same data, preset, size and split, the same SAME_IN_PAIRS
    settings, and where both have one: the same Pi settings (the Pi they were fine-tuned from),
    test-time Pi and denoiser's noise (standard from Table 5's Pi is not compared with composed through the code Pi)."""
    same = all(a.get(key) == b.get(key) for key in ("dataset", "preset", "layers", "split", "authors_split"))
    same &= all(None in (a.get(key), b.get(key)) or a[key] == b[key]  # (a baseline has no Pi)
                for key in ("pi", "test_pi", "corruption"))
    if "settings" in a and "settings" in b:
        same &= all(a["settings"].get(name) == b["settings"].get(name) for name in SAME_IN_PAIRS)
    return same and ((a["method"], a["denoised"]), (b["method"], b["denoised"])) in PAIRED


def seed_by_seed(a: list[dict], b: list[dict]) -> tuple[list, list] | None:
    """a minus b, seed by seed (a run and the run of b with its seed, and its Pi's seed where both have a Pi: a baseline
    pairs with the runs of every Pi), over the seeds both have, in points: (compiled, accuracy); None where they share
    none."""
    both_have_a_pi = a[0].get("pi_seed") is not None and b[0].get("pi_seed") is not None
    key = seeds_of if both_have_a_pi else (lambda s: s["seed"])
    b_of = {key(s): s for s in b if s.get("seed") is not None}
    pairs = [(s, b_of[key(s)]) for s in a if s.get("seed") is not None and key(s) in b_of]
    if not pairs:
        return None
    return tuple([None if None in (x[key], y[key]) else 100 * (x[key] - y[key]) for x, y in pairs]
                 for key in ("compiled", "accuracy"))


def row_name(group: list[dict]) -> str:
    """The runs, and + Pi where a test-time denoiser repaired their outputs; a composed run is Pi(f(x)) by itself, so
    there it is "f alone" that is said. A Pi of another noise than its dataset's (Table 5's) is named, and by its seed
    a test-time Pi of runs that have a Pi of their own (the one they were fine-tuned from) but not this one."""
    s = group[0]
    named = [s["corruption"]] * (s.get("own_noise") is False) + ["Pi"]
    if isinstance(s.get("test_pi"), dict) and s.get("pi_seed") is not None:  # not the Pi they were fine-tuned from
        named.append(f"seed {s['test_pi']['seed']}")
    noise = f" ({' '.join(named)})" if len(named) > 1 else ""
    if s["method"].startswith("composed"):
        return group_label(group) + ("" if s["denoised"] else " f alone") + noise
    return group_label(group) + (" + Pi" if s["denoised"] else "") + noise


def split_name(s: dict) -> str:
    """test, or test* for the authors' own programs (make_sanstype.py --released)."""
    return s["split"] + "*" * s.get("authors_split", False)


CURVE_COLORS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14), (140, 86, 75),
                (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]


def draw_curves(args, size=(720, 440), margin=(60, 30, 190, 40)):
    """--curves: each run's validation loss by epoch (its last.pt's history), one line per run, on a log scale;
    a dot marks the epoch it kept (its best). The epochs start at the first any run has: composed's 0 is the f it
    starts from, which it may keep."""
    runs, names = {}, run_names(args.curves)
    for folder in args.curves:
        path = os.path.join(folder, "last.pt")
        history = common.load_checkpoint(path, needs=("state",))["state"]["history"]
        runs[names[folder]] = [(h["epoch"], h["val_loss"]) for h in history]
    left, top, right, bottom = margin
    w, h = size[0] - left - right, size[1] - top - bottom
    first, epochs = (f(e for points in runs.values() for e, _ in points) for f in (min, max))
    low, high = (math.log10(f([v for points in runs.values() for _, v in points])) for f in (min, max))
    low, high = math.floor(low * 5) / 5, math.ceil(high * 5) / 5  # tick every 10^0.2
    img = Image.new("RGB", size, "white")
    draw, font = ImageDraw.Draw(img), ImageFont.load_default(size=12)

    def to_px(epoch, loss):
        return left + w * (epoch - first) / max(1, epochs - first), top + h * (high - math.log10(loss)) / (high - low)
    for k in range(round((high - low) * 5) + 1):  # y ticks and grid
        y = 10 ** (low + k / 5)
        draw.line([left, to_px(1, y)[1], left + w, to_px(1, y)[1]], fill=(225, 225, 225))
        draw.text((left - 6, to_px(1, y)[1]), f"{y:.3g}", fill="black", font=font, anchor="rm")
    step = max(1, round(epochs / 8))
    for epoch in sorted({first, epochs, *range(step, epochs, step)}):
        draw.text((to_px(epoch, 1)[0], top + h + 6), str(epoch), fill="black", font=font, anchor="ma")
    draw.rectangle([left, top, left + w, top + h], outline="black")
    draw.text((left + w / 2, size[1] - 6), "epoch", fill="black", font=font, anchor="md")
    draw.text((left + w / 2, 8), "validation loss (log scale)", fill="black", font=font, anchor="ma")
    for n, (name, points) in enumerate(runs.items()):
        color = CURVE_COLORS[n % len(CURVE_COLORS)]
        coords = [to_px(e, v) for e, v in points]
        if len(coords) > 1:
            draw.line(coords, fill=color, width=2)
        x, y = to_px(*min(points, key=lambda p: p[1]))
        draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=color)
        draw.text((left + w + 10, top + 16 * n), name, fill=color, font=font, anchor="la")
    os.makedirs(os.path.dirname(args.png) or ".", exist_ok=True)
    img.save(args.png)
    print(f"wrote {args.png}")


def main(argv=None):
    parser = common.ArgumentParser(prog="evaluate.py", description=__doc__)
    parser.add_argument("model", nargs="?", help="a predictor checkpoint (runs/<name>/model.pt)")
    parser.add_argument("--denoiser", help="apply this denoiser to the predictions: Pi(f(x)) (composed models "
                        "apply their own unless given another, or none); with --predictions, to the file's programs")
    parser.add_argument("--splits", help="default: test,ood (SansType), testw,testp (SPoC)")
    parser.add_argument("--table", nargs="+", metavar="RUN_DIR", help="print the results found in these folders, "
                        "in Markdown, the paper's beside them (+ Pi: with a test-time denoiser; f alone: a composed "
                        "run's f without its Pi; test*: the authors' own programs, make_sanstype.py --released)")
    parser.add_argument("--curves", nargs="+", metavar="RUN_DIR", help="draw these runs' validation loss by epoch "
                        "into --png")
    parser.add_argument("--png", default="runs/curves.png", help="with --curves: the PNG to write")
    parser.add_argument("--predictions", help="judge this file of programs instead of a model's")
    parser.add_argument("--split", help="with --predictions: the split they answer (default: test)")
    parser.add_argument("--json", help="with --predictions: also write {n, compiled, accuracy} here")
    given = argparse.ArgumentParser(add_help=False)  # --help shows the --data given as its default
    given.add_argument("--data", default="data/sanstype")
    parser.add_argument("--data", default=given.parse_known_args(argv)[0].data,
                        help="the data folder the model was trained on")
    parser.add_argument("--batch-size", type=int, default=64, help="programs decoded at once")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    args = parser.parse_args(argv)
    common.check_ranges(parser, args, at_least_1="batch_size")
    if sum(map(bool, (args.model, args.table, args.predictions, args.curves))) != 1:
        parser.error("give one of: a model checkpoint, --table RUN_DIR..., --predictions FILE, --curves RUN_DIR...")
    mode = "--table" if args.table else "--predictions" if args.predictions else "--curves" if args.curves else \
        "a model"
    for name in {"--table": ("denoiser", "splits", "split", "json", "device"), "--predictions": ("splits",),
                 "--curves": ("denoiser", "splits", "split", "json", "device"), "a model": ("split", "json")}[mode]:
        if getattr(args, name) not in (None, False):
            parser.error(f"--{name} does not apply to {mode}")
    if args.curves:
        common.check_output_file(args.png, "--png")
    args.split = args.split or "test"
    work = {"--table": print_table, "--predictions": judge_predictions, "--curves": draw_curves,
            "a model": evaluate_model}[mode]
    common.run_main("evaluate.py", work, args)


if __name__ == "__main__":
    main()
