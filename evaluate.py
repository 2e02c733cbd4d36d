"""Judge a model's outputs as the paper does: the share valid (SansType: compiles) and the share right (accuracy).

    python evaluate.py runs/standard/model.pt --splits test,ood                 # decode greedily, judge
    python evaluate.py runs/standard/model.pt --denoiser runs/denoiser/model.pt # Pi(f(x)): test-time denoiser
    python evaluate.py runs/composed/model.pt                                   # composed: Pi(f(x)) by itself
    python evaluate.py runs/composed/model.pt --denoiser none                   # its base predictor f alone
    python evaluate.py --table runs/*/                                           # our numbers beside the paper's
    python evaluate.py --predictions preds.txt --data data/sanstype --split test [--json summary.json]
    python evaluate.py --predictions data/spoc/testw.tgt --data data/spoc --split testw   # SPoC (make_spoc.py)
    python evaluate.py --predictions data/spoc/testw.tgt --data data/spoc --split testw \\
        --denoiser runs/spoc/denoiser/model.pt    # Pi(gold): how many correct outputs Pi keeps correct
    python evaluate.py runs/spoc/standard/model.pt                              # on the data it was trained on

Verdicts (a JSON line per output) and a summary go beside the model: eval_<split>[_denoised][_<noise>].jsonl, .json
(_<noise>: a Pi of another noise, as Table 5's _random; one over another Pi's evaluation is refused). --predictions
FILE (an output a line, in the split's order) writes FILE[.denoised].verdicts.jsonl. Verdicts: correct, wrong_output;
SansType's and SPoC's compile_error, runtime_error, timeout; molecules' wrong_molecule, invalid; a task's invalid.
"""
import collections
import glob
import json
import os
import statistics
import sys

import common
import harness
import judge
import spoc

# The paper's SansType numbers (compiled %, accuracy %), Tables 1-4, all with the code-based denoiser, keyed by (method,
# deep: its 12-layer rows, run as twice the preset's layers, test-time denoiser, split). Composed always applies its Pi.
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
PAPER_TABLE5 = {("baseline", True, "test"): (64.4, 46.2),
                ("standard", False, "test"): (92.0, 81.2), ("standard", False, "ood"): (69.8, 54.0),
                ("composed", True, "test"): (94.8, 86.2), ("composed", True, "ood"): (75.6, 60.2)}


def paper_numbers(s: dict) -> tuple:
    """The paper's (compiled, accuracy) for a row, from the table its Pi's noise is compared with (none: Table 2)."""
    table = s.get("paper_table") if s["corruption"] else "Table 2"
    if table is None or s.get("dataset") in ("molecules", "task") or s.get("settings", {}).get("composed_weight") == 0:
        return None, None  # the paper runs no such experiment (nor composed without its REINFORCE term)
    if table == "Table 5":
        return (None, None) if s["deep"] else PAPER_TABLE5.get((s["method"], s["denoised"], s["split"]), (None, None))
    return PAPER_TABLES.get((s["method"], s["deep"], s["denoised"], s["split"]), (None, None))


def pi_noise(record: dict, prefix: str = "") -> dict:
    """A Pi's corruption, own_noise and paper_table from its checkpoint, or a predictor's (prefix denoiser_: f's Pi)."""
    return {key: record.get(prefix + key) for key in ("corruption", "own_noise", "paper_table")}


def default_splits(data: str) -> str:
    """The test splits the data has: SPoC's testw and testp, the others' test and ood (a task's where it has one)."""
    wanted = ("testw", "testp") if harness.read_data_folder(data)["dataset"] == "spoc" else ("test", "ood")
    splits = [split for split in wanted if os.path.isfile(os.path.join(data, f"{split}.src"))]
    if not splits:
        raise common.UsageError(f"{data} has neither {' nor '.join(wanted)}: name the splits with --splits")
    return ",".join(splits)


