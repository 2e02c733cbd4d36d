"""Shared pieces of composed-finetuning: everything the scripts have in common.

Table of contents
  1. Tokenizer and data files   sentencepiece BPE over the joined pseudocode/code vocabulary
  2. Transformer                the encoder-decoder of the SansType experiments, with cached decoding
  3. U-Net                      the image denoiser of the font experiment (fonts.py)
  4. Corruptions                code-based and random-deletion noise for denoiser pre-training;
                                SPoC's one-line edits
  5. Losses                     sequence cross entropy; composed fine-tuning's REINFORCE loss (Eq. 1)
  6. Checkpoints                self-contained model files
  7. Training loop              presets, batches, early stopping, resume
  8. Judge                      compile and run SansType programs, safely and in batches; SPoC programs
                                on their problem's hidden test cases
  9. Command-line plumbing      one-line errors and progress lines with an ETA
"""

import argparse
import atexit
import functools
import glob
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import io
import itertools
import json
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import sentencepiece
import torch
import torch.nn as nn
import torch.nn.functional as F


# ============================================================================
# 1. Tokenizer and data files
# ============================================================================

# Pseudocode and code share one vocabulary. Id 0 is padding; the rest are sentencepiece's usual specials.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
# The statement separator, the block indentation and the pseudocode's indentation word are always one
# piece each ("▁" is sentencepiece's word-initial space), so a model sees program structure directly.
STRUCTURE_PIECES = ["▁$", "▁~", "▁TAB"]
# Decoders never output these: an output's ids are then exactly the tokens that were chosen, which
# keeps the REINFORCE log-probabilities of sampled outputs exact.
NEVER_GENERATED = [PAD_ID, BOS_ID]


def train_tokenizer(lines, vocab_size):
    """Train a BPE model on an iterable of text lines; return the model file's bytes.

    One thread and every sentence used (no sampling), so the same lines give the same bytes.
    Raises RuntimeError if the lines cannot support vocab_size pieces.
    """
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=vocab_size,
        character_coverage=1.0, user_defined_symbols=STRUCTURE_PIECES, num_threads=1,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, minloglevel=2)
    return model.getvalue()


def load_tokenizer(model_bytes):
    """A SentencePieceProcessor from model bytes (as stored in spm.model and in every checkpoint)."""
    return sentencepiece.SentencePieceProcessor(model_proto=model_bytes)


def write_lines(path: str, lines):
    """One line per item, written to a temporary file first so a kill never leaves half a file."""
    with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)
    os.replace(path + ".tmp", path)


def read_lines(path: str) -> list[str]:
    """The lines of a SansType file; a final newline does not make an extra empty line."""
    if not os.path.isfile(path):
        raise UsageError(f"missing file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    return lines[:-1] if lines and lines[-1] == "" else lines


def read_tokenizer_bytes(data_dir: str) -> bytes:
    path = os.path.join(data_dir, "spm.model")
    if not os.path.isfile(path):
        raise UsageError(f"missing {path}: run make_sanstype.py first")
    with open(path, "rb") as f:
        return f.read()


def read_spoc_cases(data_dir: str, split: str) -> list[list[tuple[str, str]]]:
    """The (stdin, expected stdout) test cases of each program of a SPoC split (make_spoc.py):
    {split}.ids names each program's problem; {split}.cases.jsonl holds each problem's cases once."""
    path = os.path.join(data_dir, f"{split}.cases.jsonl")
    cases_of = {}
    for number, line in enumerate(read_lines(path), start=1):
        try:
            row = json.loads(line)
            cases_of[row["probid"]] = [(stdin, stdout) for stdin, stdout in row["cases"]]
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"{path}:{number}: not a line written by make_spoc.py") from None
    problems = [line.split("\t")[0] for line in read_lines(os.path.join(data_dir, f"{split}.ids"))]
    missing = sorted(set(problems) - set(cases_of))
    if missing:
        raise UsageError(f"{path} has no test cases for problem {missing[0]}")
    return [cases_of[probid] for probid in problems]


def check_same_tokenizer(spm_a: bytes, spm_b: bytes, what_a: str, what_b: str):
    if spm_a != spm_b:
        raise UsageError(f"{what_a} and {what_b} use different tokenizers: retrain one on the same data")


# ============================================================================
# 2. Transformer
# ============================================================================
# The encoder-decoder of the paper's SansType models, as fairseq's `transformer` builds it:
# token embeddings scaled by sqrt(d) plus sinusoidal positions, pre-norm layers (LayerNorm
# before each sublayer, x + sublayer(LayerNorm(x)), and one more LayerNorm after the last layer,
# as the authors ran fairseq), ReLU feed-forward, dropout on the residual branches, on the
# attention weights and after the ReLU, and one embedding matrix shared by the encoder, the
# decoder and the output projection (one joined vocabulary).

@dataclass
class TransformerConfig:
    vocab_size: int
    d_model: int = 256
    n_heads: int = 2
    encoder_layers: int = 3
    decoder_layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    attention_dropout: float = 0.2
    activation_dropout: float = 0.2
    max_positions: int = 2048  # SPoC's unfiltered test programs reach 1100 pieces


# Model sizes. paper: Appendix C (3+3 layers, 2 heads, d=256, ffn 1024, dropout 0.1/0.2/0.2).
# cpu: a smaller model that trains in minutes on 2 cores. smoke: tiny, for the tests.
# spoc-*: the same presets on SPoC data (preset_key); spoc-paper is Appendix E's (5+5 layers, 8 heads, d=256,
# ffn 1024, dropout 0.4/0.2/0.2, "reasonable defaults from Guzman et al., 2019").
MODEL_PRESETS = {
    "paper": dict(d_model=256, n_heads=2, encoder_layers=3, decoder_layers=3, d_ff=1024),
    # No attention or activation dropout on the CPU: their random masks took a third of a training
    # step (and attention dropout pushes SDPA off its fused path); the time goes to more epochs.
    "cpu": dict(d_model=128, n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=512,
                attention_dropout=0.0, activation_dropout=0.0),
    "smoke": dict(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64),
    "spoc-paper": dict(d_model=256, n_heads=8, encoder_layers=5, decoder_layers=5, d_ff=1024, dropout=0.4),
}
MODEL_PRESETS["spoc-cpu"] = MODEL_PRESETS["cpu"]


def linear(d_in: int, d_out: int) -> nn.Linear:
    layer = nn.Linear(d_in, d_out)
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


