"""Prepare SPoC (Kulal et al., 2019), the paper's real pseudocode-to-code dataset (Section 6.2, Appendix E).

    python make_spoc.py --spoc spoc                 # the release's folder (train/, test/, testcases/) -> data/spoc
    python make_spoc.py --spoc S --splits train,val,testw --train S/spoc-train-test.tsv --val S/spoc-train-eval.tsv \\
        --testw S/spoc-train-eval.tsv --out data/spoc   # e.g. the two-file sample: train on one file, test on the other

SPoC (https://sumith1896.github.io/spoc/, CC BY 4.0): C++ from codeforces.com, crowd-written pseudocode per line.
Splits: train (less programs over --max-chars characters: Appendix E), val, testw (new workers), testp (new problems).

Writes, one program per line and the same line number across a split's files (the paper's format):
    {split}.src          pseudocode lines with their indentation, joined by ` $ `; lines without pseudocode
                         (`int main() {`, `}`) are left out:   'TAB1 read n $ TAB1 print n squared'
    {split}.tgt          code: C++ tokens separated by spaces, one `~` per indentation level, lines joined by
                         ` $ `:   'int main ( ) { $ ~ int n ; $ ~ cin >> n ; $ ~ cout << n * n ; $ }'
    {split}.ids          probid, subid and workerid of each program, tab-separated
    dataset.json         {"dataset": "spoc", ...}: tells the other stages which presets, noise and judge apply
    {split}.cases.jsonl  the hidden test cases of the split's problems, each problem once:
                         {"probid": "478A", "cases": [[stdin, expected stdout], ...]}
    unlabeled.tgt        with --unlabeled TSV: more code for the denoiser, in train's format and length filter
    spm.model            a joined sentencepiece BPE (--vocab-size pieces, fewer when the data cannot support them)
                         trained on the train split's pseudocode and code (and the unlabeled code)
"""
import json
import os
import re

import common
import harness

SPLITS = ("train", "val", "testw", "testp")
LAYOUT = {"train": ["train/split/spoc-train-train.tsv", "train/spoc-train.tsv"],  # a split's files, preferred first
          "val": ["train/split/spoc-train-eval.tsv"],
          "testw": ["test/spoc-testw.tsv"], "testp": ["test/spoc-testp.tsv"]}
TSV_HEADER = ["text", "code", "workerid", "probid", "subid", "line", "indent"]

# C++ tokens: literals whole, so that the tokens joined by spaces give the program back (judge.spoc_source); comments
# dropped; the operator `~` glued to its operand, so that a lone `~` always means indentation.
CPP_TOKEN = re.compile(r"""
      //.* | /\*.*?\*/                               # comments (dropped)
    | (?:u8|[uUL])?"(?:\\.|[^"\\])*"                 # string literal
    | (?:u8|[uUL])?'(?:\\.|[^'\\])*'                 # character literal
    | \.?\d(?:[eEpP][+-]|'\w|[\w.])*                 # number: 1e-7, 0x1F, 10LL, 1'000
    | [A-Za-z_$][\w$]*                               # identifier or keyword (g++ allows $)
    | >>= | <<= | <=> | ->\* | \.\.\. | :: | -> | \+\+ | -- | << | >> | && | \|\| | [-+*/%&|^!=<>]= | \#\#
    | \S""", re.VERBOSE)


def code_line(code: str, indent: int) -> str:
    """A line of C++ as a `~` per indentation level, then its tokens, separated by spaces."""
    if code.lstrip().startswith("#"):  # a preprocessor line: its spaces matter (`#define f(x)`), keep it
        tokens = code.split()
    else:
        tokens = [t for t in CPP_TOKEN.findall(code) if not t.startswith(("//", "/*"))]
        for i in reversed(range(len(tokens) - 1)):
            if tokens[i] == "~":
                tokens[i:i + 2] = ["~" + tokens[i + 1]]
    return " ".join(["~"] * indent + tokens)


def split_file(args, split: str) -> str:
    """The TSV file of a split: the one --<split> names, else the first of LAYOUT found under --spoc."""
    given = getattr(args, split)
    if given and not os.path.isfile(given):
        raise common.UsageError(f"missing file: {given} (--{split})")
    candidates = [os.path.join(args.spoc, path) for path in LAYOUT[split]]
    found = given or next((path for path in candidates if os.path.isfile(path)), None)
    if not found:
        raise common.UsageError(f"missing file: {candidates[-1]} (the {split} split: name one with --{split}, "
                                "or leave the split out with --splits)")
    return found


def read_programs(path: str) -> list[dict]:
    """The programs of a SPoC TSV: {probid, subid, workerid, src, tgt}. A program starts where `line` is 0."""
    rows = [line.split("\t") for line in common.read_lines(path)]
    if not rows or rows[0] != TSV_HEADER:
        raise common.UsageError(f"{path}: not a SPoC TSV file (its first line must be the header "
                                f"{' '.join(TSV_HEADER)})")
    programs = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(TSV_HEADER) or not row[5].isdigit() or not row[6].isdigit():
            raise common.UsageError(f"{path}:{number}: expected 7 tab-separated columns ending in the line "
                                    "number and the indentation")
        text, code, workerid, probid, subid, line, indent = row
        if line == "0":
            programs.append({"probid": probid, "subid": subid, "workerid": workerid, "src": [], "tgt": []})
        elif not programs:
            raise common.UsageError(f"{path}:{number}: the first program does not start at line 0")
        if text.strip():
            programs[-1]["src"].append(f"TAB{int(indent)} " + " ".join(text.split()))
        programs[-1]["tgt"].append(code_line(code, int(indent)))
    return [dict(p, src=" $ ".join(p["src"]), tgt=" $ ".join(p["tgt"])) for p in programs]