def check_splits(data: str, splits: str, flag: str) -> list[str]:
    """The splits a comma-separated list names, checked before any work: one the data folder lacks is one line."""
    harness.read_data_folder(data)  # first, that --data is a data folder
    have = sorted({name.rsplit(".", 1)[0] for name in os.listdir(data) if name.endswith((".src", ".inp", ".ids"))}
                  - {"unlabeled"})  # (unlabeled.src and .tgt are not pairs)
    missing = [split for split in splits.split(",") if split not in have]
    if missing:
        raise common.UsageError(f"{flag} {splits}: {data} has no {', '.join(missing)} split (it has {', '.join(have)})")
    return splits.split(",")


def load_judge(data: str, split: str):
    """(the split's size, a function from outputs to verdicts): by test cases, stdin and gold output, or gold .tgt."""
    dataset = harness.read_data_folder(data)["dataset"]
    if dataset in ("task", "molecules"):
        gold = common.read_lines(os.path.join(data, f"{split}.tgt"))
        if dataset == "molecules":
            return len(gold), lambda outputs: judge_molecules(outputs, gold)
        return len(gold), lambda outputs: judge_task(outputs, gold, harness.valid_outputs(data, outputs))
    if dataset == "spoc":
        cases = spoc.read_cases(data, split)
        return len(cases), lambda programs: judge.judge_spoc_programs(programs, cases,
                                                                      progress=meter(f"judging {split}", cases))
    stdins, expected = (common.read_lines(os.path.join(data, f"{split}.{end}")) for end in ("inp", "out"))
    if len(stdins) != len(expected):
        raise common.UsageError(f"line counts differ: {len(stdins)} in {data}/{split}.inp, {len(expected)} in .out")
    return len(stdins), lambda programs: judge.judge_programs(programs, stdins, expected,
                                                              progress=meter(f"judging {split}", stdins))


def judge_molecules(outputs: list[str], gold: list[str]) -> list[dict]:
    """Valid where RDKit parses the SMILES, correct where its canonical form is the gold's, else wrong_molecule."""
    return [{"verdict": "invalid" if canonical is None else "correct" if canonical == answer else "wrong_molecule"}
            for canonical, answer in zip(map(common.canonical_smiles, outputs), gold)]


def judge_task(outputs: list[str], gold: list[str], valid: list[bool] | None) -> list[dict]:
    """Correct where exactly the gold, invalid where the task's check says so (unjudged: it has none); words and F1."""
    return [{"verdict": "correct" if output == answer else "invalid" if ok is False else "wrong_output",
             **({"unjudged": True} if valid is None else {}), "words": len(output.split()),
             "gold_words": len(answer.split()), "f1": token_f1(output, answer)}
            for output, answer, ok in zip(outputs, gold, valid or [None] * len(outputs))]


def token_f1(output: str, gold: str) -> float:
    """The F1 of the words two texts share, as multisets: 1 for the gold itself, 0 for nothing in common."""
    common_words = sum((collections.Counter(output.split()) & collections.Counter(gold.split())).values())
    return 2 * common_words / (len(output.split()) + len(gold.split())) if common_words else float(output == gold)


def meter(what: str, items: list):
    return harness.Progress(len(items), what).step


def summarize(verdicts: list[dict]) -> dict:
    """Fractions in [0, 1]: compiled (valid; None where a task has no check), accuracy, and a task's words and F1."""
    n = len(verdicts)
    summary = {"n": n, "compiled": None if any(v.get("unjudged") for v in verdicts) else
               sum(v["verdict"] not in ("compile_error", "invalid") for v in verdicts) / n,
               "accuracy": sum(v["verdict"] == "correct" for v in verdicts) / n}
    if "f1" in verdicts[0]:  # words: the outputs' over the gold's; neither where each gold is one word (F1 = exact)
        gold_words, one_word = sum(v["gold_words"] for v in verdicts), all(v["gold_words"] == 1 for v in verdicts)
        summary.update(words=sum(v["words"] for v in verdicts) / gold_words if gold_words and not one_word else None,
                       token_f1=None if one_word else sum(v["f1"] for v in verdicts) / n)
    return summary