def sinusoidal_positions(n: int, d: int) -> torch.Tensor:
    """(n, d): sines of geometrically spaced frequencies in the first half, cosines in the second."""
    frequencies = torch.exp(torch.arange(d // 2) * -(math.log(10000.0) / (d // 2 - 1)))
    angles = torch.arange(n)[:, None] * frequencies[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class Attention(nn.Module):
    """Multi-head attention. `cache` (a dict) keeps keys and values across decoding steps:
    a self-attention cache grows by one position a step (append_to_cache); a cross-attention
    cache is filled once, since the encoder's output does not change while decoding."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.q, self.k, self.v, self.out = (linear(d_model, d_model) for _ in range(4))

    def split_heads(self, x):  # (B, T, D) -> (B, H, T, D/H)
        return x.view(x.shape[0], x.shape[1], self.n_heads, -1).transpose(1, 2)

    def forward(self, x, context, mask, cache=None, cross=False):
        q = self.split_heads(self.q(x))
        if cache is None:
            k, v = self.k(context), self.v(context)
        elif cross:  # the encoder's output: projected at the first step only
            if "k" not in cache:
                cache["k"], cache["v"] = self.k(context), self.v(context)
            k, v = cache["k"], cache["v"]
        else:
            k, v = append_to_cache(cache, self.k(x), self.v(x))
        k, v = self.split_heads(k), self.split_heads(v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(x.shape))


def append_to_cache(cache: dict, k, v):
    """Write the new positions' keys and values (B, T, D) after the cached ones; return all of them.
    They go into buffers that double when full, so a step does not copy the whole cache (torch.cat would)."""
    n = cache.get("length", 0)
    end = n + k.shape[1]
    if "k" not in cache or end > cache["k"].shape[1]:  # full: a buffer twice as long, the cache copied in
        for name, new in (("k", k), ("v", v)):
            buffer = new.new_empty(new.shape[0], 2 * end, new.shape[2])
            if n:
                buffer[:, :n] = cache[name][:, :n]
            cache[name] = buffer
    cache["k"][:, n:end], cache["v"][:, n:end], cache["length"] = k, v, end
    return cache["k"][:, :end], cache["v"][:, :end]


def select_rows(cache: list[dict], rows, parts=("self", "cross")):
    """Keep (or reorder) the rows of a decoding cache's parts: finished outputs leave a batch, beams follow their
    hypothesis."""
    for layer_cache in cache:
        for name in parts:
            part = layer_cache[name]
            filled = part.get("length")  # a self-attention buffer: move only its written positions
            for key in ("k", "v"):  # in place, so that a buffer keeps its room to grow
                chosen = part[key][rows, :filled]
                part[key] = part[key][:len(chosen)]
                part[key][:, :filled] = chosen


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, activation_dropout: float):
        super().__init__()
        self.fc1, self.fc2, self.activation_dropout = linear(d_model, d_ff), linear(d_ff, d_model), activation_dropout

    def forward(self, x):
        return self.fc2(F.dropout(F.relu(self.fc1(x)), self.activation_dropout, self.training))


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward; each as x = x + dropout(sublayer(LayerNorm(x)))."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.attention = Attention(c.d_model, c.n_heads, c.attention_dropout)
        self.ffn = FeedForward(c.d_model, c.d_ff, c.activation_dropout)
        self.attention_norm, self.ffn_norm = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
        self.dropout = c.dropout

    def forward(self, x, mask):
        y = self.attention_norm(x)
        x = x + F.dropout(self.attention(y, y, mask), self.dropout, self.training)
        return x + F.dropout(self.ffn(self.ffn_norm(x)), self.dropout, self.training)


class DecoderLayer(nn.Module):
    """Causal self-attention, attention to the encoder's output, then feed-forward."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.self_attention = Attention(c.d_model, c.n_heads, c.attention_dropout)
        self.cross_attention = Attention(c.d_model, c.n_heads, c.attention_dropout)
        self.ffn = FeedForward(c.d_model, c.d_ff, c.activation_dropout)
        self.self_norm, self.cross_norm, self.ffn_norm = (nn.LayerNorm(c.d_model) for _ in range(3))
        self.dropout = c.dropout

    def forward(self, x, self_mask, memory, memory_mask, cache=None):
        def drop(y):
            return F.dropout(y, self.dropout, self.training)
        self_cache = cache.setdefault("self", {}) if cache is not None else None
        cross_cache = cache.setdefault("cross", {}) if cache is not None else None
        y = self.self_norm(x)
        x = x + drop(self.self_attention(y, y, self_mask, self_cache))
        x = x + drop(self.cross_attention(self.cross_norm(x), memory, memory_mask, cross_cache, cross=True))
        return x + drop(self.ffn(self.ffn_norm(x)))


class Transformer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = self.config = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model, padding_idx=PAD_ID)
        # N(0, 1/d) times sqrt(d): unit-size inputs, and logits (through the same matrix) of a
        # sensible size. N(0, 1) times sqrt(d) blows both up and the model never learns to attend.
        nn.init.normal_(self.embed.weight, std=c.d_model ** -0.5)
        nn.init.zeros_(self.embed.weight[PAD_ID])
        self.register_buffer("positions", sinusoidal_positions(c.max_positions, c.d_model), persistent=False)
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.decoder_layers))
        # Pre-norm layers add to an un-normalised residual stream: each stack ends with one LayerNorm.
        self.encoder_norm, self.decoder_norm = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)

    def embed_tokens(self, tokens, start: int = 0):
        x = self.embed(tokens) * math.sqrt(self.config.d_model) + self.positions[start:start + tokens.shape[1]]
        return F.dropout(x, self.config.dropout, self.training)

    def encode(self, src):
        """src (B, S) token ids, PAD-padded -> (memory (B, S, D), its mask (B, 1, 1, S))."""
        mask = (src != PAD_ID)[:, None, None, :]  # True where a key may be attended to
        x = self.embed_tokens(src)
        for layer in self.encoder:
            x = layer(x, mask)
        return self.encoder_norm(x), mask

    def decode(self, tgt_in, memory, memory_mask, cache=None, start: int = 0):
        """Logits (B, T, V) for the next token at every position of tgt_in (B, T). With a
        cache, tgt_in holds only the new positions, the first of them at `start`."""
        T = tgt_in.shape[1]  # (one new position may attend to every cached one: no mask)
        causal = torch.ones(T, start + T, dtype=torch.bool, device=tgt_in.device).tril(start) if T > 1 else None
        x = self.embed_tokens(tgt_in, start)
        for i, layer in enumerate(self.decoder):
            x = layer(x, causal, memory, memory_mask, cache[i] if cache is not None else None)
        return self.decoder_norm(x) @ self.embed.weight.T  # the output projection shares the embeddings

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, *self.encode(src))

    @torch.no_grad()
    def generate(self, src, max_len: int = 200, sample: bool = False, use_cache: bool = True, repeat: int = 1):
        """Greedy (or, with sample=True, ancestral) decoding of a batch, stopping each sequence
        at EOS. Returns the token ids without BOS/EOS, one list per source (`repeat` lists per
        source, one after another, with the source encoded once)."""
        memory, memory_mask = self.encode(src)
        memory, memory_mask = memory.repeat_interleave(repeat, 0), memory_mask.repeat_interleave(repeat, 0)
        B = memory.shape[0]
        tokens = torch.full((B, max_len + 1), PAD_ID, dtype=torch.long, device=src.device)
        tokens[:, 0] = BOS_ID
        rows = torch.arange(B, device=src.device)  # the rows still in the batch
        done = torch.zeros(B, dtype=torch.bool, device=src.device)  # which of them have output EOS
        cache = [{} for _ in self.decoder] if use_cache else None
        for step in range(max_len):
            if use_cache:
                logits = self.decode(tokens[rows, step:step + 1], memory, memory_mask, cache, start=step)[:, -1]
            else:  # re-run the decoder over the whole prefix: the slow reference for the cache
                logits = self.decode(tokens[rows, :step + 1], memory, memory_mask)[:, -1]
            logits[:, NEVER_GENERATED] = float("-inf")
            if sample:  # inverse-CDF draw: one uniform per row (torch.multinomial draws one per class)
                cdf = F.softmax(logits.float(), dim=-1).cumsum(dim=-1)
                uniform = torch.rand(B, 1, device=src.device)[rows] * cdf[:, -1:]  # B draws: the same whoever is left
                next_token = torch.searchsorted(cdf, uniform).squeeze(1).clamp(max=logits.shape[-1] - 1)
            else:
                next_token = logits.argmax(dim=-1)
            tokens[rows, step + 1] = next_token  # (after a row's EOS: ignored by strip_special)
            done |= next_token == EOS_ID
            if done.all():
                break
            # Finished rows leave the batch once they are a quarter of it: a step's cost grows with its rows,
            # but dropping rows copies every cache, which cost about as much as a step when done at every EOS.
            if 4 * done.sum() >= len(rows):
                going = ~done
                rows, memory, memory_mask, done = rows[going], memory[going], memory_mask[going], done[going]
                if use_cache:
                    select_rows(cache, going)
        return [strip_special(row) for row in tokens[:, 1:].tolist()]

    @torch.no_grad()
    def beam_search(self, src, beam: int = 4, max_len: int = 200, length_penalty: float = 1.0):
        """Keep the `beam` best prefixes of each source (by total log-probability); finished
        hypotheses score their log-probability / length**length_penalty, as fairseq does.
        Returns the best hypothesis' token ids, without BOS/EOS, one list per source."""
        B, V = src.shape[0], self.config.vocab_size
        memory, memory_mask = self.encode(src)
        memory, memory_mask = memory.repeat_interleave(beam, 0), memory_mask.repeat_interleave(beam, 0)
        tokens = torch.full((B * beam, 1), BOS_ID, dtype=torch.long, device=src.device)
        scores = torch.zeros(B, beam, device=src.device)
        scores[:, 1:] = float("-inf")  # all beams start equal: keep one of them
        finished = torch.zeros(B * beam, dtype=torch.bool, device=src.device)
        cache = [{} for _ in self.decoder]
        for step in range(max_len):
            logits = self.decode(tokens[:, -1:], memory, memory_mask, cache, start=step)[:, -1]
            log_probs = F.log_softmax(logits.float(), dim=-1)
            log_probs[:, NEVER_GENERATED] = float("-inf")
            log_probs[finished] = float("-inf")
            log_probs[finished, PAD_ID] = 0.0  # a finished hypothesis only grows padding, for free
            top, index = (scores.view(-1, 1) + log_probs).view(B, beam * V).topk(beam, dim=1)
            source_beam = (torch.arange(B, device=src.device)[:, None] * beam + index // V).view(-1)
            next_token = (index % V).view(-1, 1)
            tokens, scores = torch.cat([tokens[source_beam], next_token], dim=1), top
            finished = finished[source_beam] | (next_token.view(-1) == EOS_ID)
            select_rows(cache, source_beam, parts=("self",))  # (a source's beams share its cross-attention rows)
            if finished.all():
                break
        lengths = ((tokens[:, 1:] != PAD_ID).sum(dim=1)).clamp(min=1).view(B, beam).float()
        best = (scores / lengths ** length_penalty).argmax(dim=1)
        chosen = tokens.view(B, beam, -1)[torch.arange(B), best]
        return [strip_special(row) for row in chosen[:, 1:].tolist()]


def max_output_length(model, src) -> int:
    """Where decoding gives up on a batch: code is about 1.2x as long as its pseudocode."""
    return min(2 * src.shape[1] + 10, model.config.max_positions)


@torch.no_grad()
def translate(model, tokenizer, texts: list[str], batch_size: int, sample: bool = False, beam: int = 1,
              progress: bool = False) -> list[str]:
    """Greedy (or sampled, or beam-searched) outputs of a seq2seq model for a list of texts,
    decoded in batches of similar source length (less padding) and returned in input order."""
    device = next(model.parameters()).device
    model.eval()
    sources = tokenizer.encode(texts)
    order = sorted(range(len(texts)), key=lambda i: len(sources[i]))
    outputs = [""] * len(texts)
    meter = Progress(len(texts), "decoding") if progress else None
    for start in range(0, len(order), batch_size):
        chosen = order[start:start + batch_size]
        src = pad([sources[i] + [EOS_ID] for i in chosen]).to(device)
        max_len = max_output_length(model, src)
        if beam > 1:
            ids = model.beam_search(src, beam, max_len)
        else:
            ids = model.generate(src, max_len=max_len, sample=sample)
        for i, text in zip(chosen, tokenizer.decode(ids)):
            outputs[i] = text
        if meter:
            meter.step(len(chosen))
    return outputs


def denoise(denoiser, tokenizer, programs: list[str], batch_size: int, error_free: Callable | None = None,
            beam: int = 1, progress: bool = False) -> list[str]:
    """Pi(y') for each program: the denoiser's greedy (or beam-searched) repair. With an error detector
    g (SPoC, Appendix E: Pi(y') = y' where g(y') = 0, else argmax_y p_nu(y | y')), error_free(programs)
    says which programs g passes, and only the others are repaired."""
    passed = error_free(programs) if error_free else [False] * len(programs)
    flagged = [program for program, ok in zip(programs, passed) if not ok]
    repaired = iter(translate(denoiser, tokenizer, flagged, batch_size, beam=beam, progress=progress))
    return [program if ok else next(repaired) for program, ok in zip(programs, passed)]


def strip_special(ids: list[int]) -> list[int]:
    """Token ids up to the first EOS, without padding."""
    ids = ids[:ids.index(EOS_ID)] if EOS_ID in ids else ids
    return [i for i in ids if i != PAD_ID]


# ============================================================================
# 3. U-Net
# ============================================================================
# The denoiser Pi of the font experiment (Section 6.3): a small 3-level U-Net
# (Ronneberger et al., 2015) that maps a 1x32x32 image in [-1, 1] to another.
# Three stride-2 convolutions go down 32 -> 16 -> 8 -> 4; transposed convolutions
# come back up, each concatenated with the encoder map of the same size (the skip
# connections, which let fine strokes bypass the bottleneck). As in the authors'
# released code, no convolution has a bias, and the output is drawn from the 16x16
# features alone: Pi cannot copy its input pixel by pixel, so it must redraw f(x)
# as a glyph. width=64 is their size; the CPU preset uses a narrower one.

def unet_down(c_in, c_out, norm=True, dropout=0.0):
    """Halve the resolution: 4x4 convolution with stride 2."""
    layers = [nn.Conv2d(c_in, c_out, 4, stride=2, padding=1, bias=False)]
    layers += [nn.InstanceNorm2d(c_out)] if norm else []
    layers += [nn.LeakyReLU(0.2)]
    layers += [nn.Dropout(dropout)] if dropout else []
    return nn.Sequential(*layers)


def unet_up(c_in, c_out, dropout=0.0):
    """Double the resolution: 4x4 transposed convolution with stride 2."""
    layers = [nn.ConvTranspose2d(c_in, c_out, 4, stride=2, padding=1, bias=False),
              nn.InstanceNorm2d(c_out), nn.ReLU()]
    layers += [nn.Dropout(dropout)] if dropout else []
    return nn.Sequential(*layers)


class UNet(nn.Module):
    def __init__(self, width=64, dropout=0.5):
        super().__init__()
        w = width
        self.config = dict(width=width, dropout=dropout)
        self.down1 = unet_down(1, w, norm=False)                  # 32 -> 16
        self.down2 = unet_down(w, 2 * w)                          # 16 -> 8
        self.down3 = unet_down(2 * w, 2 * w, norm=False, dropout=dropout)  # 8 -> 4
        self.up1 = unet_up(2 * w, 2 * w, dropout=dropout)         # 4 -> 8, then cat d2
        self.up2 = unet_up(4 * w, w, dropout=dropout)             # 8 -> 16, then cat d1
        # 16 -> 32: upsample, pad one row and column (33x33), and a 4x4 convolution back to 32x32.
        self.final = nn.Sequential(nn.Upsample(scale_factor=2), nn.ZeroPad2d((1, 0, 1, 0)),
                                   nn.Conv2d(2 * w, 1, 4, padding=1, bias=False), nn.Tanh())  # [-1, 1] like the data

    def forward(self, x):                                         # x: (B, 1, 32, 32)
        d1 = self.down1(x)
        d2 = self.down2(d1)
        d3 = self.down3(d2)
        u1 = torch.cat([self.up1(d3), d2], dim=1)
        u2 = torch.cat([self.up2(u1), d1], dim=1)
        return self.final(u2)


# ============================================================================
# 4. Corruptions
# ============================================================================
# Noise for pre-training the denoiser, applied on the fly to valid SansType code one statement (`$`-separated)
# at a time, as the authors' generator noises its programs. Pure functions of (code, rng): the caller owns the
# random stream, so runs are reproducible and every epoch can draw fresh noise.
CPP_TYPES = ("int", "string", "bool")
CLEAN_PROBABILITY = 0.1  # both noises leave a tenth of the programs as they are: Pi must also learn to copy


def split_program(code):
    """'int main () { $ s1 $ s2 $ return 0; }' -> ('int main () {', [s1, s2], 'return 0; }')."""
    head, *statements, tail = code.split(" $ ")
    return head, statements, tail


def join_program(head, statements, tail):
    return " $ ".join([head, *statements, tail])


def other_type(type_, rng):
    return rng.choice([t for t in CPP_TYPES if t != type_])


def noisy_statement(statement, types, rng):
    """One of a statement's noisy renderings ('' deletes it); `types` maps the outer variables to theirs.

        int v = x ;  int v ; v = x ;   another type, no type, or the two-statement form with another type
        int v ;                        another type
        v += x ;  v = min ( v , w ) ;  a type inserted before v: its own or a random one
        cin >> v ;                     cin v ;  or  cin << v ;
        cout << v ;                    deleted
        if ( c ) { ... }               noisy_swap
    """
    if m := re.fullmatch(r"(int|string|bool) (\S+) (?:= |; \2 = )(\S+) ;", statement):  # declared with a value
        type_, v, x = m.groups()
        wrong = other_type(type_, rng)
        return rng.choice([f"{wrong} {v} = {x} ;", f"{v} = {x} ;", f"{wrong} {v} ; {v} = {x} ;"])
    if m := re.fullmatch(r"(int|string|bool) (\S+) ;", statement):
        return f"{other_type(m[1], rng)} {m[2]} ;"
    if m := re.fullmatch(r"cin >> (\S+) ;", statement):
        return rng.choice([f"cin {m[1]} ;", f"cin << {m[1]} ;"])
    if statement.startswith("cout "):
        return ""
    if statement.startswith("if "):
        return noisy_swap(statement, rng)
    v = statement.split(" ")[0]
    if v in types:  # an update of an outer variable
        return f"{rng.choice([types[v], rng.choice(CPP_TYPES)])} {statement}"
    return statement  # nothing we know how to noise


def noisy_swap(statement, rng):
    """An if-swap with its `temp` given no type or another one, or one of its block's declarations noised."""
    temp = re.search(r"(int|string|bool) (?=temp = )", statement)
    declarations = re.finditer(r"(?<=~ )(int|string|bool) (\S+) (?:= \S+|; \2 = \S+) ;", statement)
    sites = [site for site in (temp, *declarations) if site]
    if not sites:
        return statement
    site = rng.choice(sites)
    new = rng.choice(["", other_type(temp[1], rng) + " "]) if site is temp else noisy_statement(site[0], {}, rng)
    return statement[:site.start()] + new + statement[site.end():]


def corrupt_code(code, rng, max_statements=3):
    """Appendix C's code-based noise, drawn as the authors' generator draws it: with probability 0.9,
    1 to max_statements statements (drawn with replacement) each replaced by a noisy rendering; else the
    program unchanged. Most results no longer compile (`int var_0 += 5 ;`, `cin << v ;`); the rest compute
    something else (`bool x = 5 ;`, a deleted print), which only the pseudocode's context can reveal."""
    if rng.random() < CLEAN_PROBABILITY:
        return code
    head, statements, tail = split_program(code)
    types = {m[2]: m[1] for s in statements if (m := re.match(r"(int|string|bool) (\S+) ", s))}
    for i in sorted({rng.randrange(len(statements)) for _ in range(rng.randint(1, max_statements))}):
        statements[i] = noisy_statement(statements[i], types, rng)
    return join_program(head, [s for s in statements if s], tail)


def delete_random_words(code, rng, p=0.15):
    """Table 5's generic noise, with no knowledge of code: with probability 0.9, drop each word of every
    statement with probability p (the `$` separators, `int main () {` and `return 0; }` stay); else clean."""
    if rng.random() < CLEAN_PROBABILITY:
        return code
    head, statements, tail = split_program(code)
    return join_program(head, [" ".join(w for w in s.split(" ") if rng.random() >= p) for s in statements], tail)


# --- SPoC: real code, one line corrupted (Appendix E) -------------------------------------------
# The authors follow Yasunaga & Liang (2020): random syntactic and semantic edits of one line, an insertion,
# deletion or replacement of a keyword, an identifier or a symbol; 3 of every 4 training programs get one
# such line, the rest stay as they are. Literals, indentation (`~`) and preprocessor lines stay untouched.
CPP_KEYWORDS = ("int", "long", "double", "float", "char", "bool", "string", "void", "const", "unsigned", "auto",
                "if", "else", "for", "while", "do", "return", "break", "continue", "struct")
CPP_SYMBOLS = (";", ",", "(", ")", "{", "}", "[", "]", "=", "==", "!=", "<", ">", "<=", ">=", "<<", ">>", "+",
               "-", "*", "/", "%", "&&", "||", "!", "++", "--", "+=", "-=", ":", "&", ".")
SPOC_CORRUPTED_PROGRAMS = 0.75


def token_kind(token: str) -> str | None:
    if token in CPP_KEYWORDS:
        return "keyword"
    if token in CPP_SYMBOLS:
        return "symbol"
    return "identifier" if re.fullmatch(r"[A-Za-z_]\w*", token) else None  # literals and `~`: None


def noisy_code_line(tokens: list[str], identifiers: list[str], rng) -> list[str]:
    """One random edit of a line's tokens: insert, delete or replace a keyword, identifier or symbol
    (a replacement keeps the kind: another keyword, another of the program's identifiers, another symbol)."""
    choices = {"keyword": CPP_KEYWORDS, "identifier": identifiers, "symbol": CPP_SYMBOLS}
    sites = [i for i, token in enumerate(tokens) if token_kind(token)]
    edit = rng.choice(("insert", "delete", "replace")) if sites else "insert"
    if edit == "insert":
        indent = len(tokens) - len(list(itertools.dropwhile(lambda t: t == "~", tokens)))
        where = rng.randint(indent, len(tokens))
        kind = rng.choice([kind for kind, options in choices.items() if options])
        return tokens[:where] + [rng.choice(choices[kind])] + tokens[where:]
    i = rng.choice(sites)
    others = [t for t in choices[token_kind(tokens[i])] if t != tokens[i]]
    if edit == "delete" or not others:
        return tokens[:i] + tokens[i + 1:]
    return tokens[:i] + [rng.choice(others)] + tokens[i + 1:]


def corrupt_spoc_code(code: str, rng) -> str:
    """Appendix E's noise for SPoC: with probability 0.75 one line (not a preprocessor line) gets one
    noisy_code_line edit; else the program unchanged. `$` separates lines, as make_spoc.py writes them."""
    lines = code.split(" $ ")
    editable = [i for i, line in enumerate(lines) if not line.lstrip("~ ").startswith("#")]
    if rng.random() >= SPOC_CORRUPTED_PROGRAMS or not editable:
        return code
    tokens = [_SPOC_TOKEN.findall(line) for line in lines]
    identifiers = sorted({t for line in tokens for t in line if token_kind(t) == "identifier"})  # sorted: seedable
    i = rng.choice(editable)
    lines[i] = " ".join(noisy_code_line(tokens[i], identifiers, rng))
    return " $ ".join(line for line in lines if line)  # a deleted `}` leaves no empty line


# ============================================================================
# 5. Losses
# ============================================================================

def sequence_loss(logits, targets, label_smoothing: float = 0.0):
    """Mean cross entropy per target token (padding ignored), optionally label-smoothed:
    (1 - eps) * -log p(y_t) + eps * mean over the vocabulary of -log p(v)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=PAD_ID,
                           label_smoothing=label_smoothing)


def output_log_probs(model, memory, memory_mask, outputs: list[list[int]], finished: list[bool]):
    """log p(output | source) for each row, summed over its tokens, with gradients, given the
    encoded sources (model.encode, one row per output): the decoder reads BOS + output and
    scores output (+ EOS if the output finished; a decode cut at max_len never chose EOS)."""
    tgt = pad([[BOS_ID] + ids + [EOS_ID] for ids in outputs])
    tgt_in, tgt_out = tgt[:, :-1].to(memory.device), tgt[:, 1:].clone()
    for row, (ids, done) in enumerate(zip(outputs, finished)):
        if not done:
            tgt_out[row, len(ids)] = PAD_ID
    tgt_out = tgt_out.to(memory.device)
    logits = model.decode(tgt_in, memory, memory_mask).float()
    logits[..., NEVER_GENERATED] = float("-inf")  # as the sampler does: its distribution, exactly
    log_probs = F.log_softmax(logits, dim=-1)
    token_log_probs = log_probs.gather(-1, tgt_out[..., None]).squeeze(-1)
    return token_log_probs.masked_fill(tgt_out == PAD_ID, 0.0).sum(dim=1)  # (not * mask: -inf * 0 is nan)


def reinforce_baseline(rewards, kind: str):
    """b in REINFORCE's (reward - b) * grad log p_theta(y'|x), for rewards of shape (inputs, samples).
    Any b that does not depend on the sample it is subtracted from keeps the estimate unbiased:
      leave-one-out  the mean reward of the input's other samples (needs 2 or more samples);
      batch          the mean reward of the batch's other inputs: training batches hold programs of
                     near-equal length, so their rewards are comparable, and one sample per input will do;
      none           b = 0, the paper's estimator."""
    inputs, samples = rewards.shape
    if kind == "leave-one-out" and samples > 1:
        return (rewards.sum(dim=1, keepdim=True) - rewards) / (samples - 1)
    if kind == "batch" and inputs > 1:
        per_input = rewards.mean(dim=1, keepdim=True)
        return ((per_input.sum() - per_input) / (inputs - 1)).expand_as(rewards)
    return torch.zeros_like(rewards)


