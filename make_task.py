"""Make a data folder for a task of your own: pairs of texts (an input, its output), outputs without inputs, a judge.

    python make_task.py --pairs questions.txt queries.txt --unlabeled more_queries.txt --out data/sql
    python make_task.py --pairs in.txt out.txt --valid-command "python3 check.py" --out data/mytask
    python make_task.py --splits my_splits/ --out data/mytask   # splits of your own: {train,val,test[,ood]}.{src,tgt}
    python make_task.py --dates --out data/dates            # a worked example: dates in words to YYYY-MM-DD
    python make_task.py --python-stdlib --out data/stdlib   # a worked example: Python docstrings to functions

Give your pairs as two files with one text a line, the same line number for an input and its output (a text must
fit on one line: write line breaks as a token of your own, as SansType writes ` $ `). They are shuffled (--seed)
into val (--val), test (--test) and train (the rest, or --labeled of it); --ood SRC TGT adds a split of inputs unlike
train's (a new style, a new domain) to test out of distribution. Splits you already have go in as they are with
--splits DIR (its train, val, test and, if there, ood .src/.tgt files, and unlabeled.tgt). --unlabeled names outputs
with no input: the denoiser learns from them and from train's outputs. --valid-command is your validity check, in
the role g++ plays for SansType and RDKit for molecules: a shell command, run in the data folder, that reads outputs
on its standard input, one a line, and prints one verdict a line, 1 (valid) or 0; evaluate.py reports its share as
"valid" (a model's lines read "valid ... exact ... words ...", and so does --table) and counts an output exact when it
equals the gold. It is tried first on the gold outputs as they will be written (after the tokenizer's
normalisation), in --out, before anything else is written there.

Writes the format every make_*.py writes, one example a line and the same line number across a split's files:
    {train,val,test[,ood]}.src   inputs
    {train,val,test[,ood]}.tgt   outputs
    unlabeled.tgt                outputs without inputs, for the denoiser
    spm.model                    sentencepiece BPE, one vocabulary for train's inputs and every training output,
                                 each digit a piece of its own (a model can then copy a number digit by digit)
    dataset.json                 {"dataset": "task", "valid_command": ..., ...}: the later stages take the task's
                                 presets (SansType's), the generic noise of the denoiser (train_denoiser.py
                                 --corruption edits) and this judge
Then train_denoiser.py, finetune.py and evaluate.py run on it with --data, as on SansType.

--dates makes a worked example with short, numeric outputs: a date in words in (one of four phrasings: "14 March
2021", "March 14, 2021", "the 14th of March 2021", "14/03/2021"), the date out as 2021-03-14, for days of 1900-2099;
ood phrases them in a way train never does ("the 14th day of March in the year 2021"); the unlabeled outputs are other
dates; the judge (valid.py) accepts a real calendar date written YYYY-MM-DD.

--python-stdlib makes the worked example from the Python standard library on this machine (its source: the PSF
License): the first sentence of a function's docstring in, the function out (without its docstring, decorators or
comments, as ast.unparse writes it; ` $ ` between lines, `~ ` per indentation level), for functions of at most 60
words. ood holds the functions of two packages kept out of the other splits (tkinter and idlelib: new APIs); the
functions without a usable docstring are the unlabeled outputs; the judge (valid.py, written beside the data) reads
each output back into Python and asks Python's parser.
"""
import ast
import datetime
import os
import random
import re
import shutil
import sys
import sysconfig

import common
import judge

# The worked example's judge, written into its data folder as valid.py: an output is valid if Python parses it.
PYTHON_JUDGE = '''"""One output a line in, 1 (Python parses it) or 0 a line out: make_task.py --python-stdlib's judge."""
import ast
import sys

for line in sys.stdin:
    lines = []
    for part in line.rstrip("\\n").split(" $ "):
        depth = 0
        while part.startswith("~ "):
            part, depth = part[2:], depth + 1
        lines.append("    " * depth + part)
    try:
        ast.parse("\\n".join(lines))
        print(1)
    except Exception:  # SyntaxError, and ValueError or RecursionError on stranger text
        print(0)
'''
DATES_JUDGE = '''"""One output a line in, 1 (a real date, YYYY-MM-DD) or 0 a line out: make_task.py --dates' judge."""
import datetime
import re
import sys

for line in sys.stdin:
    text = line.rstrip("\\n")
    try:
        valid = re.fullmatch(r"\\d{4}-\\d\\d-\\d\\d", text) is not None and bool(datetime.date.fromisoformat(text))
    except ValueError:  # a month or a day that does not exist
        valid = False
    print(int(valid))
'''
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
          "December")