def read_test_cases(testcases: str, probid: str) -> list[tuple[str, str]]:
    """A problem's hidden test cases: (stdin without its last newline, expected stdout) pairs."""
    path = os.path.join(testcases, probid, f"{probid}_testcases_hidden.txt")
    if not os.path.isfile(path):
        raise common.UsageError(f"missing file: {path} (the test cases of problem {probid})")
    with open(path, encoding="utf-8") as f:
        cases = re.findall(r"(.*?)\n?###ENDINPUT###\n(.*?)###ENDOUTPUT###\n?", f.read(), re.DOTALL)
    if not cases:
        raise common.UsageError(f"{path}: no test cases (expected input, ###ENDINPUT###, output, ###ENDOUTPUT###)")
    return cases


def make_spoc(args):
    harness.claim_data_folder(args.out, args.overwrite)
    splits = args.splits.split(",")
    paths = {split: split_file(args, split) for split in splits}  # every missing file before any work
    testcases = args.testcases or os.path.join(args.spoc, "testcases")
    if not os.path.isdir(testcases):
        raise common.UsageError(f"missing folder: {testcases} (the test cases: name it with --testcases)")
    data, cases = {}, {}
    for split in splits:
        programs = read_programs(paths[split])
        if split == "train":
            kept = [p for p in programs if max(len(p["src"]), len(p["tgt"])) <= args.max_chars]
            print(f"train: kept {len(kept)} of {len(programs)} programs with at most {args.max_chars} characters "
                  "of pseudocode and of code")
            programs = kept
        print(f"{split}: {len(programs)} programs of {len({p['probid'] for p in programs})} problems from "
              f"{paths[split]}")
        data[split] = programs
        cases |= {p["probid"]: read_test_cases(testcases, p["probid"]) for p in programs if p["probid"] not in cases}
    unlabeled = []
    if args.unlabeled:  # code without pseudocode, for the denoiser: the same filter as train
        unlabeled = [p["tgt"] for p in read_programs(args.unlabeled) if len(p["tgt"]) <= args.max_chars]
        print(f"unlabeled: {len(unlabeled)} programs with at most {args.max_chars} characters of code")
    os.makedirs(args.out, exist_ok=True)  # only now: bad input leaves nothing behind
    if args.overwrite and "train" in data:  # a new tokenizer: no old split matches it (without train, splits are added)
        harness.remove_made_files(args.out)
    for split, programs in data.items():
        problems = dict.fromkeys(p["probid"] for p in programs)  # each once, in order
        files = {"src": [p["src"] for p in programs], "tgt": [p["tgt"] for p in programs],
                 "ids": ["\t".join((p["probid"], p["subid"], p["workerid"])) for p in programs],
                 "cases.jsonl": [json.dumps({"probid": probid, "cases": cases[probid]}) for probid in problems]}
        for ext, lines in files.items():
            common.write_lines(os.path.join(args.out, f"{split}.{ext}"), lines)
    if unlabeled:
        common.write_lines(os.path.join(args.out, "unlabeled.tgt"), unlabeled)
    if "train" in data:
        train = data["train"]
        spm = common.train_tokenizer([p["src"] for p in train] + [p["tgt"] for p in train] + unlabeled, args.vocab_size)
        with open(os.path.join(args.out, "spm.model"), "wb") as f:
            f.write(spm)
    harness.write_manifest(args.out, "spoc", corruption="line", error_detector="compile", splits=splits)
    print(f"wrote {args.out}/{{{','.join(splits)}}}.{{src,tgt,ids,cases.jsonl}}" + ", spm.model" * ("train" in data)
          + ", dataset.json")


def parse_args(argv):
    parser = harness.ArgumentParser(prog="make_spoc.py", description=__doc__)
    add = parser.add_argument
    add("--spoc", required=True, help="the SPoC release's folder (train/, test/, testcases/)")
    add("--out", default="data/spoc", help="output directory")
    add("--overwrite", action="store_true", help="replace --out's data (runs trained on it will no longer match it)")
    add("--splits", default=",".join(SPLITS), help="the splits to write")
    for split in SPLITS:
        add(f"--{split}", metavar="TSV", help=f"read the {split} split from this file")
    add("--testcases", help="the test cases' folder (default: SPOC/testcases)")
    add("--unlabeled", metavar="TSV", help="more code for the denoiser: a TSV as the release's, text may be empty")
    add("--max-chars", type=int, default=1000, help="drop longer train programs (characters)")
    add("--vocab-size", type=int, default=10000, help="joined sentencepiece BPE vocabulary")
    args = parser.parse_args(argv)
    harness.check_ranges(parser, args, at_least_1="max_chars vocab_size")
    unknown = set(args.splits.split(",")) - set(SPLITS)
    if unknown:
        parser.error(f"unknown split {', '.join(sorted(unknown))} in --splits (known: {', '.join(SPLITS)})")
    return args


def main(argv=None):
    harness.run_main("make_spoc.py", make_spoc, parse_args(argv))


if __name__ == "__main__":
    main()
