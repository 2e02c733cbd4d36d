"""Benchmark composed fine-tuning on this machine, on one fixed batch of SansType training pairs:
  1. the wall time of a composed training step (sample, score with the frozen denoiser, REINFORCE and direct terms,
     backward, AdamW) against a standard one (cross entropy, backward, AdamW), and of a straight-through step (the
     denoiser's backward pass too);
  2. the variance of the gradient of Eq. 1's first term: REINFORCE with the paper's estimator (no baseline) and with
     the batch baseline; straight-through, and the cosine of its mean gradient with REINFORCE's (unbiased) mean, a
     measure of its bias;
  3. wall times of whole pieces of the chain: greedy decoding of the test split's programs (evaluate.py's f(x)); one
     composed epoch over the labeled pairs with its validation (greedy decoding of val, Pi scoring it); one epoch of
     the denoiser's training on freshly corrupted programs (extrapolated from --denoiser-batches of them; 0: all).

    python tests/bench_composed.py [--init runs/standard/model.pt] [--denoiser runs/denoiser/model.pt] [--device cuda]
    python tests/bench_composed.py --batch-size 176 --precision bf16 --device cuda   # the paper preset on a GPU

Last line: composed_step_vs_standard=X.X straight_through_step_vs_standard=Y.Y sampling_vs_standard=U.U (sampling y'
alone) greedy_test_s=Z composed_epoch_s=W denoiser_epoch_s=V (each name ending in _cuda on a GPU).
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
import harness  # noqa: E402


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
        grads.append(torch.cat([p.grad.flatten().float() for p in model.parameters()]))
    grads = torch.stack(grads)
    return (grads - grads.mean(0)).pow(2).sum(1).mean().item(), grads.mean(0)


def seconds(work, device) -> float:
    wait(device)
    start = time.perf_counter()
    work()
    wait(device)
    return time.perf_counter() - start


def composed_epoch(model, denoiser, pairs, val_pairs, args, device):
    """One epoch of composed fine-tuning as finetune.py runs it (composed_loss's defaults, which a test holds equal to
    finetune.py's settings; AdamW, the epoch's batches), then its validation."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    val_batches = [tuple(t.to(device) for t in batch) for batch in common.batches(val_pairs, args.batch_size)]
    model.train()
    for batch in common.batches(pairs, args.batch_size, random.Random(0)):
        src, tgt_in, tgt_out = (t.to(device) for t in batch)
        with autocast(args, device):
            loss = common.composed_loss(model, denoiser, src, tgt_in, tgt_out)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with autocast(args, device):
        common.composed_validation_loss(model, denoiser, val_batches)


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
            with autocast(args, device):
                loss = common.sequence_loss(denoiser(src, tgt_in), tgt_out)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return seconds(steps, device) * len(epoch_batches) / len(timed)


def autocast(args, device):
    """bf16 on a GPU: autocast; on a CPU the models are bf16 themselves, as harness.Bf16Copy trains there."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16" and device.type == "cuda")


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
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="of every timed piece")
    parser.add_argument("--denoiser-batches", type=int, default=20, help="of the denoiser's epoch, timed (0: all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = harness.pick_device(args.device)
    torch.manual_seed(0)

    spm = harness.read_data_folder(args.data)["spm"]
    tokenizer = common.load_tokenizer(spm)
    model, _ = harness.load_model(args.init, spm, f"{args.data}/spm.model", "predictor")
    denoiser, _ = harness.load_model(args.denoiser, spm, f"{args.data}/spm.model", "denoiser")
    model, denoiser = harness.to_device(model, device), harness.to_device(denoiser, device)
    if args.precision == "bf16" and device.type == "cpu":  # (AdamW then steps bf16 weights: Bf16Copy's fp32 step
        model, denoiser = model.bfloat16(), denoiser.bfloat16()  # costs about as much)
    denoiser.eval().requires_grad_(False)
    pairs = finetune.load_pairs(args.data, "train", tokenizer)
    every_batch = list(common.batches(pairs, args.batch_size))  # sorted by length, as training sees them
    src, tgt_in, tgt_out = (t.to(device) for t in every_batch[len(every_batch) // 2])  # one of median length
    print(f"batch: {tuple(src.shape)} source, {tuple(tgt_out.shape)} target; "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; {device}, {args.threads} threads")

    def loss_of(**settings):
        def loss():
            with autocast(args, device):
                return common.composed_loss(model, denoiser, src, tgt_in, tgt_out, **settings)
        return loss

    def standard_loss():
        with autocast(args, device):
            return common.sequence_loss(model(src, tgt_in), tgt_out)

    model.train()
    times = timed_steps(model, {"standard": standard_loss, "REINFORCE": loss_of(),
                                "straight-through": loss_of(estimator="straight-through")}, args.steps, device)
    standard, composed = times.pop("standard"), times
    print(f"standard step {1000 * standard:.0f} ms; composed step "
          + ", ".join(f"{name} {1000 * t:.0f} ms ({t / standard:.1f}x)" for name, t in composed.items()))
    max_len = common.output_length_limit(model, src, tgt_out)  # as composed_loss samples

    def sampling():
        with autocast(args, device):
            return model.eval().generate(src, max_len, sample=True)
    sampling_s = statistics.median(seconds(sampling, device) for _ in range(args.steps + 1))
    print(f"of which sampling y' alone: {1000 * sampling_s:.0f} ms ({sampling_s / standard:.1f} standard steps; "
          f"{max_len} tokens at most, the longest sample {int(sampling().lengths.max())})", flush=True)

    model.eval()  # dropout off: the variance is the estimator's alone
    variances = {}
    for name, settings in (("none", dict(baseline="none")), ("batch", dict(baseline="batch")),
                           ("straight-through", dict(estimator="straight-through"))):
        variances[name] = variance, mean = gradient_variance(model, loss_of(weight=1.0, lam=0.0, **settings),
                                                             args.estimates)
        print(f"{name if name == 'straight-through' else 'REINFORCE, baseline ' + name} gradient: variance "
              f"{variance:.4g} (mean gradient norm {mean.norm():.4g})", flush=True)
    cosine = torch.nn.functional.cosine_similarity(variances["straight-through"][1], variances["batch"][1], dim=0)
    print(f"straight-through's mean gradient against REINFORCE's: cosine {cosine.item():.2f}")
    print(f"variance_reduction_batch={ratio(variances['none'][0], variances['batch'][0])}")

    test_sources = common.read_lines(os.path.join(args.data, "test.src"))
    with autocast(args, device):
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
    print(f"composed_step_vs_standard{on}={composed['REINFORCE'] / standard:.1f} "
          f"straight_through_step_vs_standard{on}={composed['straight-through'] / standard:.1f} "
          f"sampling_vs_standard{on}={sampling_s / standard:.1f} "
          f"greedy_test_s{on}={greedy:.2f} composed_epoch_s{on}={composed_epoch_s:.1f} "
          f"denoiser_epoch_s{on}={denoiser_epoch_s:.1f}")

if __name__ == "__main__":
    main()