def judge_predictions(args):
    """--predictions mode: judge a file of programs against a split."""
    check_splits(args.data, args.split, "--split")
    programs = common.read_lines(args.predictions)
    denoised = bool(args.denoiser) and args.denoiser != "none"
    verdicts_file = args.predictions + (".denoised" if denoised else "") + ".verdicts.jsonl"
    harness.check_output_file(verdicts_file, "--predictions")  # the verdicts go beside it
    if args.json:
        harness.check_output_file(args.json, "--json")
    n, judge_split = load_judge(args.data, args.split)
    if not programs:
        raise common.UsageError(f"empty predictions file: {args.predictions}")
    if len(programs) != n:
        raise common.UsageError(f"line counts differ: {len(programs)} predictions, {n} programs in "
                                f"{args.data}/{args.split}")
    if denoised:  # Pi(programs): e.g. how many correct programs Pi leaves correct
        spm = harness.read_data_folder(args.data)["spm"]
        denoiser, denoiser_checkpoint = harness.load_model(args.denoiser, spm, f"{args.data}/spm.model", "denoiser")
        harness.to_device(denoiser, harness.pick_device(args.device))
        programs = common.denoise(denoiser, common.load_tokenizer(spm), programs, args.batch_size,
                                  harness.error_detector(denoiser_checkpoint), meter("repairing", programs))
    verdicts = judge_split(programs)
    rows = [{"line": i + 1, **({"prediction": p} if denoised else {}), **v}
            for i, (p, v) in enumerate(zip(programs, verdicts))]
    common.write_lines(verdicts_file, map(json.dumps, rows))
    summary = summarize(verdicts)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f)
    print(result_line(args.split, summary))


def result_line(split: str, summary: dict) -> str:
    n, valid, right = summary["n"], spread([percent(summary["compiled"])]), f"{100 * summary['accuracy']:.1f}"
    if "token_f1" not in summary:
        return f"{split}: n={n}  compiled {valid}%  accuracy {right}%"
    near = "(every gold one word: no words or token F1, which would repeat exact)" if summary["token_f1"] is None \
        else f"words {spread([percent(summary['words'])])}% of the gold's  token F1 {100 * summary['token_f1']:.1f}"
    return f"{split}: n={n}  valid {valid}%  exact {right}%  {near}"  # a task of one's own, in its own words


