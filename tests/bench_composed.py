"""Benchmark composed fine-tuning on this machine, on one fixed batch of SansType training pairs:
  1. the wall time of a composed training step (sample, score with the frozen denoiser, REINFORCE
     and direct terms, backward, AdamW) against a standard one (cross entropy, backward, AdamW), and of a
     straight-through and a Gumbel-softmax step (the denoiser's backward pass too);
  2. the variance of the gradient of Eq. 1's first term: REINFORCE with the paper's estimator (no baseline)
     and our baselines (leave-one-out, batch), with 1 and 2 samples; straight-through and gumbel with 1
     sample, and the cosine of each one's mean gradient with REINFORCE's (unbiased) mean, a measure of bias;
  3. under the released code's estimator (--clamp padded-sample), the share of samples whose summed
     log p_theta(y'|x) over the padded batch stays above gamma, i.e. that get a REINFORCE gradient at all,
     in batches of the cpu preset's size (32 programs) and the paper preset's (176).

    python tests/bench_composed.py [--init runs/standard/model.pt] [--denoiser runs/denoiser/model.pt] [--device cuda]

Last line: composed_step_vs_standard=X.X straight_through_step_vs_standard=Y.Y, the first for finetune.py's
default number of samples. (Every baseline costs the same; the number of samples sets the step's cost.)
"""
import argparse
import itertools
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402
import finetune  # noqa: E402


