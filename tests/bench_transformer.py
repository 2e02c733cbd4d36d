"""Benchmark our Transformer at the paper's SansType size (3+3 layers, 2 heads, d=256, ffn 1024,
vocabulary 600, batch 32, 100 tokens a side) on this machine:
  1. a training step (forward, label-smoothed loss, backward, Adam) against torch.nn.Transformer
     with the same configuration, embeddings and output projection;
  2. greedy decoding of 100 tokens with the key/value cache against re-running the decoder over
     the whole prefix at every step (the outputs must be identical).

    python tests/bench_transformer.py [--steps 10] [--threads 2]

Last line: train_step_vs_torch=X.XX decode_cache_speedup=Y.Y (above 1: ours is faster).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402

VOCAB, BATCH, LENGTH = 600, 32, 100


class TorchTransformer(nn.Module):
    """nn.Transformer with the same embeddings, positions and tied output projection as ours."""

    def __init__(self, c: common.TransformerConfig):
        super().__init__()
        self.ours = common.Transformer(c)  # only for embed_tokens and the embedding matrix
        self.core = nn.Transformer(c.d_model, c.n_heads, c.encoder_layers, c.decoder_layers, c.d_ff,
                                   c.dropout, batch_first=True)

    def forward(self, src, tgt_in):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1])
        y = self.core(self.ours.embed_tokens(src), self.ours.embed_tokens(tgt_in), tgt_mask=causal,
                      src_key_padding_mask=src == common.PAD_ID, memory_key_padding_mask=src == common.PAD_ID)
        return y @ self.ours.embed.weight.T


def seconds_per_step(model, steps):
    torch.manual_seed(0)
    src = torch.randint(4, VOCAB, (BATCH, LENGTH))
    tgt = torch.randint(4, VOCAB, (BATCH, LENGTH + 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    times = []
    for step in range(steps + 2):  # two warm-up steps
        start = time.perf_counter()
        loss = common.sequence_loss(model(src, tgt[:, :-1]), tgt[:, 1:], label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = common.TransformerConfig(vocab_size=VOCAB)
    print(f"torch {torch.__version__}, {args.threads} threads, batch {BATCH} x {LENGTH} tokens a side")

    ours = seconds_per_step(common.Transformer(config), args.steps)
    reference = seconds_per_step(TorchTransformer(config), args.steps)
    print(f"training step: ours {1000 * ours:.0f} ms, nn.Transformer {1000 * reference:.0f} ms")

    torch.manual_seed(0)
    model = common.Transformer(config).eval()
    src = torch.randint(4, VOCAB, (BATCH, LENGTH))
    start = time.perf_counter()
    cached = model.generate(src, max_len=LENGTH)
    cached_seconds = time.perf_counter() - start
    start = time.perf_counter()
    uncached = model.generate(src, max_len=LENGTH, use_cache=False)
    uncached_seconds = time.perf_counter() - start
    lengths = sorted({len(seq) for seq in cached})
    print(f"greedy decoding, {LENGTH} steps (output lengths {lengths[0]}..{lengths[-1]}): "
          f"cache {cached_seconds:.2f} s, no cache {uncached_seconds:.2f} s, identical outputs: {cached == uncached}")
    print(f"train_step_vs_torch={reference / ours:.2f} decode_cache_speedup={uncached_seconds / cached_seconds:.1f}")
    sys.exit(0 if cached == uncached else 1)


if __name__ == "__main__":
    main()