def composed_loss(model, denoiser, src, tgt_in, tgt_out, *, samples: int, baseline: str,
                  gamma: float = -50.0, clamp: str = "reward", composed_weight: float = 0.1, lam: float = 1.0,
                  label_smoothing: float = 0.0, max_len: int | None = None, error_free: Callable | None = None):
    """Composed fine-tuning's loss for one batch: minus Eq. 1,

        max_theta  E_{y' ~ p_theta(.|x)}[ log p_beta(y | y') ]  +  lambda * E[ log p_theta(y | x) ]

    with the denoiser p_beta frozen. The first term's gradient is REINFORCE's (Appendix D),
        E_{y'}[ (log p_beta(y | y') - b) * grad log p_theta(y' | x) ],
    from `samples` outputs y' per input drawn by ancestral sampling, with the baseline b of
    reinforce_baseline (b = 0 is the paper's estimator; tests/bench_composed.py measures how much the
    others cut the variance). Neither has a default here: finetune.py's flags hold the one default.
    The paper's text clamps the reward log p_beta(y | y') at gamma = -50 (clamp="reward", our
    default); its released code clamps log p_theta(y' | x) instead (clamp="sample"), which stops
    the gradient of samples less likely than e^gamma. Both terms are sums over a sequence's tokens
    divided by the batch's gold tokens, so lambda weighs them as Eq. 1 does; the composed term is
    then scaled by 0.1 (Appendix D: "the composed loss is roughly an order of magnitude larger").
    With an error detector (error_free: output ids -> bool per row; SPoC's Pi, Appendix E),
    p_Pi(y | y') = delta(y') where g(y') = 0: the reward is 0 if y' = y and gamma otherwise.
    """
    gold = [strip_special(row) for row in tgt_out.tolist()]
    n_tokens = int((tgt_out != PAD_ID).sum())
    # Samples much longer than the longest gold program are wrong anyway; cutting them is part of
    # the sampling distribution (the estimator stays exact for it), and a degenerate sample would
    # otherwise run on to max_output_length.
    max_len = max_len or min(max_output_length(model, src), tgt_out.shape[1] + 16)
    was_training = model.training
    model.eval()  # y' ~ p_theta(.|x) as it predicts at test time: no dropout (and faster)
    sampled = model.generate(src, max_len=max_len, sample=True, repeat=samples)
    model.train(was_training)
    finished = [len(ids) < max_len for ids in sampled]
    memory, memory_mask = model.encode(src)  # one encoder pass (with gradient) for both terms
    log_p_sample = output_log_probs(model, memory.repeat_interleave(samples, 0),  # log p_theta(y'|x)
                                    memory_mask.repeat_interleave(samples, 0), sampled, finished)
    with torch.no_grad():  # the reward log p_beta(y|y'), the denoiser teacher-forced on the gold y
        noisy = pad([ids + [EOS_ID] for ids in sampled]).to(src.device)
        targets = [y for y in gold for _ in range(samples)]
        reward = output_log_probs(denoiser, *denoiser.encode(noisy), targets, [True] * len(sampled))
        if error_free is not None:  # Appendix E's delta: Pi leaves a program g passes as it is
            passed = torch.tensor(error_free(sampled), device=reward.device)
            copied = torch.tensor([y_ == y for y_, y in zip(sampled, targets)], device=reward.device)
            reward = torch.where(passed, torch.where(copied, 0.0, gamma), reward)
    if clamp == "reward":
        reward = reward.clamp(min=gamma)
    else:
        log_p_sample = log_p_sample.clamp(min=gamma)
    rewards = reward.view(-1, samples)
    advantage = (rewards - reinforce_baseline(rewards, baseline)).view(-1)
    composed = -(advantage * log_p_sample).sum() / samples / n_tokens
    direct = sequence_loss(model.decode(tgt_in, memory, memory_mask), tgt_out, label_smoothing)  # -log p_theta(y|x)
    return composed_weight * composed + lam * direct