def evaluate_model(args):
    """Model mode: decode every split greedily, denoise (--denoiser, or a composed model's own), judge, write, print."""
    if not args.data:  # the folder it was trained on, as its checkpoint says
        args.data = harness.load_checkpoint(args.model, ("args",))["args"]["data"]
        if not os.path.isfile(os.path.join(args.data, "dataset.json")):  # (moved, or another working folder)
            raise common.UsageError(f"{args.model} was trained on {args.data}, which holds no data here: give --data")
    manifest = harness.read_data_folder(args.data)
    spm, dataset, authors_splits = manifest["spm"], manifest["dataset"], manifest.get("authors_splits", [])
    splits = check_splits(args.data, args.splits or default_splits(args.data), "--splits")
    model, checkpoint = harness.load_model(args.model, spm, f"{args.data}/spm.model", "predictor")
    tokenizer, device = common.load_tokenizer(spm), harness.pick_device(args.device)
    model = harness.to_device(model, device)
    denoiser, denoiser_checkpoint = harness.chosen_denoiser(checkpoint, args.denoiser, spm, f"{args.data}/spm.model")
    given = args.denoiser not in (None, "none")  # a test-time Pi's noise names the row, else the one f started from
    noise = pi_noise(denoiser_checkpoint) if given else pi_noise(checkpoint, "denoiser_")
    denoiser = harness.to_device(denoiser, device) if denoiser else None
    error_free = harness.error_detector(denoiser_checkpoint) if denoiser else None  # Pi's g, if it has one
    method, kept_epoch = checkpoint.get("method", "?"), checkpoint.get("epoch")  # epoch 0: the model it started from
    if method == "composed" and checkpoint.get("init_method") not in (None, "standard"):
        method += "+" + checkpoint["init_method"]
    layers = f"{model.config.encoder_layers}+{model.config.decoder_layers}"  # a run's --layers is each side's
    # pi_seed: the Pi the run was fine-tuned from (none for a baseline); test_pi: the one its outputs went through
    own_pi = pi_of(checkpoint.get("denoiser_args"))
    applied = pi_of(denoiser_checkpoint.get("args")) if denoiser else None
    test_pi = "own" if own_pi and applied == own_pi else applied
    folder = os.path.dirname(args.model)
    harness.check_writable(folder, "the model's folder")  # its evaluations go beside it
    # a Pi of another noise than its dataset's (Table 5's random deletions) gets files of its own
    suffix = ("_denoised" if denoiser else "") + (f"_{noise['corruption']}" if noise["own_noise"] is False else "")
    names = {split: f"eval_{split}{suffix}" for split in splits}
    for name in names.values() if denoiser else ():
        check_same_pi(os.path.join(folder, name + ".json"), test_pi)
    print(f"{args.model} on {harness.device_name(device)}", file=sys.stderr)
    for split, name in names.items():
        sources = common.read_lines(os.path.join(args.data, f"{split}.src"))
        _, judge_split = load_judge(args.data, split)
        base = common.translate(model, tokenizer, sources, args.batch_size, meter(f"decoding {split}", sources))
        programs = common.denoise(denoiser, tokenizer, base, args.batch_size, error_free,
                                  meter(f"repairing {split}", base)) if denoiser else base
        verdicts = judge_split(programs)
        rows = [{"line": i + 1, "prediction": p, **({"base": b} if denoiser else {}), **v}
                for i, (p, b, v) in enumerate(zip(programs, base, verdicts))]
        common.write_lines(os.path.join(folder, name + ".jsonl"), map(json.dumps, rows))
        summary = dict(summarize(verdicts), dataset=dataset, method=method, layers=layers,
                       deep=checkpoint.get("deep", False), preset=checkpoint["args"].get("preset"), **noise,
                       denoised=bool(denoiser), split=split, authors_split=split in authors_splits, model=args.model,
                       denoiser=args.denoiser or ("(its own)" if denoiser else None), kept_epoch=kept_epoch,
                       seed=checkpoint["args"].get("seed"), settings=run_settings(checkpoint["args"]),
                       pi_seed=own_pi and own_pi["seed"], pi=own_pi and own_pi["settings"], test_pi=test_pi)
        with open(os.path.join(folder, name + ".json"), "w") as f:
            json.dump(summary, f, indent=1)
        print(result_line(split + " Pi(f(x))" * bool(denoiser), summary))


def check_same_pi(path: str, test_pi):
    """Refuses, before any work, to write over an evaluation made through another Pi."""
    if os.path.isfile(path):
        with open(path) as f:
            made = json.load(f)
        if made["test_pi"] != test_pi:
            raise common.UsageError(f"{path} holds an evaluation through another Pi ({made['denoiser']}): move it "
                                    "away to keep it")


# (init: a seed's own standard run; denoiser: a Pi, told apart by its own settings, the evaluations' "pi")
NOT_SETTINGS = ("seed", "device", "out", "init", "denoiser", "resume", "overwrite")


def run_settings(args: dict) -> dict:
    """What a run trained with but its seed, device and its own paths: runs that differ only by seed share these."""
    return {name: value for name, value in sorted(args.items()) if name not in NOT_SETTINGS}


