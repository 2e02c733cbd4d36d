"""Benchmark our Transformer on this machine (vocabulary 600, batch 32, 100 tokens a side):
  1. a training step (forward, loss, backward, Adam) against torch.nn.Transformer with the same
     configuration (pre-norm), embeddings and output projection, in fp32 and in bf16 as --precision bf16 trains on
     a CPU (a bf16 copy of the model, harness.Bf16Copy), at the paper's SansType size (3+3 layers, 2 heads, d=256,
     ffn 1024) and at the cpu preset's (2+2 layers, 4 heads, d=128, ffn 512, no attention/activation dropout); beside
     bf16 the candidates it was chosen among (ours alone): bf16 autocast (the path before it) and the bf16 copy with
     attention as plain bf16 products (matmul_attention, for SDPA's flash or math forms); for each, the elements
     one step casts or copies (torch.profiler's aten::copy_) and their share of its time;
     and ours under torch.compile(dynamic=True) at the paper's size (lengths vary from batch to batch in
     training, so a static graph would recompile; the two warm-up steps hold the compilation);
     with each step's model FLOP utilisation: its FLOPs (torch's FlopCounterMode over forward and backward) over its
     time, as a share of the rate this run measures for a 1024x1024 matrix product in the same precision;
  2. greedy decoding of 100 tokens at the paper's size (Transformer.generate: the key/value cache, fixed-shape
     steps) against re-running the decoder over the whole prefix at every step (test_transformer.rerun_decoder;
     the outputs must be identical).

    python tests/bench_transformer.py [--steps 10] [--threads 2] [--compile] [--bf16] [--tiny]

It times what this machine can pay for: bf16 only on a CPU with native bf16 (AVX512-BF16 or AMX; elsewhere it is
10-17x slower and the bench took over 20 minutes: --bf16 times it anyway), torch.compile only with --compile (a minute
or more of compiling); it says what it skipped.

Last line: train_step_vs_torch=X.XX decode_cache_speedup=Y.Y mfu_paper=U.UU mfu_cpu=U.UU [mfu_paper_bf16=U.UU
mfu_cpu_bf16=U.UU bf16_speedup=Z.Z bf16_speedup_cpu=W.W autocast_speedup=A.A autocast_speedup_cpu=B.B
matmul_attention_speedup=M.M matmul_attention_speedup_cpu=N.N compile_speedup=V.V] (above 1: ours is faster, the
cache is faster, bf16 (or the candidate) is faster than fp32, compiling is faster; _cpu: at the cpu preset's size, else
the paper's; mfu: the share of the matrix product's rate a training step reaches), each where it was timed.
"""
import argparse
import contextlib
import math
import os
import statistics
import sys
import time
import unittest.mock
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

warnings.filterwarnings("ignore", message="enable_nested_tensor")  # nn.Transformer's note on pre-norm layers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402
import harness  # noqa: E402
import finetune  # noqa: E402
from test_transformer import rerun_decoder  # noqa: E402

VOCAB, BATCH, LENGTH = 600, 32, 100


class TorchTransformer(nn.Module):
    """nn.Transformer with the same embeddings, positions and tied output projection as ours."""

    def __init__(self, c: common.TransformerConfig):
        super().__init__()
        self.ours = common.Transformer(c)  # only for embed_tokens and the embedding matrix
        self.core = nn.Transformer(c.d_model, c.n_heads, c.encoder_layers, c.decoder_layers, c.d_ff,
                                   c.dropout, batch_first=True, norm_first=True)

    def forward(self, src, tgt_in):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1])
        y = self.core(self.ours.embed_tokens(src), self.ours.embed_tokens(tgt_in), tgt_mask=causal,
                      src_key_padding_mask=src == common.PAD_ID, memory_key_padding_mask=src == common.PAD_ID)
        return y @ self.ours.embed.weight.T