# ============================================================================
# 6. Checkpoints
# ============================================================================
# A checkpoint is one self-contained file: the model's config and weights, the tokenizer's
# bytes, the arguments it was trained with and its best validation loss, so that loading it
# needs no other file. Training writes two: model.pt (the best epoch so far, for the next
# stage) and last.pt (the latest epoch with optimizer, step and random states, for --resume).
# Both are written to a temporary file first and renamed, so a kill never leaves half a file.

def save_checkpoint(path: str, payload: dict):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(payload, tmp)
    os.replace(tmp, path)
    for stale in glob.glob(f"{glob.escape(path)}.tmp*"):  # left by a run killed while saving
        os.remove(stale)


def load_checkpoint(path: str, needs=("config", "model", "spm")) -> dict:
    if not os.path.isfile(path):
        raise UsageError(f"no checkpoint at {path}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # pickle, zip or torch errors: whatever it is, it is not ours
        raise UsageError(f"{path} is not a checkpoint ({type(error).__name__})") from None
    if not isinstance(checkpoint, dict) or any(key not in checkpoint for key in needs):
        raise UsageError(f"{path} is not a checkpoint of this project (it lacks {', '.join(needs)})")
    return checkpoint


def model_from_checkpoint(checkpoint: dict) -> Transformer:
    model = Transformer(TransformerConfig(**checkpoint["config"]))
    model.load_state_dict(checkpoint["model"])
    return model


def load_model(path: str, spm: bytes, data: str) -> tuple[Transformer, dict]:
    """The model in a checkpoint, and the checkpoint, refusing one whose tokenizer is not the data's."""
    checkpoint = load_checkpoint(path)
    check_same_tokenizer(checkpoint["spm"], spm, path, f"{data}/spm.model")
    return model_from_checkpoint(checkpoint), checkpoint


# ============================================================================
# 7. Training loop
# ============================================================================
# Shared by train_denoiser.py and finetune.py: presets and flags, batches, and fit(), which
# trains with early stopping on the validation loss and can resume after an interrupt.

def add_training_args(parser):
    """Flags shared by the training scripts. Each defaults to None and is then filled from the
    chosen preset (resolve_preset), so a flag given on the command line always wins."""
    parser.add_argument("--preset", choices=("cpu", "paper", "smoke"), default="cpu",
                        help="cpu (default): minutes on 2 cores; paper: the paper's sizes, for a GPU; smoke: tests")
    for flag, kind, text in [
            ("--epochs", int, "maximum epochs"), ("--batch-size", int, "programs per batch"),
            ("--lr", float, "peak learning rate of AdamW"),
            ("--warmup-steps", int, "linear warm-up (--lr-schedule linear: at most a tenth of the run)"),
            ("--warmup-start-lr", float, "the rate the warm-up starts from"),
            ("--weight-decay", float, None), ("--label-smoothing", float, "0: plain cross entropy, as the paper"),
            ("--label-smoothing-schedule", str, "VALUE:EPOCHS,...,VALUE: smoothing by epoch (SPoC's paper preset)"),
            ("--clip-norm", float, "clip the gradient's norm to this (0: no clipping, as the paper)"),
            ("--patience", int, "stop after this many epochs without a better validation loss"),
            ("--d-model", int, None), ("--n-heads", int, None), ("--layers", int, "encoder and decoder layers each"),
            ("--d-ff", int, None), ("--dropout", float, None), ("--attention-dropout", float, None),
            ("--activation-dropout", float, None)]:
        parser.add_argument(flag, type=kind, help=text)
    parser.add_argument("--lr-schedule", choices=("constant", "inverse-sqrt", "linear"),
                        help="after the warm-up: the peak rate to the end, fairseq's peak * sqrt(warm-up / step) "
                             "(the paper's), or a linear decay to 0 at the last epoch")
    parser.add_argument("--precision", choices=("fp32", "bf16"),
                        help="bf16: matrix products in bfloat16 under autocast (weights and optimizer stay fp32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/last.pt after an interrupt")


# The authors' recipe (fairseq): plain cross entropy (no label smoothing) and no gradient clipping.
TRAINING_DEFAULTS = dict(weight_decay=1e-4, label_smoothing=0.0, label_smoothing_schedule="", clip_norm=0.0,
                         warmup_start_lr=0.0, dropout=0.1, attention_dropout=0.2, activation_dropout=0.2,
                         precision="fp32")


def is_spoc(data_dir: str) -> bool:
    """make_spoc.py's data: its splits carry their problems' test cases."""
    return bool(glob.glob(os.path.join(glob.escape(data_dir), "*.cases.jsonl")))


def preset_key(args) -> str:
    """The presets' entry for --preset on --data: SPoC's own (Appendix E) for cpu and paper."""
    return f"spoc-{args.preset}" if args.preset != "smoke" and is_spoc(args.data) else args.preset


def resolve_preset(args, script_presets: dict):
    """Fill every flag left at None from the script's preset, the model preset of the same
    name and TRAINING_DEFAULTS, in that order."""
    key = preset_key(args)
    model = MODEL_PRESETS[key]
    preset = {**TRAINING_DEFAULTS, **dict(model, layers=model["encoder_layers"]), **script_presets[key]}
    for name, value in preset.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    return args


def label_smoothing_at(epoch: int, args) -> float:
    """--label-smoothing-schedule "0.2:100,0.1:25,0.05": 0.2 for 100 epochs, then 0.1 for 25, then 0.05 to
    the end (Appendix E: lowering the smoothing near the end improved every SPoC model); else --label-smoothing."""
    if not args.label_smoothing_schedule:
        return args.label_smoothing
    start = 0
    for stage in args.label_smoothing_schedule.split(","):
        value, _, epochs = stage.partition(":")
        start += int(epochs) if epochs else 10 ** 9
        if epoch <= start:
            return float(value)
    return float(value)


def config_from_args(args, vocab_size: int) -> TransformerConfig:
    return TransformerConfig(vocab_size=vocab_size, d_model=args.d_model, n_heads=args.n_heads,
                             encoder_layers=args.layers, decoder_layers=args.layers, d_ff=args.d_ff,
                             dropout=args.dropout, attention_dropout=args.attention_dropout,
                             activation_dropout=args.activation_dropout)


def pick_device(name: str | None = None) -> torch.device:
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def autocast(precision: str, device: torch.device):
    """Mixed precision where --precision bf16 asks for it, on the CPU and on CUDA: matrix products run in
    bfloat16, while the weights, the optimizer's state and the losses (sequence_loss casts) stay fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def batches(pairs: list, batch_size: int, rng: random.Random | None = None):
    """(src, tgt_in, tgt_out) padded LongTensors from (source ids, target ids) pairs. The decoder
    reads BOS + target and predicts target + EOS. Pairs of similar length share a batch, as in
    fairseq: unsorted batches are half padding, which the CPU pays for in full. With an rng, ties
    are broken at random and the batches come in random order."""
    order = list(range(len(pairs)))
    if rng is not None:
        rng.shuffle(order)
    order.sort(key=lambda i: (len(pairs[i][1]), len(pairs[i][0])))  # stable: shuffled ties stay shuffled
    starts = list(range(0, len(order), batch_size))
    if rng is not None:
        rng.shuffle(starts)
    for start in starts:
        chosen = [pairs[i] for i in order[start:start + batch_size]]
        src = pad([s + [EOS_ID] for s, _ in chosen])
        tgt = pad([[BOS_ID] + t + [EOS_ID] for _, t in chosen])
        yield src, tgt[:, :-1], tgt[:, 1:]


def pad(sequences: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(sequences), max(map(len, sequences))), PAD_ID, dtype=torch.long)
    for row, ids in enumerate(sequences):
        out[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


@torch.no_grad()
def validation_loss(model, pairs, batch_size, device) -> float:
    """Mean per-token cross entropy (no smoothing), the early-stopping criterion."""
    model.eval()
    total, tokens = 0.0, 0
    for src, tgt_in, tgt_out in batches(pairs, batch_size):
        src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
        n = int((tgt_out != PAD_ID).sum())
        total += sequence_loss(model(src, tgt_in), tgt_out).item() * n
        tokens += n
    return total / tokens


def sequence_loss_of_batch(model, src, tgt_in, tgt_out, args):
    return sequence_loss(model(src, tgt_in), tgt_out, args.label_smoothing)


@torch.no_grad()
def composed_validation_loss(model, denoiser, pairs, batch_size, device, error_free: Callable | None = None,
                             gamma: float = -50.0) -> float:
    """Composed fine-tuning's early-stopping criterion, as in the paper: the cross entropy of the
    composition Pi(f(x)) on the gold y, where f decodes greedily and Pi is teacher-forced. With an
    error detector (see composed_loss), a prediction g passes costs 0 if it is y and -gamma if not."""
    model.eval()
    predicted_pairs = []  # (f(x), y)
    for src, _, tgt_out in batches(pairs, batch_size):
        max_len = max_output_length(model, src)
        predictions = model.generate(src.to(device), max_len=max_len)
        predicted_pairs += zip(predictions, [strip_special(row) for row in tgt_out.tolist()])
    passed = error_free([prediction for prediction, _ in predicted_pairs]) if error_free else [False] * len(pairs)
    flagged = [pair for pair, ok in zip(predicted_pairs, passed) if not ok]

    def tokens(some_pairs):  # the decoder predicts y + EOS
        return sum(len(y) + 1 for _, y in some_pairs)

    total = validation_loss(denoiser, flagged, batch_size, device) * tokens(flagged) if flagged else 0.0
    total += sum(-gamma for (prediction, y), ok in zip(predicted_pairs, passed) if ok and prediction != y)
    return total / tokens(predicted_pairs)


def fit(model, train_pairs_for_epoch, val_pairs, args, out_dir, extra: dict, trainable=None, on_epoch=None,
        loss_fn=sequence_loss_of_batch, validate=None):
    """Train with AdamW, validate after every epoch, keep the best epoch
    (lowest validation loss) in out_dir/model.pt, and stop after `args.patience` epochs
    without improvement. train_pairs_for_epoch(epoch) gives that epoch's (src, tgt) id pairs
    (the denoiser corrupts afresh each epoch). `trainable` may name the only parameters to
    train (BART-style fine-tuning's first stage trains the encoder alone). With args.resume, continue
    from out_dir/last.pt. `extra` is stored in every checkpoint (tokenizer bytes, ...).
    loss_fn(model, src, tgt_in, tgt_out, args) is the training loss of a batch and validate(model)
    the early-stopping criterion (default: validation_loss on val_pairs)."""
    device = pick_device(args.device)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay)
    steps_per_epoch = -(-len(train_pairs_for_epoch(1)) // args.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: learning_rate_factor(step, args, args.epochs * steps_per_epoch))
    state = {"epoch": 0, "best_loss": float("inf"), "best_epoch": 0, "history": []}
    last_path, best_path = os.path.join(out_dir, "last.pt"), os.path.join(out_dir, "model.pt")
    if args.resume and os.path.exists(last_path):
        last = load_checkpoint(last_path, needs=("model", "optimizer", "scheduler", "state", "rng"))
        model.load_state_dict(last["model"])
        optimizer.load_state_dict(last["optimizer"])
        scheduler.load_state_dict(last["scheduler"])
        state = last["state"]
        torch.set_rng_state(last["rng"]["torch"])
        print(f"resumed from {last_path} after epoch {state['epoch']}", file=sys.stderr)

    def checkpoint(**more):
        return {"config": asdict(model.config), "model": model.state_dict(), "args": vars(args), **extra, **more}

    while state["epoch"] < args.epochs and state["epoch"] - state["best_epoch"] < args.patience:
        epoch = state["epoch"] + 1
        epoch_args = argparse.Namespace(**{**vars(args), "label_smoothing": label_smoothing_at(epoch, args)})
        train_loss = train_one_epoch(model, train_pairs_for_epoch(epoch), optimizer, scheduler, epoch_args, device,
                                     trainable, f"epoch {epoch}/{args.epochs}", loss_fn)
        with autocast(args.precision, device):
            val_loss = validate(model) if validate else validation_loss(model, val_pairs, args.batch_size, device)
        state["epoch"] = epoch
        state["history"].append({"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss})
        improved = val_loss < state["best_loss"]
        if improved:
            state["best_loss"], state["best_epoch"] = val_loss, epoch
            save_checkpoint(best_path, checkpoint(best_val_loss=val_loss, epoch=epoch))
        notes = on_epoch(model, epoch) if on_epoch else ""
        print(f"epoch {epoch}: train loss {train_loss:.4f}, val loss {val_loss:.4f}"
              f"{' (best)' if improved else ''}{notes}", file=sys.stderr, flush=True)
        save_checkpoint(last_path, checkpoint(optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
                                              state=state, rng={"torch": torch.get_rng_state()}))
    return state


def learning_rate_factor(step: int, args, total_steps: int) -> float:
    """The multiplier of the peak rate at `step`: a linear warm-up from --warmup-start-lr, then
      constant      the peak to the end;
      inverse-sqrt  peak * sqrt(warm-up steps / step), fairseq's schedule, which the paper's models used;
      linear        a decay that reaches 0 at the last step (the cpu preset).
    Annealing matters on the cpu preset: a run that ends at the peak rate stops wherever the noise of its
    last steps left it. The linear schedule is relative to the run, so its warm-up takes at most a tenth of
    it: a fixed 300-step warm-up outlasted a 128-step composed run, which never came near its peak rate."""
    warmup_steps = args.warmup_steps
    if args.lr_schedule == "linear":
        warmup_steps = min(warmup_steps, total_steps // 10)
    warmup_steps = max(1, warmup_steps)
    start = args.warmup_start_lr / args.lr
    warmup = min(1.0, start + (1.0 - start) * (step + 1) / warmup_steps)
    if args.lr_schedule == "linear":
        return warmup * max(0.0, 1.0 - step / total_steps)
    if args.lr_schedule == "inverse-sqrt":
        return warmup * min(1.0, math.sqrt(warmup_steps / (step + 1)))
    return warmup


def train_one_epoch(model, pairs, optimizer, scheduler, args, device, trainable, what, loss_fn) -> float:
    model.train()
    if trainable is not None:  # freeze the rest
        names = set(trainable)
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(name in names)
    rng = random.Random(f"{args.seed}-{what}")
    n_batches = -(-len(pairs) // args.batch_size)
    meter = Progress(n_batches, what, every_seconds=30)
    total, tokens, start = 0.0, 0, time.time()
    for src, tgt_in, tgt_out in batches(pairs, args.batch_size, rng):
        src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
        with autocast(args.precision, device):
            loss = loss_fn(model, src, tgt_in, tgt_out, args)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
        optimizer.step()
        scheduler.step()
        n = int((tgt_out != PAD_ID).sum())
        total, tokens = total + loss.item() * n, tokens + n
        meter.step(extra=f"loss {total / tokens:.3f}, {tokens / (time.time() - start):.0f} tok/s")
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return total / tokens


# ============================================================================
# 8. Judge
# ============================================================================
# A SansType program is one line: `$` ends a source line and `~` is indentation. The judge
# compiles it with g++ after a fixed prelude, runs it on the test's stdin and compares the
# stripped stdout with the gold output, as the paper's evaluation does.
#
# Programs come straight from a model, so they are hostile until proven otherwise: every
# compilation and run has a time limit and is killed with its whole process group, and every
# run goes through a tiny C launcher (SANDBOX_C) that drops root, forbids new processes and
# new files, and caps CPU, memory and output before it executes the program.
#
# Speed: g++ spends most of its time parsing <iostream>, so compiling 500 programs one by one
# parses it 500 times. Instead, programs that are one self-contained `int main () { ... }`
# share a translation unit, each inside its own namespace, and a dispatcher `main` calls the
# program named by argv[1]. A program whose lines hold a compile error is taken out of the
# batch and the rest is compiled again. Every run is still its own sandboxed process.

CPP_PRELUDE = "#include <iostream>\n#include <string>\n#include <algorithm>\nusing namespace std;\n"
GXX = ["g++", "-std=gnu++17", "-O0", "-w", "-static", "-pipe"]  # static: a jailed run may not open .so files
COMPILE_SECONDS = 20         # one program; a batch gets 0.2 s more per program
COMPILE_MEMORY_MB = 2048
RUN_CPU_SECONDS = 2
RUN_WALL_SECONDS = 5
RUN_MEMORY_MB = 512
RUN_OUTPUT_KB = 1024
BATCH_SIZE = 100             # at most this many programs per translation unit

SANDBOX_C = r"""
/* sandbox CPU_S MEMORY_MB FILE_KB tool|jail PROGRAM [ARGS...]
   tool: cap CPU time, memory and file size, then run PROGRAM found on PATH (the compiler).
   jail: also drop root (the kernel never applies the process limit to root), allow no new
   process (RLIMIT_NPROC 0) and no new file (RLIMIT_NOFILE 3: stdin, stdout, stderr only),
   and send the program's stderr to /dev/null, so that anything on our stderr is ours. */
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static int report = 2;
static void fail(const char *what) { dprintf(report, "sandbox: %s failed\n", what); exit(122); }
static void limit(int resource, rlim_t soft, rlim_t hard) {
    struct rlimit r = {soft, hard};
    if (setrlimit(resource, &r) != 0) fail("setrlimit");
}
int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: sandbox CPU_S MEMORY_MB FILE_KB tool|jail PROGRAM ...\n"); return 122; }
    rlim_t cpu = atol(argv[1]), memory = (rlim_t)atol(argv[2]) << 20, file = (rlim_t)atol(argv[3]) << 10;
    int jail = strcmp(argv[4], "jail") == 0;
    limit(RLIMIT_CPU, cpu, cpu + 1);  /* SIGXCPU at the soft limit */
    limit(RLIMIT_AS, memory, memory);
    limit(RLIMIT_FSIZE, file, file);  /* SIGXFSZ past the cap, also for stdout redirected to a file */
    limit(RLIMIT_CORE, 0, 0);
    if (!jail) { execvp(argv[5], argv + 5); fail("exec"); }
    int program = open(argv[5], O_RDONLY | O_CLOEXEC);  /* opened while we may still read it */
    int null = open("/dev/null", O_WRONLY);
    report = fcntl(2, F_DUPFD_CLOEXEC, 3);
    if (program < 0 || null < 0 || report < 0 || dup2(null, 2) < 0) fail("open");
    close(null);
    if (getuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534))) fail("dropping root");
    limit(RLIMIT_NPROC, 0, 0);
    limit(RLIMIT_NOFILE, 3, 3);
    char *empty_environment[] = {NULL};
    fexecve(program, argv + 5, empty_environment);
    fail("exec");
}
"""


@dataclass
class RunResult:
    status: str        # ok | compile_error | runtime_error | timeout
    stdout: str = ""
    error: str = ""    # the compiler's first error, or why the run failed


@dataclass
class _Build:          # where a program's binary is, and how to call it
    binary: str | None
    args: list[str]
    error: str = ""


@dataclass(frozen=True)
class _Recipe:         # how a dataset's program lines become C++ and are compiled
    prelude: str       # source text before the program
    body: Callable[[str], str]  # program line -> C++ source
    gxx: tuple


def to_cpp(program: str) -> str:
    """SansType code line -> a whole C++ source file."""
    return CPP_PRELUDE + program_body(program)


def program_body(program: str) -> str:
    return program.replace("~", " ").replace("$", "\n") + "\n"


SANSTYPE = _Recipe(CPP_PRELUDE, program_body, tuple(GXX))


_RUN_CACHE: dict[tuple[str, str], RunResult] = {}


def run_programs(programs: list[str], stdins: list[str], progress: str | None = None,
                 jobs: int | None = None, cache: bool = True, share_units: bool = True) -> list[RunResult]:
    """Compile and run programs[i] on stdins[i] (an .inp line) on `jobs` cores (all). With
    `progress`, print progress lines with an ETA to stderr, calling the programs so.
    share_units=False compiles every program alone (slow; for checking the batching)."""
    if len(programs) != len(stdins):
        raise ValueError(f"{len(programs)} programs but {len(stdins)} inputs")
    jobs = jobs or os.cpu_count() or 1
    pairs = [k for k in dict.fromkeys(zip(programs, stdins)) if not (cache and k in _RUN_CACHE)]
    inputs_of = {}
    for program, stdin in pairs:
        inputs_of.setdefault(program, []).append(stdin)
    shared = {p: None for p in inputs_of if share_units and can_share_unit(p)}  # an ordered set
    units = [[p] for p in inputs_of if p not in shared] + _split_evenly(list(shared), jobs)
    meter = Progress(len(pairs), f"judging {progress}") if progress else None
    results = {}
    _sandbox_binary()  # compiled once, here, not by two threads at the same time

    def build_and_run(unit: list[str], workdir: str):
        os.makedirs(workdir)
        builds = _build_unit(unit, workdir)
        for program in unit:
            for stdin in inputs_of[program]:
                rundir = _fresh_dir(workdir)
                results[program, stdin] = _run(builds[program], stdin, rundir)
                shutil.rmtree(rundir)
                if meter:
                    meter.step()
        shutil.rmtree(workdir)  # binaries are large (static): free the disk as we go

    with tempfile.TemporaryDirectory(prefix="judge-") as workdir, ThreadPoolExecutor(jobs) as pool:
        list(pool.map(build_and_run, units, [os.path.join(workdir, f"unit{i}") for i in range(len(units))]))
    if cache:
        _RUN_CACHE.update(results)
    return [results.get(k) or _RUN_CACHE[k] for k in zip(programs, stdins)]


def judge_programs(programs: list[str], stdins: list[str], expected: list[str], **kwargs) -> list[dict]:
    """One verdict per program: correct, wrong_output, compile_error, runtime_error or timeout.
    A program is correct when it compiles, exits normally and its stripped stdout is the
    gold output (stripped too)."""
    verdicts = []
    for result, gold in zip(run_programs(programs, stdins, **kwargs), expected, strict=True):
        if result.status == "ok":
            verdict = "correct" if result.stdout.strip() == gold.strip() else "wrong_output"
            verdicts.append({"verdict": verdict, "stdout": result.stdout[:200]})
        else:
            verdicts.append({"verdict": result.status, "error": result.error})
    return verdicts


def _split_evenly(items: list, jobs: int) -> list[list]:
    """Chunks of at most BATCH_SIZE, as many as a multiple of `jobs`, so both cores stay busy."""
    if not items:
        return []
    n_chunks = -(-len(items) // BATCH_SIZE)
    n_chunks = -(-n_chunks // jobs) * jobs
    return [chunk for chunk in (items[i::n_chunks] for i in range(n_chunks)) if chunk]


def _fresh_dir(parent: str) -> str:
    return tempfile.mkdtemp(dir=parent)


# --- which programs may share a translation unit -----------------------------------------

_MAIN_HEAD = re.compile(r"\s*int\s+main\s*\(\s*\)\s*\{")
_OPENERS, _CLOSERS = "([{", ")]}"


def can_share_unit(program: str, body=program_body) -> bool:
    """True when the program is exactly one `int main () { ... }` with (), [] and {} properly
    nested, and nothing that reaches outside it: no preprocessor, comments, backslashes,
    digraphs or raw strings. Wrapped in a namespace, such a program cannot change how its
    neighbours compile, and g++'s error recovery stays inside its braces."""
    code = _without_literals(body(program))
    if code is None or not _MAIN_HEAD.match(code):
        return False
    if any(bad in code for bad in ("#", "//", "/*", "\\", "<%", "%>", "<:", ":>", "%:", "??")):
        return False
    stack = []
    for i, ch in enumerate(code):
        if ch in _OPENERS:
            stack.append(ch)
        elif ch in _CLOSERS:
            if not stack or _OPENERS.index(stack.pop()) != _CLOSERS.index(ch):
                return False
            if ch == "}" and not stack:  # main's closing brace must end the program
                return code[i + 1:].strip() == ""
    return False


