"""Make a data folder for a task of your own: pairs of texts (an input, its output), outputs without inputs, a judge.

    python make_task.py --pairs questions.txt queries.txt --unlabeled more_queries.txt --out data/sql
    python make_task.py --pairs in.txt out.txt --valid-command "python3 $PWD/check.py" --out data/mytask
    python make_task.py --splits my_splits/ --out data/mytask   # splits of your own: {train,val,test[,ood]}.{src,tgt}
    python make_task.py --dates --out data/dates            # a worked example: dates in words to YYYY-MM-DD
    python make_task.py --python-stdlib --out data/stdlib   # a worked example: Python docstrings to functions

--pairs: one text a line, an input and its output on the same line number (a line break written as a token, as
SansType's ` $ `), shuffled (--seed) into val, test and train; outputs are kept byte for byte. --valid-command: your
judge, run in --out as every later stage runs it (a script: by its full path): outputs in, 1 (valid) or 0 a line out.

Writes the format every make_*.py writes, one example a line and the same line number across a split's files:
    {train,val,test[,ood]}.src   inputs
    {train,val,test[,ood]}.tgt   outputs
    unlabeled.tgt                outputs without inputs, for the denoiser
    spm.model                    sentencepiece BPE over train's inputs and all training outputs, a digit a piece
    dataset.json                 {"dataset": "task", "valid_command": ...}: the later stages take SansType's presets
                                 (finetune.py's "task cpu" block waits longer), the generic noise (edits), this judge

--dates: "14 March 2021" (or 3 other ways) to 2021-03-14, ood "the 14th day of March in the year 2021". --python-stdlib:
this machine's standard library (PSF License), a docstring's first sentence to its function; ood: tkinter, idlelib.
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
import harness
import judge

# The worked examples' judges, written into their data folders as valid.py.
PYTHON_JUDGE = '''\
"""One output a line in, 1 (Python parses it) or 0 a line out: make_task.py --python-stdlib's judge."""
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
    parser = harness.ArgumentParser(prog="make_task.py", description=__doc__)
    source, add = parser.add_mutually_exclusive_group(required=True), parser.add_argument
    source.add_argument("--pairs", nargs=2, metavar=("SRC", "TGT"), help="inputs and outputs, one a line")
    source.add_argument("--splits", metavar="DIR", help="ready-made splits: DIR/{train,val,test[,ood]}.{src,tgt}")
    source.add_argument("--dates", action="store_true", help="the worked example of dates (see above)")
    source.add_argument("--python-stdlib", action="store_true", help="the worked example of Python (see above)")
    add("--unlabeled", help="outputs without inputs, one a line")
    add("--ood", nargs=2, metavar=("SRC", "TGT"), help="an out-of-distribution test split")
    add("--valid-command", help="your validity check: outputs in, 1 or 0 a line out, run in --out (give a full path)")
    add("--out", default="data/task", help="the data folder to write")
    add("--overwrite", action="store_true", help="replace --out's data (runs trained on it will no longer match it)")
    add("--val", type=int, default=500, help="pairs in val")
    add("--test", type=int, default=500, help="pairs in test (and at most as many in ood)")
    add("--labeled", type=int, default=0, help="pairs in train (0: every pair left)")
    add("--vocab-size", type=int, default=1000, help="joined sentencepiece BPE vocabulary")
    add("--seed", type=int, default=0, help="same seed, same bytes")
    args = parser.parse_args(argv)
    harness.check_ranges(parser, args, at_least_1="val test vocab_size", not_negative="labeled")
    example = "--python-stdlib" if args.python_stdlib else "--dates" if args.dates else None
    if example and (args.unlabeled or args.ood or args.valid_command):
        parser.error(f"{example} makes its own unlabeled outputs, ood split and judge")
    if args.splits and args.ood:
        parser.error("--splits takes its ood split from DIR/ood.{src,tgt}")
    ignored = [f"--{name}" for name in ("val", "test", "labeled", "seed")
               if args.splits and getattr(args, name) != parser.get_default(name)]
    if ignored:  # said, not silently ignored: the splits would not be what the flags ask
        parser.error(f"--splits takes DIR's splits as they are: {', '.join(ignored)} would do nothing")
    return args


def main(argv=None):
    harness.run_main("make_task.py", make_task, parse_args(argv))


def read_pairs(src: str, tgt: str) -> list[tuple[str, str]]:
    sources, targets = common.read_lines(src), common.read_lines(tgt)
    if len(sources) != len(targets):
        raise common.UsageError(f"{src} has {len(sources)} lines, {tgt} {len(targets)}: a pair a line in each")
    empty = [i + 1 for i, pair in enumerate(zip(sources, targets)) if "" in pair]  # (a line of spaces is a text)
    if empty:
        raise common.UsageError(f"{src}, {tgt}: line {empty[0]} is empty ({len(empty)} such lines)")
    return list(zip(sources, targets))


