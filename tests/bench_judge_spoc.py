"""Benchmark: the SPoC judge's fast path (precompiled prelude, shared translation units for main-only
programs, gold linker, all cores) against one plain g++ call per program, one after another, both in the same
sandbox and on every hidden test case. Checks that the verdicts agree.

    python make_spoc.py ...                                    # data/spoc (see its docstring)
    python tests/bench_judge_spoc.py --data data/spoc --split val --limit 60

Last line: judge_speedup=X.X
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402
import judge  # noqa: E402
import spoc  # noqa: E402


def timed(programs, cases, **kwargs):
    start = time.time()
    verdicts = judge.judge_spoc_programs(programs, cases, **kwargs)
    return verdicts, time.time() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/spoc")
    parser.add_argument("--split", default="val")
    parser.add_argument("--limit", type=int, default=60, help="judge the first N programs of the split")
    args = parser.parse_args()

    programs = common.read_lines(os.path.join(args.data, f"{args.split}.tgt"))[:args.limit]
    cases = spoc.read_cases(args.data, args.split)[:args.limit]
    plain, plain_seconds = timed(programs, cases, fast=False, jobs=1)
    fast, fast_seconds = timed(programs, cases)  # includes building the precompiled header
    assert fast == plain, [(i, a, b) for i, (a, b) in enumerate(zip(fast, plain)) if a != b]
    correct = sum(v["verdict"] == "correct" for v in fast)
    print(f"{len(programs)} programs ({correct} correct), {sum(map(len, cases))} test cases: one plain g++ per "
          f"program {plain_seconds:.1f} s, fast path {fast_seconds:.1f} s, identical verdicts")
    print(f"judge_speedup={plain_seconds / fast_seconds:.1f}")


if __name__ == "__main__":
    main()
