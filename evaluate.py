"""Judge predicted programs the way the paper does: the share that compiles, and the share that
prints the gold output on the test's input (accuracy).

    python evaluate.py --predictions preds.txt --data data/sanstype --split test [--json summary.json]

`preds.txt` holds one program per line, in the SansType code format and in the order of the
split's `.inp`/`.out` files. One JSON verdict per program goes to `preds.txt.verdicts.jsonl`:
correct, wrong_output, compile_error (with the compiler's first error), runtime_error, timeout.
"""
import argparse
import json
import os
import sys

import common


def read_lines(path: str) -> list[str]:
    """The lines of a SansType file; a final newline does not make an extra empty line."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def load_predictions_and_split(predictions: str, data: str, split: str):
    """(programs, stdins, gold outputs); ValueError with a one-line reason on bad input."""
    paths = {"predictions": predictions, "inputs": os.path.join(data, f"{split}.inp"),
             "outputs": os.path.join(data, f"{split}.out")}
    for what, path in paths.items():
        if not os.path.isfile(path):
            raise ValueError(f"missing {what} file: {path}")
    programs, stdins, expected = (read_lines(path) for path in paths.values())
    if not programs:
        raise ValueError(f"empty predictions file: {predictions}")
    if not len(programs) == len(stdins) == len(expected):
        raise ValueError(f"line counts differ: {len(programs)} predictions, {len(stdins)} lines in "
                         f"{paths['inputs']}, {len(expected)} in {paths['outputs']}")
    return programs, stdins, expected


def summarize(verdicts: list[dict]) -> dict:
    """Fractions in [0, 1]: compiled counts every program that got past g++."""
    n = len(verdicts)
    return {"n": n,
            "compiled": sum(v["verdict"] != "compile_error" for v in verdicts) / n,
            "accuracy": sum(v["verdict"] == "correct" for v in verdicts) / n}


def write_jsonl(path: str, rows: list[dict]):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--predictions", required=True, help="one predicted program per line")
    parser.add_argument("--data", default="data/sanstype", help="folder of the split's .inp/.out files")
    parser.add_argument("--split", default="test", help="test, ood, val or train")
    parser.add_argument("--json", help="also write {n, compiled, accuracy} (fractions) here")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cores to judge on")
    args = parser.parse_args(argv)
    try:
        programs, stdins, expected = load_predictions_and_split(args.predictions, args.data, args.split)
    except (ValueError, UnicodeDecodeError) as error:
        parser.exit(2, f"evaluate.py: error: {error}\n")

    try:
        verdicts = common.judge_programs(programs, stdins, expected, progress=f"{args.split} programs", jobs=args.jobs)
    except RuntimeError as error:  # no g++, or the sandbox could not start
        parser.exit(2, f"evaluate.py: error: {error}\n")
    write_jsonl(args.predictions + ".verdicts.jsonl", [{"line": i + 1, **v} for i, v in enumerate(verdicts)])
    summary = summarize(verdicts)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f)
    print(f"{args.split}: n={summary['n']}  compiled {100 * summary['compiled']:.1f}%  "
          f"accuracy {100 * summary['accuracy']:.1f}%")


if __name__ == "__main__":
    main()
