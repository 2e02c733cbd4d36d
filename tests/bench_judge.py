"""Benchmark: our batched, sandboxed judge against one g++ call per program, run one after
another (the way the paper's code judges), both cold (no cache). Checks the verdicts agree.

    python tests/bench_judge.py                                  # data/sanstype test split (500)
    python tests/bench_judge.py --data DIR --splits train,val    # e.g. the released SansType files
    python tests/bench_judge.py --corrupted                      # also a code-corrupted copy of each

Last line: judge_speedup=X.X
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402
import judge  # noqa: E402


def judge_one_by_one(programs, stdins, expected):
    """The reference: for each program, g++ then run, in a fresh folder, no batching, no cache."""
    verdicts = []
    with tempfile.TemporaryDirectory() as workdir:
        for i, (program, stdin, gold) in enumerate(zip(programs, stdins, expected)):
            source, binary = os.path.join(workdir, f"p{i}.cpp"), os.path.join(workdir, f"p{i}")
            with open(source, "w") as f:
                f.write(judge.to_cpp(program))
            compiled = subprocess.run(["g++", "-std=gnu++17", "-O0", "-w", source, "-o", binary],
                                      capture_output=True, timeout=60)
            if compiled.returncode != 0:
                verdicts.append("compile_error")
                continue
            try:
                run = subprocess.run([binary], input=(stdin + "\n").encode(), capture_output=True, timeout=5)
            except subprocess.TimeoutExpired:
                verdicts.append("timeout")
                continue
            if run.returncode != 0:
                verdicts.append("runtime_error")
            else:
                verdicts.append("correct" if run.stdout.decode().strip() == gold.strip() else "wrong_output")
    return verdicts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/sanstype")
    parser.add_argument("--splits", default="test")
    parser.add_argument("--limit", type=int, default=0, help="judge only the first N programs")
    parser.add_argument("--corrupted", action="store_true", help="add a code-corrupted copy of every program")
    args = parser.parse_args()

    programs, stdins, expected = [], [], []
    for split in args.splits.split(","):
        programs += common.read_lines(os.path.join(args.data, f"{split}.tgt"))
        stdins += common.read_lines(os.path.join(args.data, f"{split}.inp"))
        expected += common.read_lines(os.path.join(args.data, f"{split}.out"))
    if args.limit:
        programs, stdins, expected = programs[:args.limit], stdins[:args.limit], expected[:args.limit]
    if args.corrupted:
        rng = random.Random(0)
        programs += [common.corrupt_code(p, rng) for p in programs]
        stdins, expected = stdins * 2, expected * 2
    corrupted = ", + corrupted copies" if args.corrupted else ""
    print(f"{len(programs)} programs from {args.data} ({args.splits}{corrupted}), {os.cpu_count()} cores")

    start = time.time()
    ours = [v["verdict"] for v in judge.judge_programs(programs, stdins, expected, cache=False)]
    ours_seconds = time.time() - start
    print(f"batched judge:      {ours_seconds:7.1f} s  ({1000 * ours_seconds / len(programs):.0f} ms/program)")

    start = time.time()
    reference = judge_one_by_one(programs, stdins, expected)
    reference_seconds = time.time() - start
    print(f"one g++ per program: {reference_seconds:7.1f} s  "
          f"({1000 * reference_seconds / len(programs):.0f} ms/program)")

    differ = [i for i, (a, b) in enumerate(zip(ours, reference)) if a != b]
    counts = {v: ours.count(v) for v in sorted(set(ours))}
    print(f"verdicts: {counts}; identical on {len(programs) - len(differ)}/{len(programs)}")
    for i in differ[:5]:
        print(f"  differs at {i}: ours {ours[i]}, reference {reference[i]}: {programs[i][:120]}")
    print(f"judge_speedup={reference_seconds / ours_seconds:.1f}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
