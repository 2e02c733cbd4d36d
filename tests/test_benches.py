"""Every benchmark runs in the suite at a tiny size, on whatever CPU CI has, so that a bench that crashes fails CI
(the numbers themselves are for a person to read: README, EXPERIMENTS.md). tests/bench_gpu.py and
tests/bench_composed.py (which bench_gpu's stage composed runs) are dry-run by tests/test_bench_gpu.py."""
import dataclasses
import glob
import os
import subprocess
import sys

import pytest

import common
import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPOC = os.path.join(ROOT, "tests", "fixtures", "spoc")


def script(*args, cwd=ROOT):
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def sanstype(tmp_path_factory):
    out = tmp_path_factory.mktemp("sanstype")
    script("make_sanstype.py", "--out", str(out), "--labeled", "10", "--unlabeled", "20", "--num-eval", "4",
           "--vocab-size", "150")
    return out


@pytest.fixture(scope="module")
def spoc(tmp_path_factory):
    out = tmp_path_factory.mktemp("spoc")
    tsv = os.path.join(SPOC, "spoc-train-eval.tsv")
    script("make_spoc.py", "--spoc", SPOC, "--out", str(out), "--splits", "train,val", "--train",
           os.path.join(SPOC, "spoc-train-test.tsv"), "--val", tsv)
    return out


def untrained(data, role) -> str:
    """A model of the smoke preset's size with random weights, as a training script saves one: f or Pi for a bench."""
    spm = harness.read_data_folder(str(data))["spm"]
    config = common.TransformerConfig(vocab_size=common.load_tokenizer(spm).get_piece_size(), d_model=32, n_heads=2,
                                      encoder_layers=1, decoder_layers=1, d_ff=64)
    path = os.path.join(str(data), f"{role}.pt")
    harness.save_checkpoint(path, {"config": dataclasses.asdict(config), "spm": spm, "role": role,
                                  "model": common.Transformer(config).state_dict()})
    return path


def tiny_runs(sanstype, spoc) -> dict:
    """Each bench's tiny command, and what its last line must hold."""
    return {"bench_transformer.py": (["--tiny"], "mfu_cpu="),
            "bench_gradients.py": (["--data", str(sanstype), "--init", untrained(sanstype, "predictor"), "--denoiser",
                                    untrained(sanstype, "denoiser"), "--preset", "smoke", "--batches", "2", "--draws",
                                    "2"], "reinforce_vs_direct="),
            "bench_judge.py": (["--data", str(sanstype), "--limit", "3", "--corrupted"], "judge_speedup="),
            "bench_judge_spoc.py": (["--data", str(spoc), "--limit", "3"], "judge_speedup=")}


def test_every_bench_runs_at_a_tiny_size(sanstype, spoc):
    runs = tiny_runs(sanstype, spoc)
    benches = sorted(os.path.basename(path) for path in glob.glob(os.path.join(ROOT, "tests", "bench_*.py")))
    assert set(benches) == set(runs) | {"bench_gpu.py", "bench_composed.py"}, "a bench with no tiny run here"
    for bench, (flags, last_line) in runs.items():
        assert last_line in script(os.path.join("tests", bench), *flags), bench