def pi_of(args: dict | None) -> dict | None:
    """A Pi as an evaluation records it, from the args it trained with: its seed and settings (None: no Pi)."""
    return args and {"seed": args.get("seed"), "settings": run_settings(args)}


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
    """The runs' folder names: baseline_{0,1,2} for baseline_0, baseline_1 and baseline_2."""
    names = [r["run"] for r in group]
    stem = os.path.commonprefix(names)
    stem = stem[:stem.rfind("_") + 1]
    if len(names) == 1 or not stem:
        return ",".join(names)
    return f"{stem}{{{','.join(name[len(stem):] for name in names)}}}"


def by_seed(summaries: list[dict]) -> list[list[dict]]:
    """The table's rows: runs alike but for their seed and their Pi's (print_table), in the order of their seeds."""
    groups = {}
    for s in summaries:
        key = tuple(json.dumps(s.get(name), sort_keys=True) for name in (
            "dataset", "method", "layers", "deep", "preset", "corruption", "denoised", "split", "authors_split", "pi",
            "test_pi", "settings"))
        groups.setdefault(key, []).append(s)
    return [sorted(group, key=seeds_of) for group in groups.values()]


def seeds_of(s: dict) -> tuple:
    """(Pi's seed, the run's seed): a run's place among its group, and what pairs it with a run of another group."""
    return (s.get("pi_seed") or 0, s.get("seed") or 0)


def counted(n: int, group: list[dict]) -> str:
    """n runs (or pairs of runs) of a group, and what they differ by: 3 seeds, 3 Pi seeds, 1 run."""
    varies = [name for name, key in (("Pi seeds", "pi_seed"), ("seeds", "seed"))
              if len({s.get(key) for s in group}) > 1]
    return "1 run" if n == 1 else f"{n} {' and '.join(varies) or 'seeds'}"


METHOD_ORDER = ("baseline", "standard", "composed", "bart", "composed+bart", "backtranslation",
                "composed+backtranslation")
PAIRED = [(("standard", False), ("baseline", False)), (("baseline", True), ("baseline", False)),  # a - b (print_table)
          (("standard", True), ("standard", False)), (("composed", True), ("standard", False)),
          (("composed", True), ("standard", True)), (("composed", True), ("control", True)),
          (("control", True), ("standard", False)), (("control", True), ("standard", True))]


def print_table(args):
    """The README's layout in Markdown: a row per group of runs, each split's numbers and the paper's, then PAIRED's.
    A group (by_seed): runs alike in dataset, method, layers, deep, preset, corruption, denoised, split, authors_split,
    pi, test_pi and settings (all flags but seed, device, paths); a cell: mean ± the sample std over the group's seeds.
    A paired row: a - b for a pair of PAIRED (rows as (method or control, Pi?); control: --composed-weight 0) of groups
    comparable (same data, preset, layers, split, SAME_IN_PAIRS settings; Pis, where both have one), run minus run as
    seeds_of pairs them (Pi seed and seed; seed alone if one has no Pi). Stderr: runs that kept epoch 0, their start."""
    folders = {}
    for folder in args.table:  # each folder once, however it is spelled
        folders.setdefault(os.path.realpath(folder), folder)
    summaries, unevaluated, names = [], [], run_names(list(folders.values()))
    for folder in folders.values():
        paths, model = sorted(glob.glob(os.path.join(folder, "eval_*.json"))), os.path.join(folder, "model.pt")
        if not paths and os.path.isfile(model) and harness.load_checkpoint(model, ("role",))["role"] == "predictor":
            unevaluated.append(folder)
        for path in paths:
            with open(path) as f:
                summaries.append({**json.load(f), "run": names[folder]})
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
    kept_start = " ".join(dict.fromkeys(s["run"] for s in summaries if s.get("kept_epoch") == 0))  # each run once
    if kept_start:  # (their rows are the f they started from, and their pairs with it no finding)
        print(f"kept epoch 0, the f they started from (their rows are that f's; a +0.0 beside it, no finding): "
              f"{kept_start}; try more --epochs or --patience, or another --lr", file=sys.stderr)


