"""Benchmark composed fine-tuning on this machine, on one fixed batch of SansType training pairs:
  1. the wall time of a composed training step (sample, score with the frozen denoiser, REINFORCE
     and direct terms, backward, AdamW) against a standard one (cross entropy, backward, AdamW), and of a
     straight-through and a Gumbel-softmax step (the denoiser's backward pass too);
  2. the variance of the gradient of Eq. 1's first term: REINFORCE with the paper's estimator (no baseline)
     and our baselines (leave-one-out, batch), with 1 and 2 samples; straight-through and gumbel with 1
     sample, and the cosine of each one's mean gradient with REINFORCE's (unbiased) mean, a measure of bias;
  3. under the released code's estimator (--clamp padded-sample), the share of samples whose summed
     log p_theta(y'|x) over the padded batch stays above gamma, i.e. that get a REINFORCE gradient at all,
     in batches of the cpu preset's size (32 programs) and the paper preset's (176);
  4. wall times of whole pieces of the chain: greedy decoding of the test split's programs (evaluate.py's
     f(x)); one composed epoch over the labeled pairs with its validation (greedy decoding of val, Pi scoring
     it); one epoch of the denoiser's training on freshly corrupted programs (extrapolated from
     --denoiser-batches of them; 0: all).

    python tests/bench_composed.py [--init runs/standard/model.pt] [--denoiser runs/denoiser/model.pt] [--device cuda]
    python tests/bench_composed.py --batch-size 176 --precision bf16 --device cuda   # the paper preset on a GPU

Last line: composed_step_vs_standard=X.X straight_through_step_vs_standard=Y.Y sampling_vs_standard=U.U (sampling y'
alone) greedy_test_s=Z composed_epoch_s=W denoiser_epoch_s=V (each name ending in _cuda on a GPU), the first for
finetune.py's default number of samples.
(Every baseline costs the same; the number of samples sets the step's cost.)
"""
import argparse
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402
import finetune  # noqa: E402


def wait(device):
    """The device's queued work done: a GPU runs behind the host, and a timing must include its work."""
    if device.type == "cuda":
        torch.cuda.synchronize()


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
            wait(device)
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
    kept = total = 0
    for src, _, tgt_out in common.batches(pairs, batch_size, random.Random(0))[:n_batches]:
        src = src.to(next(model.parameters()).device)
        max_len = min(common.max_output_length(model, src), tgt_out.shape[1] + 16)  # as composed_loss samples
        sampled = common.sample_outputs(model, src, 1, max_len)
        chosen = torch.nn.functional.pad(sampled.tokens, (0, 1), value=common.PAD_ID)
        with torch.no_grad():
            f_logits = model.decode(common.shift_right(common.with_eos(sampled)), *model.encode(src)).float()
            log_p = common.released_sample_log_probs(f_logits, chosen, sampled.lengths, max_len)
        kept += int((log_p > gamma).sum())
        total += len(chosen)
    return kept / total


def seconds(work, device) -> float:
    wait(device)
    start = time.perf_counter()
    work()
    wait(device)
    return time.perf_counter() - start


