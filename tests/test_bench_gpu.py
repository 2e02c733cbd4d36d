"""tests/bench_gpu.py, the command a session lent a GPU runs once, dry-runs on the CPU at the smoke preset: every stage,
the README's Table 2 block as written included, and its summary line (torch.compile aside: a minute on 2 cores)."""
import os
import subprocess
import sys

import pytest
import torch

import bench_gpu  # (tests/ is on the path as pytest runs a test file)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_gpu_bench_dry_runs_every_stage_at_the_smoke_preset(tmp_path):
    """One call (the suite's time): the README's Table 2 block, the composed figures, and the fidelity stage, the
    issue's one GPU call for Pi seed 0: both Pi data, both precisions, every evaluation."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench_gpu.py"), "--preset", "smoke",
                             "--device", "cpu", "--stages", "data,steps,table2,composed,fidelity", "--work",
                             str(tmp_path), "--budget", "3000", "--seeds", "0", "--pi-seeds", "0"],
                            capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = dict(pair.split("=") for pair in result.stdout.strip().splitlines()[-1].split())
    assert summary.pop("device") == "cpu"
    assert set(summary) == {"slowest_step_vs_median", "step_while_next_epoch_vs_alone",
                            "step_while_next_epoch_in_thread_vs_alone", "pi_first_epoch_s", "pi_epoch_s", "pi_s",
                            "composed_step_vs_standard", "sampling_vs_standard", "composed_epoch_s", "greedy_test_s",
                            "table2_block_s", "fidelity_s"}
    assert all(float(value) > 0 for value in summary.values())
    # The block, for seed 0 alone (--seeds 0), trained every run, judged each with and without Pi, and tabled them.
    runs = tmp_path / "runs"
    assert {"baseline_0", "composed_0", "control_0", "denoiser", "standard_0"} <= set(os.listdir(runs))
    for method in ("baseline", "standard", "composed", "control"):
        assert sorted(os.listdir(runs / f"{method}_0")) == [
            "eval_ood.json", "eval_ood.jsonl", "eval_ood_denoised.json", "eval_ood_denoised.jsonl",
            "eval_test.json", "eval_test.jsonl", "eval_test_denoised.json", "eval_test_denoised.jsonl",
            "last.pt", "model.pt"], method
    assert "| composed_0 (1 run) |" in result.stdout and "| composed_0 f alone (1 run) |" in result.stdout
    assert "| composed_0 - (standard_0 + Pi), paired (1 run) |" in result.stdout
    # Fidelity's table: a row per method, Pi data and precision, then the paired differences.
    rows = [line for line in result.stdout.split("fidelity every evaluation")[1].splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows[2:]] == [
        f"| {method}, {d}, {x}" for method in ("standard", "baseline") for d in ("ours", "authors")
        for x in ("bf16", "fp32")] + ["| standard: authors - ours, bf16, paired", "| standard: authors - ours, fp32, paired",
                                     "| standard: fp32 - bf16, ours Pi, paired", "| standard: fp32 - bf16, authors Pi, paired"]
    assert all(len(row.split(" | ")) == 7 for row in rows)
    # Each Pi trained with the data it was told to, and each standard run in its precision, from its own Pi.
    pi = torch.load(runs / "pi_authors_0" / "model.pt", weights_only=False)
    assert pi["args"]["pi_data"] == "authors" and pi["args"]["precision"] == "fp32"
    standard = torch.load(runs / "standard_authors_0_bf16" / "model.pt", weights_only=False)
    assert standard["args"]["precision"] == "bf16" and standard["args"]["denoiser"].endswith("pi_authors_0/model.pt")


@pytest.mark.parametrize("fails, phase", [("train_denoiser.py", 0), ("--composed-weight 0", 1),
                                          ("evaluate.py runs/standard_1/model.pt --denoiser", 1)])
def test_the_table2_block_stops_and_names_a_failed_run(tmp_path, fails, phase):
    """The README's block waits on each of its jobs: one run that fails (here a stand-in python that exits 3 for it)
    stops the block, with a line that names it."""
    (tmp_path / "python").write_text(f'#!/bin/bash\ncase "$*" in *"{fails}"*) exit 3;; esac\n')
    (tmp_path / "python").chmod(0o755)
    definitions, *phases = bench_gpu.TABLE2_BLOCK.replace("python make_sanstype.py\n", "").split("\n\n")
    script = f"set -e\nPATH={tmp_path}:$PATH\n{definitions}\n{phases[phase]}\necho the block went on"
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0 and "the block went on" not in result.stdout
    assert "failed (exit 3): " in result.stderr and fails in result.stderr.split("failed (exit 3): ")[1].splitlines()[0]


def test_the_seeds_of_the_block_and_of_fidelitys_pi_are_two_flags():
    """--seeds is the Table 2 block's whatever other stages run; fidelity's Pi seeds are --pi-seeds."""
    both = bench_gpu.parse_args(["--stages", "data,table2,fidelity"])
    assert (both.seeds, both.pi_seeds) == ("0 1 2", "0 1")
    assert bench_gpu.parse_args(["--stages", "data,table2", "--seeds", "4"]).seeds == "4"