def run_names(folders: list[str]) -> dict:
    """Each folder's last part, with as many parents as tell it from the others (runs/a/standard: a/standard)."""
    parts, names = {folder: os.path.abspath(folder).split(os.sep) for folder in folders}, {}
    for folder, mine in parts.items():
        k = 1
        while k < len(mine) and any(parts[other][-k:] == mine[-k:] for other in folders if other != folder):
            k += 1
        names[folder] = "/".join(mine[-k:])
    return names


def markdown_table(groups: list[list[dict]], paired: list) -> str:
    splits, rows = list(dict.fromkeys(split_name(group[0]) for group in groups)), {}
    for group in groups:  # a row: (its runs counted, {split: (our cells, the paper's)})
        paper = paper_numbers(group[0])
        rows.setdefault(row_name(group), (counted(len(group), group), {}))[1][split_name(group[0])] = (
            [spread([percent(r[key]) for r in group]) for key in ("compiled", "accuracy")],
            " / ".join(spread([x]) for x in paper) if paper != (None, None) else "")
    for a, b, (compiled, accuracy) in paired:
        minus = f"({row_name(b)})" if " + " in row_name(b) else row_name(b)
        of_a, of_b = paper_numbers(a[0]), paper_numbers(b[0])  # the paper's
        paper = " / ".join(f"{x - y:+.1f}" if None not in (x, y) else "-" for x, y in zip(of_a, of_b))
        rows.setdefault(f"{row_name(a)} - {minus}, paired", (counted(len(compiled), a), {}))[1][split_name(a[0])] = (
            [spread(compiled, "+"), spread(accuracy, "+")], paper if (None, None) not in (of_a, of_b) else "")
    # A task of one's own and the molecules are judged as valid and exact, and the paper has no numbers for them.
    task_like = all(g[0].get("dataset") in ("task", "molecules") for g in groups)
    judged, with_paper = (("valid", "exact"), False) if task_like else (("compiled", "accuracy"), True)
    lines = ["| runs (seeds) | " + " | ".join(f"{split} {judged[0]} | {split} {judged[1]}" for split in splits) +
             "".join(f" | paper: {split} compiled / accuracy" for split in splits if with_paper) + " |",
             "| --- " * (1 + (2 + with_paper) * len(splits)) + "|"]
    for name, (count, by_split) in rows.items():
        cells = [by_split.get(split, (["", ""], "")) for split in splits]
        ours, theirs = [cell for two, _ in cells for cell in two], [paper for _, paper in cells]
        lines.append(f"| {name} ({count}) | " + " | ".join(ours + theirs * with_paper) + " |")
    return "\n".join(lines)


# A pair compares methods: what a method sets (its rate, epochs, dropout, ...) may differ between its runs, not these.
SAME_IN_PAIRS = ("data", "labeled", "preset", "d_model", "n_heads", "layers", "d_ff", "weight_decay", "clip_norm",
                 "precision")


def comparable(a: dict, b: dict) -> bool:
    """Rows PAIRED compares: the same data, preset, size, split, SAME_IN_PAIRS settings, and Pis where both have one."""
    same = all(a.get(key) == b.get(key) for key in ("dataset", "preset", "layers", "split", "authors_split"))
    same &= all(None in (a.get(key), b.get(key)) or a[key] == b[key] for key in ("pi", "test_pi", "corruption"))
    if "settings" in a and "settings" in b:
        same &= all(a["settings"].get(name) == b["settings"].get(name) for name in SAME_IN_PAIRS)
    control = lambda s: s["method"] == "composed" and s.get("settings", {}).get("composed_weight") == 0  # noqa: E731
    return same and tuple(("control" if control(s) else s["method"], s["denoised"]) for s in (a, b)) in PAIRED