def _without_literals(code: str) -> str | None:
    """Blank out the insides of string and character literals, so that their brackets do not
    count; None when a literal is raw or unterminated."""
    out, i = [], 0
    while i < len(code):
        if code[i] not in "\"'":
            out.append(code[i])
            i += 1
            continue
        quote, end = code[i], i + 1
        while end < len(code) and code[end] not in (quote, "\n"):
            end += 2 if code[end] == "\\" else 1
        if end >= len(code) or code[end] != quote or code[i - 1:i] == "R":
            return None
        out.append(quote + " " * (end - i - 1) + quote)
        i = end + 1
    return "".join(out)


# --- building ----------------------------------------------------------------------------

def _build_unit(unit: list[str], workdir: str, recipe: _Recipe = SANSTYPE) -> dict[str, _Build]:
    """Compile the programs of a unit. One program is compiled as it is; several share a
    translation unit. A program whose lines hold an error gets that error as its verdict
    and the others are compiled again without it; when a failure names no program's line
    (a link error, a timeout), every remaining program is compiled alone."""
    if len(unit) == 1:
        return {unit[0]: _build_alone(unit[0], workdir, recipe)}
    builds, pending = {}, list(unit)
    while pending:
        source, spans = _shared_source(pending, recipe)
        binary, errors = _compile(source, _fresh_dir(workdir), COMPILE_SECONDS + 0.2 * len(pending), recipe.gxx)
        if binary:
            builds.update({p: _Build(binary, [str(slot)]) for slot, p in enumerate(pending)})
            break
        first_error = {}
        for line, message in errors:
            for slot, (start, end) in enumerate(spans):
                if start <= line < end:
                    first_error.setdefault(slot, f"line {line - start + 1}: {message}")
        if not first_error:
            builds.update({p: _build_alone(p, _fresh_dir(workdir), recipe) for p in pending})
            break
        builds.update({pending[slot]: _Build(None, [], error) for slot, error in first_error.items()})
        pending = [p for slot, p in enumerate(pending) if slot not in first_error]
    return builds