def make_task(args):
    harness.claim_data_folder(args.out, args.overwrite)
    splits, unlabeled = read_splits(args)
    judge_source = PYTHON_JUDGE if args.python_stdlib else DATES_JUDGE if args.dates else None  # (its valid.py)
    valid_command = "python3 valid.py" if judge_source else args.valid_command
    print(", ".join(f"{split} {len(examples)}" for split, examples in splits.items()) +
          f" pairs; unlabeled outputs {len(unlabeled)}" + (
              "" if unlabeled else f": the denoiser will learn from train's {len(splits['train'])} outputs alone "
              "(--unlabeled FILE, or DIR/unlabeled.tgt with --splits, gives it more)"))
    source = (f"the Python standard library of {sys.version.split()[0]} (PSF License)" if args.python_stdlib
              else "made by make_task.py --dates" if args.dates else args.splits or " ".join(args.pairs))
    facts = {"valid_command": valid_command, "seed": args.seed, "source": source}
    gold = [y for examples in splits.values() for _, y in examples]
    if valid_command:  # first: a command that cannot run is refused before any work
        facts["gold_valid"] = gold_validity(valid_command, gold, judge_source, args.out)
        print(f"the validity command passes {100 * facts['gold_valid']:.1f}% of the {len(gold)} gold outputs")
    spm_model = common.train_tokenizer([x for x, _ in splits["train"]] + [y for _, y in splits["train"]] + unlabeled,
                                       args.vocab_size, split_digits=True, verbatim=gold + unlabeled)
    tokenizer = common.load_tokenizer(spm_model)  # it must give each output back as it is, for a model to write it
    changed = [(y, back) for y in gold + unlabeled if (back := tokenizer.decode(tokenizer.encode(y))) != y]
    if changed:
        raise common.UsageError(f"{len(changed)} of the outputs would change in the tokenizer, e.g. {changed[0][0]!r} "
                                f"as {changed[0][1]!r}: write what changes otherwise (a ▁ is sentencepiece's space)")
    os.makedirs(args.out, exist_ok=True)
    if args.overwrite:  # the old data goes (an old ood split would be judged), the user's files stay
        harness.remove_made_files(args.out, keep=[*(args.pairs or ()), *(args.ood or ()), args.unlabeled])
        old_judge = os.path.join(args.out, "valid.py")  # a worked example's, unless the command runs it
        if os.path.isfile(old_judge) and "valid.py" not in (args.valid_command or "") and \
                open(old_judge).read() in (PYTHON_JUDGE, DATES_JUDGE):
            os.remove(old_judge)
    if judge_source:
        common.write_lines(os.path.join(args.out, "valid.py"), judge_source.splitlines())
    for split, examples in splits.items():
        common.write_lines(os.path.join(args.out, f"{split}.src"), [x for x, _ in examples])
        common.write_lines(os.path.join(args.out, f"{split}.tgt"), [y for _, y in examples])
    common.write_lines(os.path.join(args.out, "unlabeled.tgt"), unlabeled)
    with open(os.path.join(args.out, "spm.model"), "wb") as f:
        f.write(spm_model)
    harness.write_manifest(args.out, "task", corruption="edits", **facts)
    print(f"wrote {args.out}/{{{','.join(splits)}}}.{{src,tgt}}, unlabeled.tgt, spm.model, dataset.json"
          + ", valid.py" * bool(judge_source))


def gold_validity(command: str, gold: list[str], judge_source: str | None, out: str) -> float:
    """The share of the gold outputs the command passes, run in --out as later stages run it (made for it, if new)."""
    made = not os.path.isdir(out)  # (and then removed: bad input leaves nothing behind)
    os.makedirs(out, exist_ok=True)
    try:
        if judge_source:
            common.write_lines(os.path.join(out, "valid.py"), judge_source.splitlines())
        return round(sum(judge.check_validity(command, gold, out)) / len(gold), 4)
    except ValueError as error:
        raise common.UsageError(str(error)) from None
    finally:
        if made:
            shutil.rmtree(out)


def read_splits(args) -> tuple[dict, list]:
    """({split: [(input, output)]}, unlabeled outputs): --splits' as they are, else pairs shuffled into splits."""
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
        return splits, unlabeled
    if args.python_stdlib or args.dates:
        pairs, ood, unlabeled = python_stdlib() if args.python_stdlib else dates(args.seed)
    else:
        pairs, ood = read_pairs(*args.pairs), read_pairs(*args.ood) if args.ood else []
    random.Random(f"task-{args.seed}").shuffle(pairs)
    random.Random(f"task-ood-{args.seed}").shuffle(ood)
    if len(pairs) < args.val + args.test + max(args.labeled, 1):
        raise common.UsageError(f"{len(pairs)} pairs: too few for --val {args.val}, --test {args.test} and "
                                f"{args.labeled or 'at least one'} to train on")
    splits = {"train": pairs[args.val + args.test:][:args.labeled or None], "val": pairs[:args.val],
              "test": pairs[args.val:args.val + args.test], **({"ood": ood[:args.test]} if ood else {})}
    return splits, unlabeled


def dates(seed: int) -> tuple[list, list, list]:
    """(pairs, ood pairs, unlabeled outputs) of the dates example, every day of 1900-2099 used at most once."""
    rng = random.Random(f"dates-{seed}")
    days = [datetime.date(1900, 1, 1) + datetime.timedelta(n) for n in rng.sample(range(73049), 22500)]  # 1900-2099
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
        for name in sorted(name for name in files if name.endswith(".py") and not name.startswith("test_")):
            try:
                tree = ast.parse(open(os.path.join(folder, name), encoding="utf-8").read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    summary, code = docstring_summary(node), one_line_function(node)  # (the second edits node)
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
    doc = ast.get_docstring(function) or ""  # (none: an empty sentence, so None)
    sentence = re.split(r"(?<=\.)\s", " ".join(doc.split("\n\n")[0].split()))[0]
    return sentence if 3 <= len(sentence.split()) <= 30 else None


def one_line_function(function) -> str | None:
    """The function without decorators, docstring and comments on one line (` $ ` between lines, `~ ` per indent);
    None if longer than 60 words or if the line would not read back as the same function."""
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