def composed_epoch(model, denoiser, pairs, val_pairs, args, device):
    """One epoch of composed fine-tuning as finetune.py runs it (finetune.py's estimator, AdamW, the epoch's
    batches), then its validation."""
    default = finetune.parse_args(["--method", "composed", "--data", args.data])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    val_batches = common.device_batches(val_pairs, args.batch_size, device)
    model.train()
    for batch in common.batches(pairs, args.batch_size, random.Random(0)):
        src, tgt_in, tgt_out = (t.to(device) for t in batch)
        with common.autocast(args.precision, device):
            loss = common.composed_loss(model, denoiser, src, tgt_in, tgt_out, default, 0.0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with common.autocast(args.precision, device):
        common.composed_validation_loss(model, denoiser, val_batches, None, default.gamma)


def denoiser_epoch(denoiser, programs, tokenizer, args, device) -> float:
    """Seconds for one epoch of the denoiser's training (train_denoiser.py's loop: fresh corruptions, batches,
    AdamW), extrapolated from its first --denoiser-batches batches."""
    rng = random.Random(0)
    pairs = list(zip(tokenizer.encode([common.corrupt_code(code, rng) for code in programs]),
                     tokenizer.encode(programs)))
    epoch_batches = common.batches(pairs, args.batch_size, random.Random(0))
    timed = epoch_batches[:args.denoiser_batches or len(epoch_batches)]
    optimizer = torch.optim.AdamW(denoiser.parameters(), lr=1e-5, fused=device.type == "cuda")
    denoiser.train().requires_grad_(True)

    def steps():
        for batch in timed:
            src, tgt_in, tgt_out = (t.to(device) for t in batch)
            with common.autocast(args.precision, device):
                loss = common.sequence_loss(denoiser(src, tgt_in), tgt_out)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return seconds(steps, device) * len(epoch_batches) / len(timed)


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
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="(default: OMP_NUM_THREADS, or "
                        "all cores)")
    parser.add_argument("--share-batches", type=int, default=5, help="batches for the released estimator's share")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="of every timed piece")
    parser.add_argument("--denoiser-batches", type=int, default=20, help="of the denoiser's epoch, timed (0: all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = common.pick_device(args.device)
    torch.manual_seed(0)

    spm = common.read_tokenizer_bytes(args.data)
    tokenizer = common.load_tokenizer(spm)
    model, _ = common.load_model(args.init, spm, f"{args.data}/spm.model", "predictor")
    denoiser, _ = common.load_model(args.denoiser, spm, f"{args.data}/spm.model", "denoiser")
    model, denoiser = model.to(device), denoiser.to(device)
    denoiser.eval().requires_grad_(False)
    pairs = finetune.load_pairs(args.data, "train", tokenizer)
    every_batch = list(common.batches(pairs, args.batch_size))  # sorted by length, as training sees them
    src, tgt_in, tgt_out = (t.to(device) for t in every_batch[len(every_batch) // 2])  # one of median length
    print(f"batch: {tuple(src.shape)} source, {tuple(tgt_out.shape)} target; "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; {device}, {args.threads} threads")

    default = finetune.parse_args(["--method", "composed", "--data", args.data])  # finetune.py's default estimator
    estimators = [(1, "none"), (1, "batch"), (2, "none"), (2, "leave-one-out"), (2, "batch")]

    def loss_of(samples, baseline, estimator="reinforce", **weights):
        settings = argparse.Namespace(**{**vars(default), "samples": samples, "reinforce_baseline": baseline,
                                         "estimator": estimator, **weights})

        def loss():
            with common.autocast(args.precision, device):
                return common.composed_loss(model, denoiser, src, tgt_in, tgt_out, settings, 0.0)
        return loss

    def standard_loss():
        with common.autocast(args.precision, device):
            return common.sequence_loss(model(src, tgt_in), tgt_out)

    relaxed = ("straight-through", "gumbel")
    model.train()
    times = timed_steps(model, {"standard": standard_loss, **{k: loss_of(k, "batch") for k in (1, 2)},
                                **{name: loss_of(1, "none", name) for name in relaxed}}, args.steps, device)
    standard, composed = times.pop("standard"), times
    print(f"standard step {1000 * standard:.0f} ms; composed step "
          + ", ".join(f"{k if k in relaxed else f'REINFORCE {k} sample' + 's' * (k > 1)} {1000 * t:.0f} ms "
                      f"({t / standard:.1f}x)" for k, t in composed.items()))
    max_len = min(common.max_output_length(model, src), tgt_out.shape[1] + 16)  # as composed_loss samples

    def sampling():
        with common.autocast(args.precision, device):
            return common.sample_outputs(model, src, default.samples, max_len)
    sampling_s = statistics.median(seconds(sampling, device) for _ in range(args.steps + 1))
    print(f"of which sampling y' alone: {1000 * sampling_s:.0f} ms ({sampling_s / standard:.1f} standard steps; "
          f"{max_len} tokens at most, the longest sample {int(sampling().lengths.max())})", flush=True)

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

    test_sources = common.read_lines(os.path.join(args.data, "test.src"))
    with common.autocast(args.precision, device):
        common.translate(model, tokenizer, test_sources[:args.batch_size], args.batch_size)  # warm-up (CUDA graphs)
        greedy = seconds(lambda: common.translate(model, tokenizer, test_sources, args.batch_size), device)
        composed_epoch(model, denoiser, pairs[:args.batch_size], finetune.load_pairs(args.data, "val", tokenizer)[:16],
                       args, device)  # warm-up
        composed_epoch_s = seconds(lambda: composed_epoch(model, denoiser, pairs, finetune.load_pairs(
            args.data, "val", tokenizer), args, device), device)
    print(f"greedy decoding of the {len(test_sources)} test programs: {greedy:.2f} s; one composed epoch "
          f"({len(pairs)} pairs) with its validation: {composed_epoch_s:.1f} s", flush=True)
    programs = common.read_lines(os.path.join(args.data, "unlabeled.tgt")) + \
        common.read_lines(os.path.join(args.data, "train.tgt"))
    denoiser_epoch_s = denoiser_epoch(denoiser, programs, tokenizer, args, device)
    print(f"one epoch of the denoiser's training ({len(programs)} programs): {denoiser_epoch_s:.1f} s")
    on = "_cuda" if device.type == "cuda" else ""
    print(f"composed_step_vs_standard{on}={composed[default.samples] / standard:.1f} "
          f"straight_through_step_vs_standard{on}={composed['straight-through'] / standard:.1f} "
          f"sampling_vs_standard{on}={sampling_s / standard:.1f} "
          f"greedy_test_s{on}={greedy:.2f} composed_epoch_s{on}={composed_epoch_s:.1f} "
          f"denoiser_epoch_s{on}={denoiser_epoch_s:.1f}")

if __name__ == "__main__":
    main()