def _build_alone(program: str, workdir: str, recipe: _Recipe = SANSTYPE) -> _Build:
    binary, errors = _compile(recipe.prelude + recipe.body(program), workdir, COMPILE_SECONDS, recipe.gxx)
    if binary:
        return _Build(binary, [])
    first_line = recipe.prelude.count("\n") + 1
    line, message = errors[0]
    return _Build(None, [], f"line {line - first_line + 1}: {message}" if line >= first_line else message)


def _shared_source(programs: list[str], recipe: _Recipe) -> tuple[str, list[tuple[int, int]]]:
    """One C++ file holding every program in a namespace of its own, and each program's span
    of lines [start, end), so that an error's line number tells whose it is. Each main gets a
    `return 0;` before its closing brace: a function named main in a namespace, unlike the
    real one, does not return 0 when it runs off its end."""
    parts, spans, line = [recipe.prelude], [], recipe.prelude.count("\n") + 1
    for slot, program in enumerate(programs):
        body = recipe.body(program)
        end = body.rindex("}")  # main's closing brace ends a program that may share a unit
        body = body[:end] + "return 0; " + body[end:]
        parts += [f"namespace sansprog_{slot} {{\n", body, "}\n"]
        spans.append((line + 1, line + 1 + body.count("\n")))
        line += body.count("\n") + 2
    table = ", ".join(f"sansprog_{slot}::main" for slot in range(len(programs)))
    parts.append(f"int main(int argc, char **argv) {{\n    int (*const programs[])() = {{{table}}};\n"
                 f"    return programs[std::stoi(argv[1])]();\n}}\n")
    return "".join(parts), spans