HELD_OUT_PACKAGES = ("tkinter", "idlelib")  # the worked example's ood: packages the other splits never see
SKIPPED_FOLDERS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}


def parse_args(argv):
    parser = common.ArgumentParser(prog="make_task.py", description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--pairs", nargs=2, metavar=("SRC", "TGT"), help="inputs and outputs, one a line")
    source.add_argument("--splits", metavar="DIR", help="ready-made splits: DIR/{train,val,test[,ood]}.{src,tgt}")
    source.add_argument("--dates", action="store_true", help="the worked example of dates (see above)")
    source.add_argument("--python-stdlib", action="store_true", help="the worked example of Python (see above)")
    parser.add_argument("--unlabeled", help="outputs without inputs, one a line")
    parser.add_argument("--ood", nargs=2, metavar=("SRC", "TGT"), help="an out-of-distribution test split")
    parser.add_argument("--valid-command", help="your validity check: outputs in, 1 or 0 a line out (run in --out)")
    parser.add_argument("--out", default="data/task", help="the data folder to write")
    parser.add_argument("--overwrite", action="store_true", help="replace the data --out holds (runs trained on it "
                        "will no longer match it)")
    parser.add_argument("--val", type=int, default=500, help="pairs in val")
    parser.add_argument("--test", type=int, default=500, help="pairs in test (and at most as many in ood)")
    parser.add_argument("--labeled", type=int, default=0, help="pairs in train (0: every pair left)")
    parser.add_argument("--vocab-size", type=int, default=1000, help="joined sentencepiece BPE vocabulary")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same bytes")
    args = parser.parse_args(argv)
    common.check_ranges(parser, args, at_least_1="val test vocab_size", not_negative="labeled")
    example = "--python-stdlib" if args.python_stdlib else "--dates" if args.dates else None
    if example and (args.unlabeled or args.ood or args.valid_command):
        parser.error(f"{example} makes its own unlabeled outputs, ood split and judge")
    if args.splits and args.ood:
        parser.error("--splits takes its ood split from DIR/ood.{src,tgt}")
    ignored = [f"--{name}" for name in ("val", "test", "labeled", "seed")
               if getattr(args, name) != parser.get_default(name)]
    if args.splits and ignored:  # said, not silently ignored: the splits would not be what the flags ask
        parser.error(f"--splits takes DIR's splits as they are: {', '.join(ignored)} would do nothing")
    return args


def main(argv=None):
    common.run_main("make_task.py", make_task, parse_args(argv))


def read_pairs(src: str, tgt: str) -> list[tuple[str, str]]:
    sources, targets = common.read_lines(src), common.read_lines(tgt)
    if len(sources) != len(targets):
        raise common.UsageError(f"{src} has {len(sources)} lines, {tgt} {len(targets)}: a pair a line in each")
    empty = [i + 1 for i, pair in enumerate(zip(sources, targets)) if not all(text.strip() for text in pair)]
    if empty:
        raise common.UsageError(f"{src}, {tgt}: line {empty[0]} is empty ({len(empty)} such lines)")
    return list(zip(sources, targets))


def make_task(args):
    common.claim_data_folder(args.out, args.overwrite)
    splits, unlabeled, valid_command, judge_source = read_splits(args)
    print(", ".join(f"{split} {len(examples)}" for split, examples in splits.items()) +
          f" pairs; unlabeled outputs {len(unlabeled)}" + (
              "" if unlabeled else f": the denoiser will learn from train's {len(splits['train'])} outputs alone "
              "(--unlabeled FILE, or DIR/unlabeled.tgt with --splits, gives it more)"))
    facts = {"valid_command": valid_command, "seed": args.seed, "source": "the Python standard library of "
             f"{sys.version.split()[0]} (PSF License)" if args.python_stdlib else "made by make_task.py --dates"
             if args.dates else args.splits or " ".join(args.pairs)}
    train = splits["train"]
    spm_model = common.train_tokenizer([x for x, _ in train] + [y for _, y in train] + unlabeled,
                                       args.vocab_size, split_digits=True)
    # Texts as the tokenizer gives them back (runs of spaces made one, Unicode in its NFKC form): what a model can
    # output, so that a right output can equal the gold one exactly.
    tokenizer = common.load_tokenizer(spm_model)
    texts = {text for examples in splits.values() for pair in examples for text in pair} | set(unlabeled)
    normal = {text: tokenizer.decode(tokenizer.encode(text)) for text in texts}
    splits = {split: [(normal[x], normal[y]) for x, y in examples] for split, examples in splits.items()}
    unlabeled = [normal[y] for y in unlabeled]
    print(f"{sum(text != back for text, back in normal.items())} of {len(normal)} distinct texts changed by the "
          "tokenizer's normalisation (runs of spaces, Unicode forms)")
    if valid_command:  # the judge tried on the gold outputs first: a wrong command shows here, before any writing
        gold = [y for examples in splits.values() for _, y in examples]
        facts["gold_valid"] = gold_validity(valid_command, gold, judge_source, args.out)
        print(f"the validity command passes {100 * facts['gold_valid']:.1f}% of the {len(gold)} gold outputs")

    os.makedirs(args.out, exist_ok=True)
    for split, examples in splits.items():
        common.write_lines(os.path.join(args.out, f"{split}.src"), [x for x, _ in examples])
        common.write_lines(os.path.join(args.out, f"{split}.tgt"), [y for _, y in examples])
    common.write_lines(os.path.join(args.out, "unlabeled.tgt"), unlabeled)
    with open(os.path.join(args.out, "spm.model"), "wb") as f:
        f.write(spm_model)
    common.write_manifest(args.out, "task", **facts)
    print(f"wrote {args.out}/{{{','.join(splits)}}}.{{src,tgt}}, unlabeled.tgt, spm.model, dataset.json"
          + ", valid.py" * bool(judge_source))


def gold_validity(command: str, gold: list[str], judge_source: str | None, out: str) -> float:
    """The share of the gold outputs (as written) that the validity command passes, run where the later stages run it:
    in --out, beside a worked example's valid.py (written there first) or a judge of the user's. A command that fails
    leaves --out as it was: the folders made here removed, valid.py removed or given back its old text."""
    made = os.path.abspath(out)  # the first folder of --out's path that this makes (None: --out is there)
    while not os.path.isdir(os.path.dirname(made)):
        made = os.path.dirname(made)
    made, path = None if os.path.isdir(made) else made, os.path.join(out, "valid.py")
    os.makedirs(out, exist_ok=True)
    old_judge = open(path, "rb").read() if judge_source and os.path.isfile(path) else None  # (--overwrite)
    if judge_source:
        common.write_lines(path, judge_source.splitlines())
    try:
        return round(sum(judge.check_validity(command, gold, out)) / len(gold), 4)
    except ValueError as error:
        if made:
            shutil.rmtree(made)
        elif old_judge is not None:
            with open(path, "wb") as f:
                f.write(old_judge)
        elif judge_source:
            os.remove(path)
        raise common.UsageError(str(error)) from None


def read_splits(args) -> tuple[dict, list, str | None, str | None]:
    """(splits {name: [(input, output)]}, unlabeled outputs, the validity command, the source of a worked example's
    judge) from what the flags name: splits as given (--splits), or pairs shuffled into val, test and train."""
    in_splits = os.path.join(args.splits or "", "unlabeled.tgt")  # --splits DIR's own, unless --unlabeled names one
    unlabeled = common.read_lines(args.unlabeled or in_splits) if args.unlabeled or (
        args.splits and os.path.isfile(in_splits)) else []
    if args.splits:
        names = ["train", "val", "test"] + ["ood"] * os.path.isfile(os.path.join(args.splits, "ood.src"))
        splits = {name: read_pairs(*(os.path.join(args.splits, f"{name}.{side}") for side in ("src", "tgt")))
                  for name in names}
        empty = [name for name in names if not splits[name]]
        if empty:  # (evaluate.py would have no example to score)
            raise common.UsageError(f"{os.path.join(args.splits, empty[0])}.src is empty: every split needs a pair")
        return splits, unlabeled, args.valid_command, None
    if args.python_stdlib or args.dates:
        pairs, ood, unlabeled = python_stdlib() if args.python_stdlib else dates(args.seed)
        valid_command, judge_source = "python3 valid.py", PYTHON_JUDGE if args.python_stdlib else DATES_JUDGE
    else:
        pairs, ood = read_pairs(*args.pairs), read_pairs(*args.ood) if args.ood else []
        valid_command, judge_source = args.valid_command, None
    random.Random(f"task-{args.seed}").shuffle(pairs)
    random.Random(f"task-ood-{args.seed}").shuffle(ood)
    needed = args.val + args.test + max(args.labeled, 1)
    if len(pairs) < needed:
        raise common.UsageError(f"{len(pairs)} pairs: too few for --val {args.val}, --test {args.test} and "
                                f"{args.labeled or 'at least one'} to train on")
    train = pairs[args.val + args.test:][:args.labeled or None]
    splits = {"train": train, "val": pairs[:args.val], "test": pairs[args.val:args.val + args.test]}
    if ood:
        splits["ood"] = ood[:args.test]
    return splits, unlabeled, valid_command, judge_source


def dates(seed: int) -> tuple[list, list, list]:
    """(pairs, ood pairs, unlabeled outputs) of the dates example: 2000 days phrased in train's four ways, 500 in ood's
    way, and 20000 other days as outputs alone, every day of 1900-2099 used at most once."""
    rng = random.Random(f"dates-{seed}")
    first = datetime.date(1900, 1, 1)
    days = [first + datetime.timedelta(days=n) for n in rng.sample(range(73049), 22500)]  # to 2099-12-31
    phrasings = [lambda d: f"{d.day} {MONTHS[d.month - 1]} {d.year}",
                 lambda d: f"{MONTHS[d.month - 1]} {d.day}, {d.year}",
                 lambda d: f"the {ordinal(d.day)} of {MONTHS[d.month - 1]} {d.year}",
                 lambda d: f"{d.day:02d}/{d.month:02d}/{d.year}"]
    pairs = [(rng.choice(phrasings)(day), day.isoformat()) for day in days[:2000]]
    ood = [(f"the {ordinal(day.day)} day of {MONTHS[day.month - 1]} in the year {day.year}", day.isoformat())
           for day in days[2000:2500]]
    return pairs, ood, [day.isoformat() for day in days[2500:]]


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 < 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def python_stdlib() -> tuple[list, list, list]:
    """(pairs, ood pairs, unlabeled outputs) from the standard library's functions: (docstring summary, function)."""
    root = sysconfig.get_paths()["stdlib"]
    pairs, ood, unlabeled, seen = [], [], [], set()
    for folder, folders, files in os.walk(root):  # (in a fixed order: the folders pruned and sorted in place)
        folders[:] = sorted(name for name in folders if name not in SKIPPED_FOLDERS)
        package = os.path.relpath(folder, root).split(os.sep)[0]
        for name in sorted(files):
            if not name.endswith(".py") or name.startswith("test_"):
                continue
            try:
                tree = ast.parse(open(os.path.join(folder, name), encoding="utf-8").read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    summary, code = docstring_summary(node), one_line_function(node)
                    if code is None or code in seen:
                        continue
                    seen.add(code)
                    if summary is None:
                        unlabeled.append(code)
                    else:
                        (ood if package in HELD_OUT_PACKAGES else pairs).append((summary, code))
    return pairs, ood, unlabeled


def docstring_summary(function) -> str | None:
    """The first sentence of a function's docstring, on one line, if it has 3 to 30 words."""
    doc = ast.get_docstring(function)
    if not doc:
        return None
    paragraph = " ".join(doc.split("\n\n")[0].split())
    sentence = re.split(r"(?<=\.)\s", paragraph)[0]
    return sentence if 3 <= len(sentence.split()) <= 30 else None


def one_line_function(function) -> str | None:
    """The function without its decorators, docstring and comments, as ast.unparse writes it, on one line: ` $ `
    between lines, `~ ` per indentation level; None if longer than 60 words, or if that line would not read back
    as the same function (a $ or a line break inside a string, a line starting with ~)."""
    body = function.body[1:] if ast.get_docstring(function) else function.body
    function.decorator_list, function.body = [], body or [ast.Pass()]
    code = ast.unparse(function)
    lines = [line for line in code.split("\n") if line.strip()]  # (unparse puts a blank line before a nested def)
    indents = [(len(line) - len(line.lstrip(" "))) // 4 for line in lines]
    line = " $ ".join("~ " * indent + text.strip() for indent, text in zip(indents, lines))
    if len(line.split()) > 60 or "$" in code or any(text.strip().startswith("~") for text in lines):
        return None
    readback = "\n".join("    " * indent + text.strip() for indent, text in zip(indents, lines))
    try:
        same = ast.dump(ast.parse(readback)) == ast.dump(ast.parse(code))
    except SyntaxError:  # a line break inside a string: its lines no longer parse apart
        return None
    return line if same else None


if __name__ == "__main__":
    main()