def seed_by_seed(a: list[dict], b: list[dict]) -> tuple[list, list] | None:
    """a minus b in points (compiled, accuracy), seed by seed (and Pi seed where both have a Pi); None: none shared."""
    both_have_a_pi = a[0].get("pi_seed") is not None and b[0].get("pi_seed") is not None
    key = seeds_of if both_have_a_pi else (lambda s: s["seed"])
    b_of = {key(s): s for s in b if s.get("seed") is not None}
    pairs = [(s, b_of[key(s)]) for s in a if s.get("seed") is not None and key(s) in b_of]
    return tuple([None if None in (x[key], y[key]) else 100 * (x[key] - y[key]) for x, y in pairs]
                 for key in ("compiled", "accuracy")) if pairs else None


def row_name(group: list[dict]) -> str:
    """The runs, + Pi where a test-time Pi repaired their outputs (composed: "f alone" where not); a Pi of another
    noise is named, and by its seed a test-time Pi that is not the one the runs were fine-tuned from."""
    s = group[0]
    named = [s["corruption"]] * (s.get("own_noise") is False) + ["Pi"]
    if isinstance(s.get("test_pi"), dict) and s.get("pi_seed") is not None:
        named.append(f"seed {s['test_pi']['seed']}")
    noise = f" ({' '.join(named)})" if len(named) > 1 else ""
    if s["method"].startswith("composed"):
        return group_label(group) + ("" if s["denoised"] else " f alone") + noise
    return group_label(group) + (" + Pi" if s["denoised"] else "") + noise


def split_name(s: dict) -> str:
    """test, or test* for the authors' own programs (make_sanstype.py --released)."""
    return s["split"] + "*" * s.get("authors_split", False)


def main(argv=None):
    parser = harness.ArgumentParser(prog="evaluate.py", description=__doc__)
    add = parser.add_argument
    add("model", nargs="?", help="a predictor checkpoint (runs/<name>/model.pt)")
    add("--denoiser", help="apply this denoiser to the predictions: Pi(f(x)) (composed models apply their own unless "
        "given another, or none); with --predictions, to the file's outputs")
    add("--splits", help="comma-separated (default: test, and ood where the data has it; SPoC: testw,testp)")
    add("--table", nargs="+", metavar="RUN_DIR", help="print the results found in these folders, in Markdown, the "
        "paper's beside them (+ Pi: with a test-time denoiser; f alone: a composed run's f without its Pi; test*: the "
        "authors' own test split, make_sanstype.py --released)")
    add("--predictions", help="judge this file of outputs instead of a model's")
    add("--split", help="with --predictions: the split they answer (default: test)")
    add("--json", help="with --predictions: also write the summary here")
    given = harness.ArgumentParser(prog="evaluate.py", add_help=False)  # --help shows the --data given as its default
    given.add_argument("--data")
    add("--data", default=given.parse_known_args(argv)[0].data, help="the data folder the model was trained on (not "
        "given: a model's own, as its checkpoint names it; the predictions': data/sanstype)")
    add("--batch-size", type=int, default=64, help="inputs decoded at once")
    add("--device", help="cuda or cpu (default: cuda when there is one)")
    args = parser.parse_args(argv)
    harness.check_ranges(parser, args, at_least_1="batch_size")
    if sum(map(bool, (args.model, args.table, args.predictions))) != 1:
        parser.error("give one of: a model checkpoint, --table RUN_DIR..., --predictions FILE")
    mode = "--table" if args.table else "--predictions" if args.predictions else "a model"
    work, not_applicable = {"--table": (print_table, ("denoiser", "splits", "split", "json", "device")),
                            "--predictions": (judge_predictions, ("splits",)),
                            "a model": (evaluate_model, ("split", "json"))}[mode]
    for name in not_applicable:
        if getattr(args, name) not in (None, False):
            parser.error(f"--{name} does not apply to {mode}")
    args.split, args.data = args.split or "test", args.data or (None if args.model else "data/sanstype")
    harness.run_main("evaluate.py", work, args)


if __name__ == "__main__":
    main()