_ERROR_LINE = re.compile(r"^source\.cpp:(\d+):\d+: (?:fatal )?error: (.*)$", re.M)


def _compile(source: str, workdir: str, seconds: float, gxx) -> tuple[str | None, list[tuple[int, str]]]:
    """g++ in the sandbox. Returns (binary or None, [(line, message), ...] of its errors)."""
    with open(os.path.join(workdir, "source.cpp"), "w", encoding="utf-8") as f:
        f.write(source)
    code, stderr = _sandboxed([*gxx, "source.cpp", "-o", "program"], workdir, seconds, jail=False)
    if code is None:
        return None, [(0, f"compilation timed out after {seconds:.0f} s")]
    if code != 0:
        errors = [(int(line), re.sub(r"\bsansprog_\d+::", "", message))  # our namespaces are not the program's
                  for line, message in _ERROR_LINE.findall(stderr)]
        return None, errors or [(0, (stderr.strip().splitlines() or [f"g++ exited with {code}"])[-1])]
    return os.path.join(workdir, "program"), []


# --- running -----------------------------------------------------------------------------

def _run(build: _Build, stdin: str, rundir: str) -> RunResult:
    if build.binary is None:
        return RunResult("compile_error", error=build.error)
    stdin_path, stdout_path = os.path.join(rundir, "stdin"), os.path.join(rundir, "stdout")
    with open(stdin_path, "w", encoding="utf-8") as f:
        f.write(stdin + "\n")
    code, stderr = _sandboxed([build.binary, *build.args], rundir, RUN_WALL_SECONDS, jail=True,
                              stdin_path=stdin_path, stdout_path=stdout_path)
    if stderr:  # the program's own stderr goes to /dev/null: this is the sandbox failing
        raise RuntimeError(f"the judge's sandbox failed: {stderr.strip()}")
    with open(stdout_path, "rb") as f:
        stdout = f.read().decode(errors="replace")
    if code is None or code == -signal.SIGXCPU:
        return RunResult("timeout", stdout, f"over {RUN_WALL_SECONDS} s wall or {RUN_CPU_SECONDS} s CPU")
    if code == -signal.SIGXFSZ:
        return RunResult("runtime_error", stdout, f"output over {RUN_OUTPUT_KB} KiB")
    if code < 0:
        return RunResult("runtime_error", stdout, f"killed by {signal.Signals(-code).name}")
    if code > 0:
        return RunResult("runtime_error", stdout, f"exit code {code}")
    return RunResult("ok", stdout)