def timed_steps(model, steps: dict, n, device) -> dict:
    """Median wall time of a training step for each loss function in `steps`. The kinds of step take
    turns, so that a change in the machine's speed during the run (other jobs, a slower core) hits
    each kind alike and the ratios stay fair."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    times = {name: [] for name in steps}
    for _ in range(n + 1):  # the first round warms up
        for name, step in steps.items():
            start = time.perf_counter()
            loss = step()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if device.type == "cuda":  # the GPU's work done, not only queued
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t[1:]) for name, t in times.items()}


def gradient_variance(model, loss_of_batch, n):
    """Mean squared distance of n gradient estimates from their mean (trace of the covariance)."""
    grads = []
    for _ in range(n):
        model.zero_grad(set_to_none=True)
        loss_of_batch().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    grads = torch.stack(grads)
    return (grads - grads.mean(0)).pow(2).sum(1).mean().item(), grads.mean(0)


def share_with_a_gradient(model, pairs, batch_size, n_batches, gamma=-50.0) -> float:
    """Of one sample per input, in n_batches random training batches, the share not clamped at gamma."""
    log_probs = finetune.padded_sample_log_probs(gamma)
    batches = common.batches(pairs, batch_size, random.Random(0))
    kept = total = 0
    for src, _, tgt_out in itertools.islice(batches, n_batches):
        src = src.to(next(model.parameters()).device)
        max_len = min(common.max_output_length(model, src), tgt_out.shape[1] + 16)  # as composed_loss samples
        sampled, finished = common.sample_outputs(model, src, 1, max_len)
        with torch.no_grad():
            kept += int((log_probs(model, *model.encode(src), sampled, finished) > gamma).sum())
        total += len(sampled)
    return kept / total


def ratio(a, b) -> str:
    """a / b to one decimal; a degenerate model (a smoke preset's, whose gradients may all be 0) gives 'n/a'."""
    return f"{a / b:.1f}" if b else "n/a"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/sanstype")
    parser.add_argument("--init", default="runs/standard/model.pt")
    parser.add_argument("--denoiser", default="runs/denoiser/model.pt")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--estimates", type=int, default=20, help="gradient estimates per estimator")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--share-batches", type=int, default=5, help="batches for the released estimator's share")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = common.pick_device(args.device)
    torch.manual_seed(0)

    spm = common.read_tokenizer_bytes(args.data)
    tokenizer = common.load_tokenizer(spm)
    model, _ = common.load_model(args.init, spm, args.data, "predictor")
    denoiser, _ = common.load_model(args.denoiser, spm, args.data, "denoiser")
    model, denoiser = model.to(device), denoiser.to(device)
    denoiser.eval().requires_grad_(False)
    pairs = finetune.load_pairs(args.data, "train", tokenizer)
    every_batch = list(common.batches(pairs, args.batch_size))  # sorted by length, as training sees them
    src, tgt_in, tgt_out = (t.to(device) for t in every_batch[len(every_batch) // 2])  # one of median length
    print(f"batch: {tuple(src.shape)} source, {tuple(tgt_out.shape)} target; "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; {device}, {args.threads} threads")

    default = finetune.parse_args(["--method", "composed", "--data", args.data])  # finetune.py's default estimator
    estimators = [(1, "none"), (1, "batch"), (2, "none"), (2, "leave-one-out"), (2, "batch")]

    reward, unclamped = common.denoiser_reward(denoiser), common.denoiser_reward(denoiser, gamma=None)

    def loss_of(samples, baseline, estimator="reinforce", **weights):
        return lambda: common.composed_loss(model, reward if estimator == "reinforce" else unclamped, src, tgt_in,
                                            tgt_out, samples=samples, baseline=baseline, estimator=estimator, **weights)

    relaxed = ("straight-through", "gumbel")
    model.train()
    times = timed_steps(model, {"standard": lambda: common.sequence_loss(model(src, tgt_in), tgt_out),
                                **{k: loss_of(k, "batch") for k in (1, 2)},
                                **{name: loss_of(1, "none", name) for name in relaxed}}, args.steps, device)
    standard, composed = times.pop("standard"), times
    print(f"standard step {1000 * standard:.0f} ms; composed step "
          + ", ".join(f"{k if k in relaxed else f'REINFORCE {k} sample' + 's' * (k > 1)} {1000 * t:.0f} ms "
                      f"({t / standard:.1f}x)" for k, t in composed.items()))

    model.eval()  # dropout off: the variance is the estimator's alone
    variances = {}
    for samples, baseline in estimators:
        first_term = loss_of(samples, baseline, composed_weight=1.0, lam=0.0)
        variances[samples, baseline] = variance, mean = gradient_variance(model, first_term, args.estimates)
        print(f"REINFORCE gradient, {samples} sample(s), baseline {baseline}: "
              f"variance {variance:.4g} (mean gradient norm {mean.norm():.4g})", flush=True)
    unbiased = variances[2, "leave-one-out"][1]
    for name in relaxed:
        variance, mean = gradient_variance(model, loss_of(1, "none", name, composed_weight=1.0, lam=0.0),
                                           args.estimates)
        cosine = torch.nn.functional.cosine_similarity(mean, unbiased, dim=0).item()
        print(f"{name} gradient, 1 sample: variance {variance:.4g} (mean gradient norm {mean.norm():.4g}, "
              f"cosine with REINFORCE's mean {cosine:.2f})", flush=True)
    variance = {estimator: v for estimator, (v, _) in variances.items()}
    print(f"variance_reduction_leave_one_out={ratio(variance[2, 'none'], variance[2, 'leave-one-out'])} (2 samples); "
          f"variance_reduction_batch={ratio(variance[1, 'none'], variance[1, 'batch'])} (1 sample)")
    shares = {size: share_with_a_gradient(model, pairs, size, args.share_batches) for size in (32, 176)}
    print("released estimator (--clamp padded-sample), samples with a gradient: "
          + ", ".join(f"{100 * share:.1f}% in batches of {size}" for size, share in shares.items()))
    print(f"default estimator: {default.samples} sample(s), baseline {default.reinforce_baseline}")
    print(f"composed_step_vs_standard={composed[default.samples] / standard:.1f} "
          f"straight_through_step_vs_standard={composed['straight-through'] / standard:.1f}")

if __name__ == "__main__":
    main()