def matmul_attention(q, k, v, attn_mask=None, dropout_p=0.0):
    """SDPA as plain products in q's dtype (SDPA's own math form, which the CPU takes with attention dropout, computes
    bf16 in fp32, casting q, k and v up and its result down)."""
    scores = (q @ k.transpose(-2, -1)).mul_(q.shape[-1] ** -0.5)
    scores = scores if attn_mask is None else scores.masked_fill_(~attn_mask, -math.inf)
    return F.dropout(scores.softmax(-1), dropout_p) @ v


# How a step runs in each precision: (whether a bf16 copy trains, the context its forward runs in).
PRECISIONS = {"fp32": (False, contextlib.nullcontext), "bf16": (True, contextlib.nullcontext),
              "bf16 autocast": (False, lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
              "bf16 matmul attention": (True, lambda: unittest.mock.patch.object(
                  F, "scaled_dot_product_attention", matmul_attention))}


def training_step(model, precision="fp32", batch=BATCH, length=LENGTH):
    """A function that runs one training step (forward, loss, backward, Adam) of model on one random batch."""
    torch.manual_seed(0)
    src = torch.randint(4, VOCAB, (batch, length))
    tgt = torch.randint(4, VOCAB, (batch, length + 1))
    copied, context = PRECISIONS[precision]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    if copied:
        optimizer = harness.Bf16Copy(model, optimizer)
        model = optimizer.model
    model.train()

    def step():
        with context():
            loss = common.sequence_loss(model(src, tgt[:, :-1]), tgt[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return step


def seconds_per_step(model, steps, precision="fp32", batch=BATCH, length=LENGTH):
    step, times = training_step(model, precision, batch, length), []
    for i in range(steps + 2):  # two warm-up steps
        start = time.perf_counter()
        step()
        if i >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def copies_per_step(model, precision, batch=BATCH, length=LENGTH) -> tuple[int, float]:
    """(the elements cast or copied in one step after a warm-up one, the share of the step's operator time they take):
    every cast and copy ends in aten::copy_, whose first input is what it writes."""
    step = training_step(model, precision, batch, length)
    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        step()
    copies = [event for event in profile.events() if event.name == "aten::copy_"]
    total = sum(event.self_cpu_time_total for event in profile.key_averages())
    return sum(math.prod(event.input_shapes[0]) for event in copies if event.input_shapes), \
        sum(event.self_cpu_time_total for event in copies) / total


def step_flops(model, batch=BATCH, length=LENGTH) -> int:
    """The floating-point operations of one training step's forward and backward (Adam's update is a few per weight)."""
    src, tgt = torch.randint(4, VOCAB, (batch, length)), torch.randint(4, VOCAB, (batch, length + 1))
    with FlopCounterMode(display=False) as counter:
        common.sequence_loss(model(src, tgt[:, :-1]), tgt[:, 1:]).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def matmul_rate(precision: str, n: int = 1024, repeats: int = 20) -> float:
    """FLOP/s of an n x n matrix product on this machine, now (the roof a step's utilisation is measured against)."""
    a, b = (torch.randn(n, n, dtype=torch.bfloat16 if precision == "bf16" else torch.float32) for _ in range(2))
    times = []
    for _ in range(repeats + 2):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * n ** 3 / statistics.median(times[2:])


def cpu_has_native_bf16() -> bool:
    """bf16 can pay on a CPU only with bf16 matrix units (AVX512-BF16 or AMX); on AVX2 it is many times slower."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:  # not Linux: assume none
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--compile", action="store_true", help="also time a torch.compile'd step")
    parser.add_argument("--bf16", action="store_true", help="time bf16 steps on a CPU without native bf16 too")
    parser.add_argument("--tiny", action="store_true", help="batch 2, 8 tokens, one step: that it runs (the suite)")
    args = parser.parse_args()
    batch, length, args.steps = (2, 8, 1) if args.tiny else (BATCH, LENGTH, args.steps)
    precisions = tuple(PRECISIONS) if args.bf16 or cpu_has_native_bf16() else ("fp32",)
    skipped = [("bf16", "no native bf16 on this CPU (--bf16 times it)")] * (len(precisions) == 1) + \
        [("torch.compile", "without --compile")] * (not args.compile)
    for what, why in skipped:
        print(f"skipped: {what}, {why}")
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()} (bf16 needs "
          f"AVX512-BF16 or AMX to pay), {args.threads} threads, batch {batch} x {length} tokens a side")
    step, utilisation = {}, {}
    n = 64 if args.tiny else 1024
    rates = {dtype: matmul_rate(dtype, n) for dtype in dict.fromkeys(precision[:4] for precision in precisions)}
    print(f"matrix product {n}x{n}: " + ", ".join(f"{p} {r / 1e9:.0f} GFLOP/s" for p, r in rates.items()))
    roof = {precision: rates[precision[:4]] for precision in precisions}
    for size in ("paper", "cpu"):
        preset = finetune.preset_values({"dataset": "sanstype"}, argparse.Namespace(preset=size, method="standard"))
        config = harness.transformer_config(argparse.Namespace(**preset), VOCAB)
        for precision in precisions:
            ours = step[size, precision] = seconds_per_step(common.Transformer(config), args.steps, precision, batch,
                                                            length)
            rate = step_flops(common.Transformer(config), batch, length) / ours
            utilisation[size, precision] = rate / roof[precision]
            copies, share = copies_per_step(common.Transformer(config), precision, batch, length)
            line = f"training step, {size} size, {precision}: ours {1000 * ours:.0f} ms ({rate / 1e9:.1f} GFLOP/s, " \
                f"{utilisation[size, precision]:.0%} of the product's; {copies / 1e6:.1f}M elements cast or copied, " \
                f"{share:.0%} of its time)"
            if precision in ("fp32", "bf16"):  # (the candidates: ours alone)
                reference = seconds_per_step(TorchTransformer(config), args.steps, precision, batch, length)
                line += f", nn.Transformer {1000 * reference:.0f} ms ({reference / ours:.2f})"
            print(line, flush=True)
            if (size, precision) == ("paper", "fp32"):
                ours_vs_torch = reference / ours
            if (size, precision) == ("paper", "fp32") and args.compile:
                compiled = seconds_per_step(torch.compile(common.Transformer(config), dynamic=True), args.steps,
                                            batch=batch, length=length)
                print(f"training step, paper size, fp32, torch.compile: {1000 * compiled:.0f} ms", flush=True)

    config = common.TransformerConfig(vocab_size=VOCAB)

    torch.manual_seed(0)
    model = common.Transformer(config).eval()
    src = torch.randint(4, VOCAB, (batch, length))
    start = time.perf_counter()
    cached = common.as_lists(model.generate(src, max_len=length))
    cached_seconds = time.perf_counter() - start
    start = time.perf_counter()
    uncached = rerun_decoder(model, src, max_len=length)
    uncached_seconds = time.perf_counter() - start
    lengths = sorted({len(seq) for seq in cached})
    print(f"greedy decoding, {length} steps (output lengths {lengths[0]}..{lengths[-1]}): "
          f"cache {cached_seconds:.2f} s, no cache {uncached_seconds:.2f} s, identical outputs: {cached == uncached}")
    figures = {"train_step_vs_torch": f"{ours_vs_torch:.2f}",
               "decode_cache_speedup": f"{uncached_seconds / cached_seconds:.1f}",
               **{f"mfu_{size}{'_bf16' * (p == 'bf16')}": f"{u:.2f}" for (size, p), u in utilisation.items()
                  if p in ("fp32", "bf16")}}
    candidates = {"bf16": "bf16", "bf16 autocast": "autocast", "bf16 matmul attention": "matmul_attention"}
    for precision, name in candidates.items():
        if precision in precisions:
            figures.update({f"{name}_speedup": f"{step['paper', 'fp32'] / step['paper', precision]:.1f}",
                            f"{name}_speedup_cpu": f"{step['cpu', 'fp32'] / step['cpu', precision]:.1f}"})
    if args.compile:
        figures["compile_speedup"] = f"{step['paper', 'fp32'] / compiled:.2f}"
    print(" ".join(f"{name}={value}" for name, value in figures.items()))
    sys.exit(0 if cached == uncached else 1)


if __name__ == "__main__":
    main()