def _sandboxed(argv, cwd, seconds, jail, stdin_path=None, stdout_path=None):
    """Run argv under the sandbox launcher in a process group of its own, killing the whole
    group (the compiler's cc1plus and ld too) past `seconds` of wall time.
    Returns (exit code, or None after a timeout; stderr)."""
    limits = [RUN_CPU_SECONDS, RUN_MEMORY_MB, RUN_OUTPUT_KB, "jail"] if jail else \
             [math.ceil(seconds), COMPILE_MEMORY_MB, 256 * 1024, "tool"]
    with open(stdin_path or os.devnull, "rb") as stdin, open(stdout_path or os.devnull, "wb") as stdout:
        proc = subprocess.Popen([_sandbox_binary(), *map(str, limits), *argv], cwd=cwd, stdin=stdin,
                                stdout=stdout, stderr=subprocess.PIPE, start_new_session=True,
                                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"})
        try:
            _, stderr = proc.communicate(timeout=seconds)
            return proc.returncode, stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None, ""


@functools.cache
def _sandbox_binary() -> str:
    """Compile the launcher once per process (run_programs asks before it starts threads);
    removed when the process exits."""
    for tool in ("gcc", "g++"):
        if shutil.which(tool) is None:
            raise UsageError(f"the judge needs {tool}, which is not on PATH (Debian: apt-get install g++)")
    workdir = tempfile.mkdtemp(prefix="sandbox-")
    atexit.register(shutil.rmtree, workdir, True)
    with open(os.path.join(workdir, "sandbox.c"), "w") as f:
        f.write(SANDBOX_C)
    subprocess.run(["gcc", "-O2", "-o", "sandbox", "sandbox.c"], cwd=workdir, check=True, capture_output=True)
    return os.path.join(workdir, "sandbox")


# --- SPoC: whole programs, judged on their problem's hidden test cases ------------------------
# A SPoC program (make_spoc.py) is one line of C++ tokens: a `$` token ends a source line and a
# `~` token is one level of indentation (the C++ operator ~ is written glued to its operand, so a
# lone `~` is never code). String and character literals are single tokens, spaces included.
# A program is correct when it compiles after SPOC_PRELUDE and, on every test case of its
# problem, exits normally and prints the expected output, compared as whitespace-separated
# tokens (a missing final newline or trailing spaces are not wrong); judging stops at the first
# case that fails.
#
# Speed: g++ spends most of a second parsing <bits/stdc++.h>, so the prelude is precompiled
# once per process (a .gch, same flags), binaries are linked by gold, and programs are judged
# on all cores. Programs that are only an `int main () { ... }` (can_share_unit, and no
# `static`, whose storage would add up in a shared binary) share translation units as
# SansType's do: with no globals of their own, a namespace around them changes nothing. Every
# other program (globals, functions, macros) is compiled alone, so that it means exactly
# what it would in a file of its own.

SPOC_PRELUDE = "#include <bits/stdc++.h>\nusing namespace std;\n"
# C++11, the dialect of SPoC's time (its programs pass with GCC 5.5): later ones drop `gets` and add std names
# (std::size, std::visit) that clash with the programs' own.
SPOC_GXX = ["g++", "-std=gnu++11", "-O0", "-w", "-static", "-pipe"]
_SPOC_TOKEN = re.compile(r"""(?:u8|[uUL])?"(?:\\.|[^"\\])*"|(?:u8|[uUL])?'(?:\\.|[^'\\])*'|\S+""")


def spoc_source(program: str) -> str:
    """SPoC code line -> C++ source (without the prelude): `$` ends a line, `~` indents."""
    layout = {"$": "\n", "~": "\t"}
    return "".join(layout.get(token, token + " ") for token in _SPOC_TOKEN.findall(program)) + "\n"


def judge_spoc_programs(programs: list[str], cases: list[list[tuple[str, str]]], progress: str | None = None,
                        jobs: int | None = None, fast: bool = True) -> list[dict]:
    """One verdict per program: correct, wrong_output, compile_error, runtime_error or timeout;
    cases[i] holds the (stdin, expected stdout) pairs of program i's problem. A failed case's
    number (from 0) is in "case". fast=False compiles every program alone, without the
    precompiled header and with the default linker (slow; for checking the fast path)."""
    if len(programs) != len(cases):
        raise ValueError(f"{len(programs)} programs but {len(cases)} lists of test cases")
    jobs = jobs or os.cpu_count() or 1
    meter = Progress(len(programs), f"judging {progress}") if progress else None
    recipe = _spoc_recipe(fast)  # built once, here, not by two threads at the same time
    _sandbox_binary()
    where = {}  # program -> the positions it holds in `programs`
    for i, program in enumerate(programs):
        where.setdefault(program, []).append(i)
    shared = [p for p in where if fast and can_share_unit(p, spoc_source) and "static" not in p.split()]
    units = [[p] for p in where if p not in set(shared)] + _split_evenly(shared, jobs)
    verdicts = [None] * len(programs)

    def build_and_judge(unit: list[str], workdir: str):
        os.makedirs(workdir)
        builds = _build_unit(unit, workdir, recipe)
        for program in unit:
            for i in where[program]:
                verdicts[i] = _judge_on_cases(builds[program], cases[i], workdir)
                if meter:
                    meter.step()
        shutil.rmtree(workdir)  # binaries are large (static): free the disk as we go

    with tempfile.TemporaryDirectory(prefix="judge-") as workdir, ThreadPoolExecutor(jobs) as pool:
        list(pool.map(build_and_judge, units, [os.path.join(workdir, f"unit{i}") for i in range(len(units))]))
    return verdicts


def spoc_compiles(programs: list[str]) -> list[bool]:
    """SPoC's error detector g (Appendix E), as the compiler: a program has no error (g = 0) when it
    compiles. The paper trains a classifier on the denoising data; one from Pi's own copy likelihood
    told the sample's clean programs from corrupted ones hardly better than chance (README)."""
    verdicts = judge_spoc_programs(programs, [[] for _ in programs])  # no cases: compile (and link) only
    return [verdict["verdict"] != "compile_error" for verdict in verdicts]


def error_detector(checkpoint: dict) -> Callable | None:
    """The error detector g a denoiser's checkpoint names (train_denoiser.py --error-detector), or None."""
    return spoc_compiles if checkpoint.get("error_detector") == "compile" else None


def _judge_on_cases(build: _Build, cases: list[tuple[str, str]], workdir: str) -> dict:
    """Run a built program on its cases until one fails."""
    if build.binary is None:
        return {"verdict": "compile_error", "error": build.error}
    for case, (stdin, expected) in enumerate(cases):
        result = _run(build, stdin, _fresh_dir(workdir))
        if result.status != "ok":
            return {"verdict": result.status, "case": case, "error": result.error}
        if result.stdout.split() != expected.split():
            return {"verdict": "wrong_output", "case": case, "stdout": result.stdout[:200]}
    return {"verdict": "correct"}


@functools.cache
def _spoc_recipe(fast: bool) -> _Recipe:
    """SPOC_PRELUDE in a header that g++ includes before every program (-include), precompiled
    beside it (prelude.h.gch, with SPOC_GXX's flags, so that g++ uses it) when fast; the folder
    is removed when the process exits."""
    workdir = tempfile.mkdtemp(prefix="spoc-prelude-")
    atexit.register(shutil.rmtree, workdir, True)
    header = os.path.join(workdir, "prelude.h")
    with open(header, "w") as f:
        f.write(SPOC_PRELUDE)
    if fast:
        flags = [flag for flag in SPOC_GXX if flag != "-static"]
        subprocess.run([*flags, "-x", "c++-header", header, "-o", header + ".gch"], check=True, capture_output=True)
    return _Recipe("", spoc_source, (*SPOC_GXX, "-include", header, *(["-fuse-ld=gold"] if fast else [])))


# ============================================================================
# 9. Command-line plumbing: one-line errors and progress lines
# ============================================================================

class UsageError(Exception):
    """Bad input from the user (a missing file, a checkpoint that is not one, ...): the scripts
    print its message on one line and exit with code 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage dump), with exit code 2 as usual."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


RESUME_HINT = "interrupted: run again with --resume to continue from the last finished epoch"


def run_main(script: str, work, args, on_interrupt: str = "interrupted"):
    """Run a script's work: bad input becomes one line on stderr and exit code 2."""
    try:
        work(args)
    except UsageError as error:
        print(f"{script}: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(on_interrupt)


class Progress:
    """Prints `what: done/total (rate/s, ETA 1m23s)` to stderr, at most every few seconds."""

    def __init__(self, total: int, what: str, every_seconds: float = 5.0):
        self.total, self.what, self.every = total, what, every_seconds
        self.done, self.start = 0, time.time()
        self.last_print = self.start  # the first line waits for a rate worth an ETA
        self.lock = threading.Lock()  # steps may come from several threads

    def step(self, n: int = 1, extra: str = ""):
        with self.lock:
            self.done += n
            now = time.time()
            if now - self.last_print >= self.every or self.done == self.total:
                self.last_print = now
                print(self.line(now, extra), file=sys.stderr, flush=True)

    def line(self, now: float, extra: str = "") -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        return (f"{self.what}: {self.done}/{self.total} ({rate:.1f}/s, {extra + ', ' if extra else ''}"
                f"elapsed {format_seconds(elapsed)}, ETA {format_seconds(eta)})")


def format_seconds(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"
