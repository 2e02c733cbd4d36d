"""Shared pieces of composed-finetuning: everything the scripts have in common.

Table of contents
  1. Tokenizer and data files   sentencepiece BPE over the joined source/output vocabulary; data folders, kept
  2. Transformer                the encoder-decoder: encode, decode (teacher forcing), generate; then greedy
                                translation and Pi's repairs (translate, denoise)
     2b. Fast decoding          optional reading: generate's cache, fixed-shape steps and CUDA graph, which must
                                decode as the plain decoder does (re-running decode over the prefix); decode_step
                                draws each token (composed training's samples y' too)
  3. U-Net                      the image denoiser of the font experiment (fonts.py)
  4. Corruptions                noise for denoiser pre-training: code-based, random deletions, SMILES edits, any
                                task's piece edits; RDKit's canonical SMILES, the molecules' judge
  5. Checkpoints, run folders   self-contained model files; a finished run is never replaced unasked; resume:
     and resume                 what a resumed run keeps and how it is restored
  6. Settings and the method's  what every preset shares (the presets' columns, the architecture, AdamW's betas, ...)
     losses                     and Eq. 1's settings (EQ1), just above Eq. 1 (composed_loss); the REINFORCE baseline,
                                the reward's log-likelihood, the estimators; the validation criteria that keep an epoch
  7. Training loop              fit() with early stopping, just below those criteria; each epoch's batches, made ahead
                                in a worker; one epoch's steps, from a batch to the optimizer's step; schedules, bf16;
                                no waiting on a GPU
  8. Command line               flags with the preset's (or a resumed run's) values, one-line errors, progress

The judge (compile and run programs, safely and in batches) is judge.py, a module of its own; what only
SPoC needs (its noise and test cases) is in spoc.py.
"""

import argparse
import ctypes
import glob
import io
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np
import sentencepiece
import torch
import torch.nn as nn
import torch.nn.functional as F

import judge


class UsageError(Exception):
    """Bad input from the user (a missing file, a checkpoint that is not one, ...): the scripts
    print its message on one line and exit with code 2."""


class TrainingFailed(Exception):
    """A run that trained but kept no model (no epoch had a finite validation loss): one line and exit code 1."""


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
DATA_MAKERS = "make_sanstype.py, make_spoc.py, make_molecules.py or make_task.py"  # each writes a data folder


def train_tokenizer(lines: list[str], vocab_size: int, split_digits: bool = False) -> bytes:
    """Train a BPE model on text lines of vocab_size pieces, or as many as the lines support, and say how many; return
    the model file's bytes. One thread and every sentence used (no
    sampling), so the same lines give the same bytes. split_digits: every digit a piece of its own (a task's
    numbers; BPE would otherwise merge a number's last digits with what follows, and a model could not copy them)."""
    def train(size):
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=size,
            character_coverage=1.0, user_defined_symbols=STRUCTURE_PIECES, num_threads=1, split_digits=split_digits,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, minloglevel=2)
        return model.getvalue()
    try:
        model, pieces = train(vocab_size), vocab_size
    except RuntimeError as error:  # sentencepiece: "Vocabulary size too high (600). Please set it to a value <= N."
        supported = re.search(r"<= (\d+)", str(error))
        if not supported:
            raise UsageError(f"cannot train a {vocab_size}-piece tokenizer: {str(error).split('] ')[-1]}") from None
        pieces = int(supported.group(1))
        print(f"the training data supports at most {pieces} pieces, not {vocab_size}: the tokenizer has {pieces}")
        model = train(pieces)
    print(f"trained a {pieces}-piece sentencepiece BPE tokenizer")
    return model


def load_tokenizer(model_bytes):
    """A SentencePieceProcessor from model bytes (as stored in spm.model and in every checkpoint)."""
    return sentencepiece.SentencePieceProcessor(model_proto=model_bytes)


def write_lines(path: str, lines):
    """One line per item, written to a temporary file first so a kill never leaves half a file."""
    with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)
    os.replace(path + ".tmp", path)


def read_lines(path: str) -> list[str]:
    """The lines of a text file of a data folder (one example a line); a final newline does not make an extra empty
    line."""
    if not os.path.isfile(path):
        raise UsageError(f"missing file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    return lines[:-1] if lines and lines[-1] == "" else lines


def read_tokenizer_bytes(data_dir: str) -> bytes:
    """The bytes of a data folder's spm.model, checked to be a sentencepiece model."""
    path = os.path.join(data_dir, "spm.model")
    if not os.path.isfile(path):
        raise UsageError(f"missing {path}: make the data with {DATA_MAKERS}")
    with open(path, "rb") as f:
        model = f.read()
    try:
        if not model:  # parses as an empty model, about which sentencepiece then logs three lines at every use
            raise RuntimeError
        load_tokenizer(model)
    except RuntimeError:  # sentencepiece's parse errors name neither the file nor a way on
        raise UsageError(f"{path} is not a sentencepiece model: make the data again with {DATA_MAKERS}") from None
    return model


# Every data folder names its dataset in dataset.json (each make_*.py writes it), so that the
# later stages pick its presets, noise and judge by name.
DATASETS = ("sanstype", "spoc", "molecules", "task")  # task: a folder make_task.py made from a user's pairs


def write_manifest(data_dir: str, dataset: str, **facts):
    with open(os.path.join(data_dir, "dataset.json"), "w", encoding="utf-8") as f:
        json.dump({"dataset": dataset, **facts}, f, indent=1)


def claim_data_folder(out: str, overwrite: bool, holds: str = "dataset.json"):
    """Make sure a script that writes a data folder may write to `out`, before any work and creating nothing: refuse
    one that cannot be written, or one that holds data (its `holds` file) unless told to --overwrite it: the runs
    trained on that data would no longer match it."""
    check_writable(out)
    if os.path.exists(os.path.join(out, holds)) and not overwrite:
        raise UsageError(f"--out {out}: there is data there already ({holds}); --overwrite replaces it, or name "
                         "another folder")


def read_manifest(data_dir: str) -> dict:
    """A data folder's dataset.json: the dataset it holds (one of DATASETS) and what made it (for SansType,
    authors_splits: the splits taken from the authors' release)."""
    if os.path.isfile(data_dir):  # --data names a folder: a file of it (data/sanstype/train.src) is a likely slip
        raise UsageError(f"--data {data_dir} is a file: name the data folder that holds it "
                         f"({os.path.dirname(data_dir) or '.'})")
    path = os.path.join(data_dir, "dataset.json")
    if not os.path.isfile(path):
        raise UsageError(f"missing {path}: make the data with {DATA_MAKERS}")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
        dataset = manifest["dataset"]
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{path} is not a manifest written by {DATA_MAKERS}") from None
    if dataset not in DATASETS:
        raise UsageError(f"{path} names an unknown dataset {dataset!r} (known: {', '.join(DATASETS)})")
    return manifest


def read_dataset(data_dir: str) -> str:
    """The dataset a data folder holds: one of DATASETS."""
    return read_manifest(data_dir)["dataset"]


def valid_outputs(data_dir: str, outputs: list[str]) -> list[bool] | None:
    """A task's own validity check (make_task.py --valid-command) on outputs; None where the task has none."""
    command = read_manifest(data_dir).get("valid_command")
    if not command:
        return None
    try:
        return judge.check_validity(command, outputs, data_dir)
    except ValueError as error:
        raise UsageError(f"{data_dir}/dataset.json: {error}") from None


# ============================================================================
# 2. Transformer
# ============================================================================
# The encoder-decoder of the paper's SansType models, as fairseq's `transformer` builds it: token embeddings
# scaled by sqrt(d) plus sinusoidal positions, pre-norm layers (x + sublayer(LayerNorm(x)), and one more
# LayerNorm after the last layer, as the authors ran fairseq), ReLU feed-forward, dropout on the residual
# branches, the attention weights and after the ReLU, and one embedding matrix shared by the encoder, the
# decoder and the output projection (one joined vocabulary).

@dataclass
class TransformerConfig:
    """The Transformer's sizes and dropouts. A run's are config_from_args' (its preset's); these defaults, the paper
    preset's, serve the tests and benches."""
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
    """Multi-head attention. In decoding, `cache` holds keys and values kept across steps (start_decoding): a
    cross-attention cache the encoder output's, projected once; a self-attention cache has a slot for every
    position from the start, and x's keys and values go into theirs (`position`), so no step changes a shape."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.q, self.k, self.v, self.out = (linear(d_model, d_model) for _ in range(4))

    def split_heads(self, x):  # (B, T, D) -> (B, H, T, D/H)
        return x.view(x.shape[0], x.shape[1], self.n_heads, -1).transpose(1, 2)

    def forward(self, x, context, mask, cache=None, position=None):
        q = self.split_heads(self.q(x))
        if cache is None:
            k, v = self.k(context), self.v(context)
        else:
            if position is not None:  # self-attention: this step's key and value into their slot
                cache["k"].index_copy_(1, position, self.k(x))
                cache["v"].index_copy_(1, position, self.v(x))
            k, v = cache["k"], cache["v"]
        k, v = self.split_heads(k), self.split_heads(v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(x.shape))


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

    def forward(self, x, self_mask, memory, memory_mask, cache=None, position=None):
        def drop(y):
            return F.dropout(y, self.dropout, self.training)
        y = self.self_norm(x)
        x = x + drop(self.self_attention(y, y, self_mask, cache and cache["self"], position))
        x = x + drop(self.cross_attention(self.cross_norm(x), memory, memory_mask, cache and cache["cross"]))
        return x + drop(self.ffn(self.ffn_norm(x)))


class Decoded(NamedTuple):
    """A decoded batch. tokens (B, T): each row's chosen ids, with EOS where it chose one and PAD after it;
    lengths (B,): the ids before EOS (max_len: cut there, EOS never chosen)."""
    tokens: torch.Tensor
    lengths: torch.Tensor


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
        self.cuda_graphs = {}  # CUDA graphs of decode_step by shape (cuda_graph_decoder); not part of the model

    def embed_tokens(self, tokens, positions=None, one_hot=None):
        """Token embeddings plus sinusoidal positions (default: 0..T-1). one_hot: the same tokens as rows (B, T, V)
        that may carry a gradient (the straight-through estimators' input to the denoiser); their product with the
        embedding matrix is the lookup when they are one-hot."""
        vectors = self.embed(tokens) if one_hot is None else one_hot @ self.embed.weight
        positions = self.positions[:tokens.shape[1]] if positions is None else positions
        return F.dropout(vectors * math.sqrt(self.config.d_model) + positions, self.config.dropout, self.training)

    def encode(self, src, one_hot=None):
        """src (B, S) token ids, PAD-padded (and optionally as one-hot rows, embed_tokens) -> (memory (B, S, D),
        its mask (B, 1, 1, S))."""
        mask = (src != PAD_ID)[:, None, None, :]  # True where a key may be attended to
        x = self.embed_tokens(src, one_hot=one_hot)
        for layer in self.encoder:
            x = layer(x, mask)
        return self.encoder_norm(x), mask

    def decode(self, tgt_in, memory, memory_mask):
        """Logits (B, T, V) for the next token at every position of tgt_in (B, T): teacher forcing."""
        T = tgt_in.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).tril()
        x = self.embed_tokens(tgt_in)
        for layer in self.decoder:
            x = layer(x, causal, memory, memory_mask)
        return self.output_logits(x)

    def output_logits(self, x):
        return self.decoder_norm(x) @ self.embed.weight.T  # the output projection shares the embeddings

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, *self.encode(src))

    @torch.no_grad()
    def generate(self, src, max_len: int = 200, sample: bool = False, repeat: int = 1) -> Decoded:
        """Greedy (or, with sample=True, ancestral) decoding of a batch, each row stopping at EOS or after max_len
        tokens; `repeat` rows per source (one after another, the source encoded once); how the steps run is 2b. A GPU
        is asked whether every row has finished every FINISHED_CHECK steps, never when sampling (composed training's
        y'), so that the host queues the rest of the training step while the GPU samples (finished rows add PAD)."""
        memory, memory_mask = self.encode(src)
        memory, memory_mask = memory.repeat_interleave(repeat, 0), memory_mask.repeat_interleave(repeat, 0)
        if src.is_cuda:
            state, step = cuda_graph_decoder(self, memory, memory_mask, max_len, sample)
        else:
            state = start_decoding(self, memory, memory_mask, max_len, sample)
            step = lambda: decode_step(self, state, written=steps + 1)  # noqa: E731
        steps = 0
        while steps < max_len:
            step()
            steps += 1
            if src.is_cuda:
                if not sample and steps % FINISHED_CHECK == 0 and state.done.all():
                    break
            elif state.done.all():
                break
            elif 4 * state.done[state.rows].sum() >= len(state.rows):
                drop_finished_rows(state)
        tokens = state.tokens[:, 1:steps + 1].clone()  # (a copy: a CUDA graph's buffers serve the next batch)
        lengths = torch.where(state.done, (tokens == EOS_ID).int().argmax(dim=1), max_len)
        return Decoded(tokens, lengths)


def never_generated_mask(like, vocab_size: int):
    """(V,): True at the ids decoders never output (NEVER_GENERATED), on the device of the tensor `like`."""
    ids = torch.arange(vocab_size, device=like.device)
    return (ids == PAD_ID) | (ids == BOS_ID)


def max_output_length(model, src) -> int:
    """Where decoding gives up on a batch: code is about 1.2x as long as its pseudocode."""
    return min(2 * src.shape[1] + 10, model.config.max_positions)


def as_lists(decoded: Decoded) -> list[list[int]]:
    """Each row's ids before EOS, as Python lists (for the tokenizer): a host synchronisation."""
    return [row[:n] for row, n in zip(decoded.tokens.tolist(), decoded.lengths.tolist())]


def with_eos(decoded: Decoded):
    """(B, T + 1): each row's ids, then EOS (also after a cut one), PAD after: a decoded batch as a source."""
    return F.pad(decoded.tokens, (0, 1), value=PAD_ID).scatter(1, decoded.lengths[:, None], EOS_ID)


@torch.no_grad()
def translate(model, tokenizer, texts: list[str], batch_size: int, progress: bool = False) -> list[str]:
    """Greedy outputs of a seq2seq model for a list of texts (the paper decodes greedily), decoded in
    batches of similar source length (less padding) and returned in input order."""
    device = next(model.parameters()).device
    model.eval()
    sources = tokenizer.encode(texts)
    order = sorted(range(len(texts)), key=lambda i: len(sources[i]))
    outputs = [""] * len(texts)
    meter = Progress(len(texts), "decoding") if progress else None
    for start in range(0, len(order), batch_size):
        chosen = order[start:start + batch_size]
        src = pad([sources[i] + [EOS_ID] for i in chosen]).to(device)
        ids = as_lists(model.generate(src, max_len=max_output_length(model, src)))
        for i, text in zip(chosen, tokenizer.decode(ids)):
            outputs[i] = text
        if meter:
            meter.step(len(chosen))
    return outputs


def denoise(denoiser, tokenizer, programs: list[str], batch_size: int, error_free: Callable | None = None,
            progress: bool = False) -> list[str]:
    """Pi(y') for each program: the denoiser's greedy repair. With an error detector
    g (SPoC, Appendix E: Pi(y') = y' where g(y') = 0, else argmax_y p_nu(y | y')), error_free(programs)
    says which programs g passes, and only the others are repaired."""
    passed = error_free(programs) if error_free else [False] * len(programs)
    flagged = [program for program, ok in zip(programs, passed) if not ok]
    repaired = iter(translate(denoiser, tokenizer, flagged, batch_size, progress=progress))
    return [program if ok else next(repaired) for program, ok in zip(programs, passed)]


# ----------------------------------------------------------------------------
# 2b. Fast decoding (optional reading, but for decode_step's draw of each token): how generate decodes quickly, with
#     a key/value cache, steps of fixed shapes and, on a GPU, a CUDA graph. It must decode exactly as the plain
#     decoder, which re-runs Transformer.decode over the whole prefix at every step (tests/test_transformer.py's
#     rerun_decoder).
# ----------------------------------------------------------------------------

@dataclass
class Decoding:
    """One batch's decoding, every tensor allocated at its full size at the start (start_decoding), so that each
    step (decode_step) has the same shapes and CUDA can capture it (cuda_graph_decoder)."""
    tokens: torch.Tensor        # (B, max_len + 1): BOS, then each step's choice; PAD after a row's EOS
    done: torch.Tensor          # (B,) bool: the row has chosen EOS
    position: torch.Tensor      # (1,) the position the next step reads (a tensor: a captured step reads it anew)
    rows: torch.Tensor          # (R,) the rows the steps decode: all B on a GPU; on the CPU finished ones leave
    caches: list                # per decoder layer, for those rows: {"self": {"k", "v"} (R, max_len, D),
                                #                                     "cross": {"k", "v"} (R, S, D)}
    memory_mask: torch.Tensor   # (R, 1, 1, S)
    never_generated: torch.Tensor  # (V,) True at the ids decoders never output (NEVER_GENERATED)
    sample: bool                # draw from the distribution (else: its most likely token)


def start_decoding(model, memory, memory_mask, max_len: int, sample: bool) -> Decoding:
    """A decoding's state, every buffer at its full size; restart_decoding fills it."""
    B, D = memory.shape[0], model.config.d_model
    caches = []
    for layer in model.decoder:
        cross = {"k": layer.cross_attention.k(memory), "v": layer.cross_attention.v(memory)}
        # zeros, not empty: a slot not yet written is masked, but NaN garbage would still poison the softmax
        caches.append({"cross": cross, "self": {name: cross[name].new_zeros(B, max_len, D) for name in "kv"}})
    state = Decoding(tokens=memory.new_empty(B, max_len + 1, dtype=torch.long),
                     done=memory.new_empty(B, dtype=torch.bool),
                     position=memory.new_empty(1, dtype=torch.long), rows=torch.arange(B, device=memory.device),
                     caches=caches,
                     memory_mask=memory_mask.clone(),
                     never_generated=never_generated_mask(memory, model.config.vocab_size), sample=sample)
    return restart_decoding(model, state, memory, memory_mask)


def restart_decoding(model, state: Decoding, memory, memory_mask) -> Decoding:
    """Set a decoding's state, in place, to the start of a new batch of the same shapes."""
    state.tokens.fill_(PAD_ID)
    state.tokens[:, 0] = BOS_ID
    state.done.zero_()
    state.position.zero_()
    state.memory_mask.copy_(memory_mask)
    for layer, cache in zip(model.decoder, state.caches):
        cache["cross"]["k"].copy_(layer.cross_attention.k(memory))
        cache["cross"]["v"].copy_(layer.cross_attention.v(memory))
    return state


def decode_step(model, s: Decoding, written: int | None = None):
    """One more token for each of s.rows, in place: read the tokens at s.position, write each row's next one
    after them (PAD once it has chosen EOS). No host synchronisation and no tensor made on the host, and with
    written=None fixed shapes: CUDA can capture it whole. The new position attends to every self-attention
    slot, those not yet written masked; on the CPU, `written` (the host counts the steps) restricts it to the
    slots written so far, unmasked: half the work."""
    token = s.tokens.index_select(1, s.position)[s.rows]  # (R, 1)
    x = model.embed_tokens(token, model.positions[s.position])
    slots = s.caches[0]["self"]["k"].shape[1] if written is None else written
    visible = (torch.arange(slots, device=token.device) <= s.position)[None] if written is None else None
    for layer, cache in zip(model.decoder, s.caches):
        cache = {"self": {name: cache["self"][name][:, :slots] for name in "kv"}, "cross": cache["cross"]}
        x = layer(x, visible, None, s.memory_mask, cache, s.position)
    logits = model.output_logits(x)[:, -1].float().masked_fill(s.never_generated, float("-inf"))
    if s.sample:  # inverse-CDF draw: one uniform per row (torch.multinomial draws one per class)
        cdf = F.softmax(logits, dim=-1).cumsum(dim=-1)
        uniform = torch.rand(len(s.tokens), 1, device=cdf.device)[s.rows] * cdf[:, -1:]  # as many whoever is left
        next_token = torch.searchsorted(cdf, uniform).squeeze(1).clamp(max=logits.shape[-1] - 1)
    else:
        next_token = logits.argmax(dim=-1)
    done = s.done[s.rows]
    next_token = next_token.masked_fill(done, PAD_ID)  # a finished row stays finished
    s.position += 1
    s.tokens[s.rows, s.position] = next_token
    s.done[s.rows] = done | (next_token == EOS_ID)


def drop_finished_rows(s: Decoding):
    """The CPU's decoding sheds its finished rows (their outputs stay in s.tokens): a step's cost grows with its rows.
    Shedding copies every cache, which costs about a step, so generate sheds them once they are a quarter of it."""
    going = ~s.done[s.rows]
    s.rows, s.memory_mask = s.rows[going], s.memory_mask[going]
    for cache in s.caches:
        for part in cache.values():
            part["k"], part["v"] = part["k"][going], part["v"][going]


# On a GPU, a decoding step of the paper's model is ~200 small kernels, each launched from Python: decoding is bound
# by the launches, not the arithmetic. A CUDA graph of the whole step replays them in one launch. A graph holds its
# shapes, so a batch is padded up to a bucket (rows stay; sources and max_len round up to a multiple of
# GRAPH_BUCKET), and a few graphs, captured once and kept with the model, serve every batch. FINISHED_CHECK: how
# often generate asks the GPU whether every row has finished.
GRAPH_BUCKET = 32
FINISHED_CHECK = 8


def cuda_graph_decoder(model, memory, memory_mask, max_len: int, sample: bool):
    """(state, step) for Transformer.generate on CUDA: a decoding state of the bucket's shapes, restarted with this
    batch, and step() replaying the captured decode_step."""
    S, L = (-(-n // GRAPH_BUCKET) * GRAPH_BUCKET for n in (memory.shape[1], max_len))
    memory = F.pad(memory, (0, 0, 0, S - memory.shape[1]))  # extra source positions: zeros, masked
    memory_mask = F.pad(memory_mask, (0, S - memory_mask.shape[-1]), value=False)
    key = (memory.shape[0], S, L, sample, model.training, torch.is_autocast_enabled("cuda"))
    if key not in model.cuda_graphs:
        state = start_decoding(model, memory, memory_mask, L, sample)
        try:
            step = capture_cuda_graph(lambda: decode_step(model, state)).replay
        except RuntimeError as error:  # not expected; the same step uncaptured decodes the same, only slower
            print(f"decoding: no CUDA graph ({str(error).splitlines()[0]}): one step at a time", file=sys.stderr)
            step = lambda: decode_step(model, state)  # noqa: E731
        model.cuda_graphs[key] = state, step
    state, step = model.cuda_graphs[key]
    restart_decoding(model, state, memory, memory_mask)
    return state, step


def capture_cuda_graph(step):
    """A CUDA graph of step(): one run on a side stream first (lazy initialisations must not happen in a capture), as
    torch.cuda.graph asks; under autocast with its cast cache off (cached casts would not outlive the capture); only
    this thread's calls checked (no other thread of the process should use the GPU meanwhile)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"), torch.autocast(
            "cuda", dtype=torch.get_autocast_dtype("cuda"), enabled=torch.is_autocast_enabled("cuda"),
            cache_enabled=False):
        step()
    return graph


# ============================================================================
# 3. U-Net
# ============================================================================
# The denoiser Pi of the font experiment (Section 6.3): a 3-level U-Net (Ronneberger et al., 2015) from a
# 1x32x32 image in [-1, 1] to another. Stride-2 convolutions go down 32 -> 16 -> 8 -> 4; transposed ones come
# back up, each concatenated with the encoder map of its size (skip connections: fine strokes bypass the
# bottleneck). As in the authors' code, no convolution has a bias and the output is drawn from the 16x16
# features alone, so Pi cannot copy its input pixel by pixel: it must redraw f(x) as a glyph. width=64 is theirs.

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
# Noise for pre-training the denoiser: on SansType code, statement by statement (`$`-separated), the code noise as the
# authors' generator draws it, and random deletions; then any task's piece edits and SMILES edits. Functions of (output,
# rng) and the noise's own parameter (the piece edits also of the tokenizer; CORRUPTIONS calls each as (output, rng,
# args, tokenizer)), so every epoch can draw fresh, reproducible noise. A new noise: its function here (or in a module
# of its own, as SPoC's in spoc.py), its entry in train_denoiser.CORRUPTIONS and, for a dataset's own noise, its
# DATASET_CHANGES entry there.
CPP_TYPES = ("int", "string", "bool")
CLEAN_PROBABILITY = 0.1  # every noise here leaves at least a tenth of the outputs as they are: Pi must also copy


def is_program(code) -> bool:
    """Whether the code noises can read an output: a head, statements and a tail, separated by ` $ `."""
    return len(code.split(" $ ")) >= 3


def split_program(code):
    """'int main () { $ s1 $ s2 $ return 0; }' -> ('int main () {', [s1, s2], 'return 0; }')."""
    head, *statements, tail = code.split(" $ ")
    return head, statements, tail


def join_program(head, statements, tail):
    return " $ ".join([head, *statements, tail])


def other_type(type_, rng):
    return rng.choice([t for t in CPP_TYPES if t != type_])


def noisy_statement(statement, types, rng):
    """One of a statement's noisy renderings, as the authors' generator draws them (some leave it as it was);
    `types` maps the outer variables to theirs.

        int v = x ;  int v ; v = x ;   another type, no type, or the two-statement form with another type
        int v ;                        another type
        v = x ;                        unchanged ("its own type", rendered empty) or a random type before it
        v += x ;  v = min ( v , w ) ;  a type inserted before v: its own or a random one
        cin >> v ;                     cin v ;  cin >> v ;  or  cin << v ;
        cout << v ;                    deleted, leaving an empty statement ('')
        if ( c ) { ... }               noisy_swap
    """
    if m := re.fullmatch(r"(int|string|bool) (\S+) (?:= |; \2 = )(\S+) ;", statement):  # declared with a value
        type_, v, x = m.groups()
        wrong = other_type(type_, rng)
        return rng.choice([f"{wrong} {v} = {x} ;", f"{v} = {x} ;", f"{wrong} {v} ; {v} = {x} ;"])
    if m := re.fullmatch(r"(int|string|bool) (\S+) ;", statement):
        return f"{other_type(m[1], rng)} {m[2]} ;"
    if m := re.fullmatch(r"cin >> (\S+) ;", statement):
        return rng.choice([f"cin {m[1]} ;", statement, f"cin << {m[1]} ;"])
    if statement.startswith("cout "):
        return ""
    if statement.startswith("if ") and " temp = " in statement:
        return noisy_swap(statement, rng)
    v = statement.split(" ")[0]
    if v in types and re.fullmatch(r"\S+ = \S+ ;", statement):  # a plain assignment
        return rng.choice([statement, f"{rng.choice(CPP_TYPES)} {statement}"])
    if v in types:  # an update of an outer variable
        return f"{rng.choice([types[v], rng.choice(CPP_TYPES)])} {statement}"
    return statement  # nothing we know how to noise


def noisy_swap(statement, rng):
    """An if-swap noised whole: `temp` given no type or another one, and each declaration of its block (where
    it declares the two variables it swaps) noised as a declaration with a value."""
    temp = re.search(r"(int|string|bool) (?=temp = )", statement)
    statement = statement[:temp.start()] + rng.choice(["", other_type(temp[1], rng) + " "]) + statement[temp.end():]
    return re.sub(r"(?<=~ )(int|string|bool) (\S+) (?:= \S+|; \2 = \S+) ;",
                  lambda declaration: noisy_statement(declaration[0], {}, rng), statement)


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
    return join_program(head, statements, tail)  # a deleted print leaves its ` $ ` separators: `; $  $ cout`


def delete_random_words(code, rng, p=0.15):
    """Table 5's generic noise, with no knowledge of code: with probability 0.9, drop each word of every
    statement with probability p (the `$` separators, `int main () {` and `return 0; }` stay); else clean."""
    if rng.random() < CLEAN_PROBABILITY:
        return code
    head, statements, tail = split_program(code)
    return join_program(head, [" ".join(w for w in s.split(" ") if rng.random() >= p) for s in statements], tail)


def corrupt_pieces(text: str, rng, tokenizer, rates: tuple[float, float, float, float]) -> str:
    """The noise for any task's outputs (make_task.py; train_denoiser.py --corruption edits), which needs no knowledge
    of the task: edits of the output's sentencepiece pieces (edit_pieces), as many as the rates give for its length
    and at least one: the edits are drawn again until the output changes (a short output would otherwise mostly stay
    as it is, and Pi would learn to copy). A tenth of the outputs are left as they are (CLEAN_PROBABILITY)."""
    pieces = tokenizer.encode(text, out_type=str)
    if rng.random() < CLEAN_PROBABILITY or not pieces:
        return text
    for _ in range(100):
        noisy = tokenizer.decode(edit_pieces(pieces, rng, rates))
        if noisy != text:
            return noisy
    return tokenizer.decode(pieces[1:])  # a one-piece output the draws left alone: its piece deleted


def edit_pieces(pieces: list[str], rng, rates: tuple[float, float, float, float]) -> list[str]:
    """rates = (delete, insert, substitute, swap): each piece is deleted, or replaced by a piece drawn from the same
    output (it may be itself), with its probability; after each, a copy of one of the output's pieces is inserted with
    its; then each pair of neighbours is swapped with its."""
    delete, insert, substitute, swap = rates
    noisy = []
    for piece in pieces:
        edit = rng.random()
        if edit >= delete:
            noisy.append(rng.choice(pieces) if edit < delete + substitute else piece)
        if rng.random() < insert:
            noisy.append(rng.choice(pieces))
    for i in range(len(noisy) - 1):
        if rng.random() < swap:
            noisy[i], noisy[i + 1] = noisy[i + 1], noisy[i]
    return noisy


# SMILES (make_molecules.py): a molecule as a line of atoms (C, n, [NH4+], Cl), bonds (= #), ring closures (digits: the
# two atoms a digit follows are bonded) and branches (parentheses). The denoiser's noise is an edit a name-to-SMILES
# model would plausibly make; RDKit, the judge, rejects most of them (make_molecules.py measures how many).
SMILES_TOKEN = re.compile(r"\[[^\]]*\]|Br|Cl|%\d\d|.")
SIMILAR_ATOMS = {"C": ["N", "O"], "N": ["C", "O"], "O": ["S", "N"], "S": ["O"], "P": ["N"], "c": ["n"], "n": ["c", "o"],
                 "o": ["s", "n"], "s": ["o"], "F": ["Cl", "Br", "I"], "Cl": ["F", "Br", "I"], "Br": ["F", "Cl", "I"],
                 "I": ["F", "Cl", "Br"]}


def is_atom(token: str) -> bool:
    return token in SIMILAR_ATOMS or token.startswith("[")


def corrupt_smiles(smiles: str, rng, max_edits: int = 2) -> str:
    """With probability 0.9, 1 to max_edits edits of a SMILES string, each of a kind drawn uniformly:
      atom      an atom replaced by a similar one (C <-> N <-> O <-> S, aromatic c <-> n <-> o <-> s, a halogen);
      ring      a ring-closure digit dropped, or one added after an atom;
      branch    a parenthesis dropped, or one added after an atom (an unbalanced branch);
      bond      a double or triple bond dropped or swapped for the other, or a double bond added between atoms;
      fragment  a whole branch (...) dropped, or repeated;
    else the SMILES unchanged (as the code noise, so that Pi also learns to copy)."""
    if rng.random() < CLEAN_PROBABILITY:
        return smiles
    tokens = SMILES_TOKEN.findall(smiles)
    for _ in range(rng.randint(1, max_edits)):
        tokens = smiles_edit(tokens, rng)
    return "".join(tokens)


def smiles_edit(tokens: list[str], rng) -> list[str]:
    """One edit of corrupt_smiles, of a kind that applies to these tokens."""
    atoms = [i for i, t in enumerate(tokens) if is_atom(t)]
    where = lambda test: [i for i, t in enumerate(tokens) if test(t)]  # noqa: E731
    edits = {
        "atom": where(lambda t: t in SIMILAR_ATOMS),
        "ring": atoms, "branch": atoms, "bond": atoms[:-1] or where(lambda t: t in "=#"),
        "fragment": where(lambda t: t == "("),
    }
    kind = rng.choice([kind for kind, sites in edits.items() if sites] or ["atom"])
    if not edits[kind]:  # nothing to edit at all (an empty or atom-less string)
        return tokens
    i = rng.choice(edits[kind])
    if kind == "atom":
        return tokens[:i] + [rng.choice(SIMILAR_ATOMS[tokens[i]])] + tokens[i + 1:]
    if kind in ("ring", "branch"):
        present = where(str.isdigit) if kind == "ring" else where(lambda t: t in "()")
        if present and rng.random() < 0.5:
            j = rng.choice(present)
            return tokens[:j] + tokens[j + 1:]
        return tokens[:i + 1] + [str(rng.randint(1, 9)) if kind == "ring" else rng.choice("()")] + tokens[i + 1:]
    if kind == "bond":
        present = where(lambda t: t in "=#")
        if present and rng.random() < 0.5:
            j = rng.choice(present)
            return tokens[:j] + ([] if rng.random() < 0.5 else ["#" if tokens[j] == "=" else "="]) + tokens[j + 1:]
        return tokens[:i + 1] + ["="] + tokens[i + 1:]
    depth, end = 0, i  # fragment: the branch that opens at i, to its matching parenthesis
    for end in range(i, len(tokens)):
        depth += {"(": 1, ")": -1}.get(tokens[end], 0)
        if depth == 0:
            break
    if depth:  # a parenthesis an earlier edit left open: no branch to take
        return tokens[:i] + tokens[i + 1:]
    branch = tokens[i:end + 1]
    return tokens[:i] + tokens[end + 1:] if rng.random() < 0.5 else tokens[:end + 1] + branch + tokens[end + 1:]


def canonical_smiles(smiles: str) -> str | None:
    """RDKit's canonical form of a SMILES string, or None where RDKit cannot parse it: the molecules' judge (an
    output is valid where it parses, correct where its canonical form is the gold's)."""
    try:
        from rdkit import Chem, RDLogger
    except ImportError:
        raise UsageError("the molecules' judge is RDKit: pip install -r requirements.txt (it lists rdkit)") from None
    RDLogger.DisableLog("rdApp.*")  # it would explain every rejected SMILES on stderr
    molecule = Chem.MolFromSmiles(smiles) if smiles else None
    return Chem.MolToSmiles(molecule) if molecule is not None else None


# ============================================================================
# 5. Checkpoints, run folders and resume
# ============================================================================
# A checkpoint is one self-contained file: the model's config and weights, the tokenizer's
# bytes and the arguments it was trained with, so that loading it needs no other file. Training
# writes two: model.pt (the best epoch so far, with its validation loss, for the next stage) and
# last.pt (the latest epoch with optimizer, step, random states and history, for --resume).
# Both are written to a temporary file first and renamed, so a kill never leaves half a file.

def load_checkpoint(path: str, needs=("config", "model", "spm")) -> dict:
    if not os.path.isfile(path):
        raise UsageError(f"no checkpoint at {path}" + f" (from {os.getcwd()})" * (not os.path.isabs(path)))
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # pickle, zip or torch errors: whatever it is, it is not ours
        raise UsageError(f"{path} is not a checkpoint ({type(error).__name__})") from None
    if not isinstance(checkpoint, dict):
        raise UsageError(f"{path} is not a checkpoint of this project")
    if any(key not in checkpoint for key in needs):
        code, fonts = "the code experiments (train_denoiser.py, finetune.py)", "fonts.py"
        if "kind" in checkpoint and "kind" not in needs:  # one of ours, of the other experiment
            raise UsageError(f"{path} is a {checkpoint['kind']} checkpoint of {fonts}, not of {code}")
        if "role" in checkpoint and "kind" in needs:
            raise UsageError(f"{path} is a {checkpoint['role']} checkpoint of {code}, not of {fonts}")
        raise UsageError(f"{path} is not a checkpoint of this project (it lacks {', '.join(needs)})")
    return checkpoint


def model_from_checkpoint(checkpoint: dict, config: TransformerConfig | None = None) -> Transformer:
    """The checkpoint's model, exactly as it was trained (evaluation) or built from `config` (load_model)."""
    model = Transformer(config or TransformerConfig(**checkpoint["config"]))
    model.load_state_dict(checkpoint["model"])
    return model


def load_model(path: str, spm: bytes, spm_path: str, role: str, config: TransformerConfig | None = None):
    """(model, checkpoint), refusing a checkpoint of another role ("denoiser" or "predictor") or whose tokenizer
    is not `spm`, the one in spm_path (the data's spm.model, or a model's checkpoint). With a config, the model is
    built from it and takes only the checkpoint's weights: a fine-tuning stage trains with its own dropouts, not those
    its starting point was trained with."""
    checkpoint = load_checkpoint(path)
    if checkpoint.get("role") != role:
        raise UsageError(f"{path} is a {checkpoint.get('method', '')} {checkpoint.get('role', 'unknown')} "
                         f"checkpoint, where a {role} is needed".replace("  ", " "))
    if checkpoint["spm"] != spm:
        raise UsageError(f"{path} and {spm_path} use different tokenizers: retrain one on the same data")
    theirs, ours = checkpoint["config"], asdict(config) if config else checkpoint["config"]
    architecture = ("vocab_size", "d_model", "n_heads", "encoder_layers", "decoder_layers", "d_ff")
    differ = [f"{key} {theirs[key]} (this run: {ours[key]})" for key in architecture if theirs[key] != ours[key]]
    if differ:
        raise UsageError(f"{path} has {', '.join(differ)}: give this run its sizes (--layers, --d-model, ...)")
    return model_from_checkpoint(checkpoint, config), checkpoint


def chosen_denoiser(checkpoint: dict, flag: str | None, spm: bytes, spm_path: str):
    """(denoiser, its checkpoint) to apply to a predictor's outputs, or (None, None): --denoiser's (none: no
    denoiser), else a composed model's own (its checkpoint holds Pi: the model is Pi(f(x))), else none."""
    if flag and flag != "none":
        return load_model(flag, spm, spm_path, "denoiser")
    if "denoiser" in checkpoint and flag != "none":
        return model_from_checkpoint(checkpoint["denoiser"]), checkpoint["denoiser"]
    return None, None


def error_detector(checkpoint: dict) -> Callable | None:
    """The error detector g a denoiser's checkpoint names (train_denoiser.py --error-detector), as a function from
    outputs to whether g passes each (Pi then leaves those as they are), or None: compile, g++ (SPoC's, Appendix E);
    valid, the validity command of the task folder Pi was trained on (make_task.py --valid-command)."""
    if checkpoint.get("error_detector") == "compile":
        return judge.compiles
    if checkpoint.get("error_detector") == "valid":
        return lambda outputs: valid_outputs(checkpoint["valid_data"], outputs)
    return None


def check_writable(path: str, flag: str = "--out", folder: str | None = None):
    """Refuse, before any work and creating nothing, an output folder (or a file in `folder`) that cannot be
    written: one under a file, or in a folder this user may not write to."""
    probe = os.path.abspath(folder or path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK):
        raise UsageError(f"{flag} {path}: cannot write there ({probe} is "
                         f"{'not a folder' if not os.path.isdir(probe) else 'not writable'})")


def check_output_file(path: str, flag: str = "--out"):
    """check_writable for a file to be written (a checkpoint, a PNG)."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path} is a folder: name a file")
    check_writable(path, flag, folder=os.path.dirname(path) or ".")


def claim_output(args):
    """Make sure a training run may write to args.out: refuse a folder that cannot be written, or one that holds
    another run, unless told to --resume it (with its settings: check_resume_settings) or to --overwrite it (which
    removes that run's checkpoints, stages and evaluations first: they would describe a model that is gone)."""
    out_dir = args.out
    check_writable(out_dir)
    stages = ("", *STAGES)
    held = [os.path.join(stage, name) for stage in stages for name in ("model.pt", "last.pt")
            if os.path.exists(os.path.join(out_dir, stage, name))]
    if held and not (args.resume or args.overwrite):
        raise UsageError(f"{out_dir} holds a run ({held[0]}): --resume continues it, --overwrite starts over")
    ran = checkpoint_ran_with(out_dir) if args.resume else None
    if ran:
        check_resume_settings(args, ran)
    if args.overwrite:
        for name in ("model.pt", "last.pt", "synthetic.*", "eval_*.json", "eval_*.jsonl", *stages[1:]):
            for path in glob.glob(os.path.join(glob.escape(out_dir), name)):
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    os.makedirs(out_dir, exist_ok=True)


def save_checkpoint(path: str, payload: dict):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(payload, tmp)
    os.replace(tmp, path)
    for stale in glob.glob(f"{glob.escape(path)}.tmp*"):  # left by a run killed while saving
        os.remove(stale)


# Resume (--resume; fit's docstring says how a run goes on): the settings a resumed run keeps, what last.pt holds
# besides the model, and how it is restored. What makes the rest of a resumed run the rest of the unbroken one: every
# random draw is either torch's generator (initialisation, dropout, the samples y' of composed training), whose state
# last.pt holds, or a Random seeded by the run's seed and what it draws for (each epoch's batch order and Pi's noise by
# the epoch's number; --pi-data authors' noise, the same every epoch, and Pi's val noise by the seed alone), made
# anew; the schedule's step is restored, and its length (the linear decay's) is epochs x batches an epoch.

# What a resumed run may change: how long it goes on, where it runs (out: a run folder moved elsewhere, resumed there),
# how often and on how many outputs it reports. Anything else (its data too) would make it another run than the one it
# continues. Two of them change the rest of the run: --epochs under a linear schedule moves the rest of the decay (which
# ends at the last epoch), --device runs it otherwise (a GPU pads batches, multiplies in TF32, samples from its own
# generator); the others change no epoch's weights.
MAY_CHANGE_ON_RESUME = ("epochs", "patience", "device", "out", "repair_every", "repair_programs")


# Staged methods train their first stages in folders of their own inside the run folder (bart, backtranslation).
STAGES = ("frozen", "reverse", "mixed")


def checkpoint_ran_with(run_folder: str) -> str | None:
    """The checkpoint that holds the settings a run ran with: the newest written in its folder or a stage's (each
    holds the run's args; last.pt is written after model.pt, so a resumed run's changes are the newest); or None."""
    held = [path for stage in ("", *STAGES) for name in ("model.pt", "last.pt")
            if os.path.isfile(path := os.path.join(run_folder, stage, name))]
    return max(held, key=os.path.getmtime, default=None)


def settings_ran_with(last_path: str) -> dict:
    """The settings a run ran with (its flags' values, as its checkpoint holds them): with --resume, parse_training_args
    makes them the flags' defaults, so that a resumed run goes on with them."""
    ran_with = load_checkpoint(last_path, needs=("args",))["args"]
    return {name: value for name, value in ran_with.items() if name not in ("resume", "overwrite")}


def check_resume_settings(args, last_path: str):
    """--resume continues a run with the settings it ran with: refuse any other, but for MAY_CHANGE_ON_RESUME,
    which it names on stderr, as the run's first line."""
    ran_with = settings_ran_with(last_path)
    differ = {name: f"--{name.replace('_', '-')} {value} (it ran with {ran_with[name]})" for name, value in
              sorted(vars(args).items()) if name in ran_with and ran_with[name] != value}
    refused = [text for name, text in differ.items() if name not in MAY_CHANGE_ON_RESUME]
    if refused:
        raise UsageError(f"--resume: {'; '.join(refused)}: resume with its settings, or --overwrite to start over")
    if differ:
        print(f"--resume: changed {'; '.join(differ.values())}", file=sys.stderr)


def random_states(device) -> dict:
    """The generators a resumed run must continue from: the CPU's, and the GPU's where it trains (dropout, samples)."""
    return {"torch": torch.get_rng_state(), **({"cuda": torch.cuda.get_rng_state(device)} if device.type == "cuda"
                                               else {})}


def checkpoint_to_resume(last_path: str) -> dict | None:
    """--resume: the last epoch's checkpoint, or None (said on stderr) when there is none yet."""
    if not os.path.exists(last_path):
        print(f"--resume: there is no {last_path} yet, so this run starts at epoch 1", file=sys.stderr)
        return None
    return load_checkpoint(last_path, needs=("model", "optimizer", "scheduler", "state", "rng"))


def restore(last: dict, model, optimizer, scheduler, device):
    """Continue exactly where `last` stopped: weights, optimizer moments, the schedule's step, the random states.
    (After the scheduler is built, which resets the rate: the optimizer's state holds the rate the last step used.)"""
    model.load_state_dict(last["model"])
    optimizer.load_state_dict(last["optimizer"])
    scheduler.load_state_dict(last["scheduler"])
    torch.set_rng_state(last["rng"]["torch"])
    if device.type == "cuda" and "cuda" in last["rng"]:
        torch.cuda.set_rng_state(last["rng"]["cuda"], device)


# ============================================================================
# 6. Settings and the method's losses: what every preset shares, Eq. 1's settings and Eq. 1, the REINFORCE
#    baseline and the reward's log-likelihood, the pieces they are built from, the estimators; then the validation
#    criteria that keep an epoch
# ============================================================================

# The presets, a column each in the training scripts' tables of settings (a row per setting): SansType's three and
# SPoC's two (Appendix E). A dataset without a column of its own takes SansType's (molecules, a task, SPoC's smoke).
COLUMNS = ("paper", "cpu", "smoke", "spoc paper", "spoc cpu")
# The Transformer each preset builds, Pi and f alike (standard fine-tuning starts f from Pi's weights).
#                  SansType: paper  cpu   smoke     SPoC: paper  cpu
ARCHITECTURE = dict(
    d_model=           (256,        128,  32,             256,   128),
    n_heads=           (2,          4,    2,              8,     4),
    layers=            (3,          2,    1,              5,     2),
    d_ff=              (1024,       512,  64,             1024,  512),
)


def config_from_args(args, vocab_size: int) -> TransformerConfig:
    """The Transformer a run builds: ARCHITECTURE's sizes and its script's PRESETS' dropouts (or the flags'); a
    fine-tuned f takes Pi's weights into it, with its own dropouts."""
    return TransformerConfig(vocab_size=vocab_size, d_model=args.d_model, n_heads=args.n_heads,
                             encoder_layers=args.layers, decoder_layers=args.layers, d_ff=args.d_ff,
                             dropout=args.dropout, attention_dropout=args.attention_dropout,
                             activation_dropout=args.activation_dropout)


# What every run trains with, whatever its preset, as the authors ran fairseq: AdamW with these betas and weight decay,
# no gradient clipping, fp32 (--precision; on a GPU its matrix products in TF32, pick_device), seed 0. add_training_args
# makes them the flags' defaults (the betas have no flag).
EVERY_PRESET = dict(adam_betas=(0.9, 0.98), weight_decay=1e-4, clip_norm=0.0, precision="fp32", seed=0)
# Eq. 1's settings, in every preset (a flag given wins; composed_loss reads them from the run's args). REINFORCE with
# one sample and the batch baseline, as good on validation as two samples at the same compute, at 3x a standard
# step's cost instead of 5x (EXPERIMENTS.md, "the REINFORCE estimator"); composed_weight 0.1 is REINFORCE's (Appendix
# D); the straight-through estimators want 1 (at 0.1 they are level with no term at all), tau is gumbel's temperature
# (EXPERIMENTS.md, "straight-through and Gumbel"); gamma, the clamp's floor; lam, the direct term's weight;
# unlabeled_inputs, inputs with no gold output an epoch that the first term also sees (0, the paper's: none; finetune.py
# reads it, composed_loss knows such a batch by its targets).
EQ1 = dict(estimator="reinforce", samples=1, reinforce_baseline="batch", clamp="reward", gamma=-50.0,
           composed_weight=0.1, lam=1.0, tau=1.0, unlabeled_inputs=0)


def composed_loss(f, denoiser, src, tgt_in, tgt_out, settings, label_smoothing: float, error_free=None,
                  max_len: int | None = None):
    """The loss whose gradient estimates minus Eq. 1's for one batch (with REINFORCE its value is a surrogate, not
    minus Eq. 1), f = p_theta training, the denoiser Pi = p_beta frozen (eval mode, no gradients):

        max_theta  E_{y' ~ p_theta(.|x)}[ log p_beta(y | y') ]  +  lambda * E[ log p_theta(y | x) ]

    y' is discrete, so the first term's gradient needs an estimator (Section 3): reinforce, the paper's (Appendix D),
    E[(log p_beta(y|y') - b) * grad log p_theta(y'|x)] from `samples` outputs per input, with a baseline b
    (reinforce_baseline; the paper's is none, b = 0) and a clamp at gamma (the reward, the paper's text, or
    sample_log_probs'); or straight-through and gumbel, biased (relaxed_rows). Both terms are summed over tokens and
    divided by the batch's gold tokens (a per-token scale, as fairseq's losses; it keeps Eq. 1's ratio of the two);
    composed_weight scales the first (REINFORCE's 0.1, Appendix D). settings: the run's args, whose values of these
    names (samples, estimator, reinforce_baseline, clamp, gamma, composed_weight, lam, tau) are EQ1's (just above)
    unless a flag said otherwise. error_free: Pi's g (Appendix E), a bool per y'. max_len, for tests: the samples' limit
    (default: the batch's padded gold width + 16, at most twice the source + 10 and the model's max_positions
    (max_output_length), which alone limits inputs with no gold; a GPU pads widths to a multiple of 8; cutting there is
    part of the sampling distribution, for which the estimator is exact).
    y' is drawn with dropout off, as f predicts at test time; log p_theta(y'|x) is scored with f in training mode,
    dropout on as for the direct term: REINFORCE's gradient is then that of a dropout-perturbed f's log-probability
    of y', an approximation that is exact without dropout (the cpu preset's f has dropout 0.1 on its embeddings and
    residuals; the paper preset's, attention and activation dropout 0.2 besides).
    A batch of inputs with no gold output (targets of one PAD each: finetune.py --unlabeled-inputs, common.batches)
    has the first term alone, with y' itself as Pi's target: the reward log p_beta(y'|y') is Pi's likelihood of leaving
    y' as it is, which needs no gold; divided by the batch's source tokens (a count that does not depend on y')."""
    s, samples = settings, settings.samples
    no_gold = tgt_out.shape[1] == 1 and bool((tgt_out == PAD_ID).all())  # (a host sync for such batches alone)
    max_len = max_len or sample_length_limit(f, src, None if no_gold else tgt_out)
    y_prime = sample_outputs(f, src, samples, max_len)                                  # y' ~ p_theta(.|x)
    noisy = with_eos(y_prime)                                                           # y' + EOS, as Pi reads it
    if no_gold:  # Pi's target: y' itself
        target_in, target_out = shift_right(noisy), noisy
    else:        # Pi's target: the gold y
        target_in, target_out = tgt_in.repeat_interleave(samples, 0), tgt_out.repeat_interleave(samples, 0)
    memory, memory_mask = f.encode(src)  # one pass with gradient for both terms (sampling ran its own, without)
    # f teacher-forced on its samples, once: log p_theta(y'|x), and f's distribution at every position of y'
    f_logits = f.decode(shift_right(noisy), memory.repeat_interleave(samples, 0),
                        memory_mask.repeat_interleave(samples, 0)).float()
    if s.estimator == "reinforce":
        log_p_sample = sample_log_probs(f_logits, y_prime, s.clamp, s.gamma, max_len)   # log p_theta(y'|x)
        with torch.no_grad():  # the frozen Pi scores y': a reward, no gradient
            reward = log_likelihood(denoiser.decode(target_in, *denoiser.encode(noisy)), target_out)  # log p_beta(y|y')
            if error_free is not None:  # SPoC's Pi = (g, nu): what g passes stays as it is
                reward = torch.where(error_free(y_prime), torch.where(same_sequences(noisy, target_out), 0.0, s.gamma),
                                     reward)
            reward = reward.clamp(min=s.gamma) if s.clamp == "reward" else reward
        rewards = reward.view(-1, samples)  # (inputs, samples)
        advantage = (rewards - reinforce_baseline(rewards, s.reinforce_baseline)).view(-1)  # reward - b
        composed = -(advantage * log_p_sample).sum()                                    # REINFORCE
    else:  # straight-through, gumbel: Pi reads y' as one-hot rows through which a gradient reaches f
        rows = relaxed_rows(f_logits, noisy, s.estimator, s.tau)
        composed = -log_likelihood(denoiser.decode(target_in, *denoiser.encode(noisy, rows)), target_out).sum()
    if no_gold:
        return s.composed_weight * composed / samples / (src != PAD_ID).sum()
    direct = sequence_loss(f.decode(tgt_in, memory, memory_mask), tgt_out, label_smoothing)  # -log p_theta(y|x)
    return s.composed_weight * composed / samples / (tgt_out != PAD_ID).sum() + s.lam * direct   # -Eq. 1's surrogate


def sample_length_limit(f, src, tgt_out=None) -> int:
    """Where composed_loss cuts its samples y': 16 pieces past the batch's padded gold width, or (tgt_out None: inputs
    with no gold) where greedy decoding would give up (max_output_length)."""
    longest = max_output_length(f, src)
    return longest if tgt_out is None else min(longest, tgt_out.shape[1] + 16)


def reinforce_baseline(rewards, kind: str):
    """b in REINFORCE's (reward - b) * grad log p_theta(y'|x), for rewards of shape (inputs, samples).
    Any b that does not depend on the sample it is subtracted from keeps the estimate unbiased:
      batch          the mean reward of the batch's other inputs: training batches hold programs of
                     near-equal length, so their rewards are comparable, and one sample per input will do
                     (a batch of one input has no other: b = 0);
      leave-one-out  the mean reward of the input's other samples (needs 2 or more samples);
      none           b = 0, the paper's estimator."""
    inputs, samples = rewards.shape
    if kind == "leave-one-out" and samples > 1:
        return (rewards.sum(dim=1, keepdim=True) - rewards) / (samples - 1)
    if kind == "batch" and inputs > 1:
        per_input = rewards.mean(dim=1, keepdim=True)
        return ((per_input.sum() - per_input) / (inputs - 1)).expand_as(rewards)
    return torch.zeros_like(rewards)


def log_likelihood(logits, targets):
    """log p(targets) (B,): each row's token log-probabilities summed, padding skipped, under the distribution the
    decoders draw from (PAD and BOS impossible, as in decode_step)."""
    logits = logits.float().masked_fill(never_generated_mask(logits, logits.shape[-1]), float("-inf"))
    token = F.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    return token.masked_fill(targets == PAD_ID, 0.0).sum(dim=1)  # (not * mask: -inf * 0 is nan)


def sequence_loss(logits, targets, label_smoothing: float = 0.0):
    """Mean cross entropy per target token (padding ignored), optionally label-smoothed:
    (1 - eps) * -log p(y_t) + eps * mean over the vocabulary of -log p(v)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=PAD_ID,
                           label_smoothing=label_smoothing)


def shift_right(tokens):
    """A decoder's input for teacher forcing on `tokens`: BOS, then every token but the last."""
    return F.pad(tokens[:, :-1], (1, 0), value=BOS_ID)


def same_sequences(a, b):
    """Row by row, whether two PAD-padded id tensors hold the same sequence."""
    width = max(a.shape[1], b.shape[1])
    return (F.pad(a, (0, width - a.shape[1]), value=PAD_ID) == F.pad(b, (0, width - b.shape[1]), value=PAD_ID)).all(1)


@torch.no_grad()
def sample_outputs(model, src, samples: int, max_len: int) -> Decoded:
    """`samples` outputs y' ~ p_theta(.|x) per source (one after another), drawn with dropout off, as f
    predicts at test time."""
    was_training = model.training
    model.eval()
    sampled = model.generate(src, max_len=max_len, sample=True, repeat=samples)
    model.train(was_training)
    return sampled


def sample_log_probs(f_logits, y_prime: Decoded, clamp: str, gamma: float, max_len: int):
    """log p_theta(y'|x) of each sample, from f teacher-forced on them (f_logits), clamped at gamma where --clamp
    says so: "sample", or "padded-sample", the released code's sum over the batch's padded samples."""
    chosen = F.pad(y_prime.tokens, (0, 1), value=PAD_ID)  # y', and EOS where f chose it
    if clamp == "padded-sample":
        return released_sample_log_probs(f_logits, chosen, y_prime.lengths, max_len).clamp(min=gamma)
    log_p_sample = log_likelihood(f_logits, chosen)
    return log_p_sample.clamp(min=gamma) if clamp == "sample" else log_p_sample


def released_sample_log_probs(f_logits, chosen, lengths, max_len: int):
    """log p_theta(y'|x) as the released code computes it (finetune.py --clamp padded-sample): summed over every
    position of the batch's samples padded to the longest, the padding after a sample's end scored as the padding
    token (which f never learns to predict), nothing masked. Clamped at gamma, a sample shorter than the longest
    of its batch is almost always clamped, and a clamped sample gets no gradient."""
    longest = (lengths + (lengths < max_len)).max()  # the longest sample, with its EOS if it chose one
    token = F.log_softmax(f_logits, dim=-1).gather(-1, chosen[..., None]).squeeze(-1)
    return token.masked_fill(torch.arange(chosen.shape[1], device=chosen.device) >= longest, 0.0).sum(dim=1)


def relaxed_rows(f_logits, noisy, estimator: str, tau: float = 1.0):
    """The samples y' + EOS (noisy, as the denoiser reads them) as one-hot rows (B, T, V) whose gradient reaches f,
    for the straight-through estimators, from f's logits at every position of them (f teacher-forced on its
    samples). The rows are  one_hot(y') - s.detach() + s:  exactly y' going forward, s's gradient going back, with
      straight-through  s = p                         (Bengio et al., 2013);
      gumbel            s = softmax((log p + g) / tau), g Gumbel noise drawn given that log p + g has its
                        maximum at y' (Tucker et al., 2017), so the relaxed sample is a relaxation of y' itself.
    p keeps every token (PAD and BOS, which the sampler never draws, have a negligible share)."""
    log_p = F.log_softmax(f_logits, dim=-1)
    if estimator == "straight-through":
        soft = log_p.exp()
    else:
        soft = F.softmax(gumbel_given_argmax(log_p, noisy) / tau, dim=-1)
    hard = F.one_hot(noisy, log_p.shape[-1]).float()
    return (hard - soft.detach() + soft) * (noisy != PAD_ID)[..., None]  # padding: a zero row, as its embedding


def gumbel_given_argmax(log_p, tokens):
    """log p + g with g ~ Gumbel(0, 1) each, drawn given that the maximum is at `tokens`: the maximum is a
    Gumbel(logsumexp log p) = Gumbel(0), every other entry a Gumbel(log p_i) truncated below it."""
    top = -torch.empty_like(log_p[..., :1]).exponential_().log()                # the maximum's value
    others = log_p - torch.empty_like(log_p).exponential_().log()               # Gumbel(log p_i)
    return (-torch.logaddexp(-top, -others)).scatter(-1, tokens[..., None], top)  # truncated: -log(e^-top + e^-g)


@torch.no_grad()
def validation_loss(model, val_batches) -> float:
    """Mean per-token cross entropy (no smoothing) of a model teacher-forced on batches on its device
    (device_batches): the early-stopping criterion."""
    model.eval()
    total = tokens = 0
    for src, tgt_in, tgt_out in val_batches:
        logits = model(src, tgt_in).float()
        total += F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD_ID, reduction="sum").double()
        tokens += (tgt_out != PAD_ID).sum()
    return (total / tokens).item()  # a CPU-GPU sync point, once per validation


@torch.no_grad()
def composed_validation_loss(f, denoiser, val_batches, error_free, gamma: float) -> float:
    """Composed fine-tuning's early-stopping criterion: the cross entropy of the composition Pi(f(x)) on the gold y,
    per gold token, where f decodes greedily (the authors' code scores a sampled f(x) instead) and the frozen Pi is
    teacher-forced on y. With SPoC's error detector (error_free, as in composed_loss), a prediction g passes costs
    0 if it is y, else -gamma. val_batches: (src, tgt_in, tgt_out) on the device (device_batches)."""
    f.eval()
    total = tokens = 0
    for src, tgt_in, tgt_out in val_batches:
        predicted = f.generate(src, max_len=max_output_length(f, src))
        noisy = with_eos(predicted)
        logits = denoiser.decode(tgt_in, *denoiser.encode(noisy)).float()
        loss = F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD_ID, reduction="none").sum(dim=1)
        if error_free is not None:
            loss = torch.where(error_free(predicted), torch.where(same_sequences(noisy, tgt_out), 0.0, -gamma), loss)
        total, tokens = total + loss.double().sum(), tokens + (tgt_out != PAD_ID).sum()
    return (total / tokens).item()  # a CPU-GPU sync point, once per validation


def kept_before(candidate: tuple, best: tuple) -> bool:
    """Whether an epoch's (val share, val loss) beats the best so far: a higher judged share (--keep-by exact or
    valid), ties broken by a lower loss; without a share (--keep-by loss), the lower loss."""
    (share, loss), (best_share, best_loss) = candidate, best
    if share is None or best_share is None or share == best_share:
        return loss < best_loss
    return share > best_share


def judged_share(args, tokenizer, denoiser=None, g=None):
    """finetune.py --keep-by exact or valid (finetune.KEEP_BY's default for composed on a task with a validity command):
    a function of the model, the share of val decoded greedily as evaluate.py decodes it (f(x); composed: Pi(f(x)),
    through Pi's g if it has one) that is the gold output exactly or that the task's validity command passes, which fit
    weighs before the loss (kept_before). None for --keep-by loss."""
    if args.keep_by == "loss":
        return None
    sources, gold = (read_lines(os.path.join(args.data, f"val.{side}")) for side in ("src", "tgt"))

    def share(model) -> float:
        outputs = translate(model, tokenizer, sources, args.batch_size)
        if denoiser is not None:
            outputs = denoise(denoiser, tokenizer, outputs, args.batch_size, g)
        judged = [output == y for output, y in zip(outputs, gold)] if args.keep_by == "exact" else \
            valid_outputs(args.data, outputs)
        return sum(judged) / len(judged)
    return share


def shown(share: float | None, args) -> str:
    return "" if share is None else f", val {args.keep_by} {100 * share:.1f}%"


# ============================================================================
# 7. Training loop: fit() with early stopping (the criteria just above; resume: section 5), each epoch's batches,
#    one epoch's steps (the loss: section 6), schedules, devices and bf16
# ============================================================================

def fit(model, train_pairs_for_epoch, val_pairs, args, out_dir, extra: dict, trainable=None, on_epoch=None,
        denoiser=None, error_free=None, val_share=None, epochs: int | None = None):
    """Train with AdamW, validate after every epoch, keep the best epoch in out_dir/model.pt (the latest in
    last.pt, for --resume) and stop after `args.patience` epochs without a better one, or after `epochs` (default
    args.epochs; a staged method's stage has its own, while its checkpoints keep the run's args, which --resume takes).
    `trainable` may name the only parameters to train (BART's first stage); `extra` goes into every checkpoint;
    on_epoch(model, epoch) may add a note to an epoch's line.

    Batches: train_pairs_for_epoch(epoch) gives the epoch's (src, tgt) id pairs (finetune.py: the labeled pairs,
    every epoch, and composed --unlabeled-inputs' inputs alone, tgt None; train_denoiser.corrupted_pairs: the
    outputs corrupted with Random(f"{seed}-epoch{epoch}"), or with Random(f"{seed}-once") for --pi-data authors);
    batches_of cuts them into batches of similar length, ties and batch order from
    Random(f"{seed}-batch order-{epoch}"); a worker process makes each epoch while the one before it trains
    (epoch_loader).

    The kept epoch: the lowest validation loss (validation_loss) or, with a frozen `denoiser` Pi (on the device, in
    eval mode), where the model is composed fine-tuning's f trained on minus Eq. 1 (composed_loss, with args'
    settings; error_free: Pi's g), the lowest loss of Pi(f(x)) (composed_validation_loss), epoch 0 (the f it starts
    from) included. val_share(model), if given, is a judged share of val (finetune.py --keep-by exact or valid;
    finetune.KEEP_BY: valid for composed on a task with a validity command) that picks the epoch before the loss
    does (kept_before).

    Resume (--resume; its functions end section 5): last.pt, saved after every epoch (save_checkpoint: a temporary file,
    then renamed, so a kill never leaves half a file), holds the weights, AdamW's moments, the schedule's step, the
    random states and the history; restore() reloads them, and since an epoch's batches and noise depend only on (seed,
    epoch) (on one kind of device: a GPU pads them otherwise), the run goes on from its last finished epoch. With its
    settings unchanged (settings_ran_with: the flags' defaults; check_resume_settings refuses others but
    MAY_CHANGE_ON_RESUME's) it ends bit for bit as an unbroken run on the CPU (tests/test_training.py,
    test_a_run_killed_twice_and_resumed_ends_bit_for_bit_as_an_unbroken_one)."""
    device, epochs = pick_device(args.device), args.epochs if epochs is None else epochs
    model.to(device)
    val_batches = device_batches(val_pairs, validation_batch_size(val_pairs, args.batch_size, device), device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=EVERY_PRESET["adam_betas"],
                                  weight_decay=args.weight_decay, fused=device.type == "cuda")  # fused: one kernel
    last_path, best_path = os.path.join(out_dir, "last.pt"), os.path.join(out_dir, "model.pt")
    last = checkpoint_to_resume(last_path) if args.resume else None
    state = last["state"] if last else {"epoch": 0, "best_loss": float("inf"), "best_share": None, "best_epoch": 0,
                                        "history": []}

    def batches_of(epoch):  # random order and ties, the same for a seed's epoch whatever --epochs
        return batches(train_pairs_for_epoch(epoch), args.batch_size, random.Random(f"{args.seed}-batch order-{epoch}"),
                       length_multiple(device))

    # Epochs state + 1 .. epochs, each made while the one before it trains (the first while nothing does): a
    # PyTorch DataLoader whose items are whole epochs, made by one worker process (epoch_loader).
    upcoming = (unpack_epoch(packed, pin=device.type == "cuda")
                for packed in epoch_loader(batches_of, range(state["epoch"] + 1, epochs + 1)))
    first_batches = next(upcoming, [])
    upcoming = itertools.chain([first_batches], upcoming)
    total_steps = max(1, epochs * len(first_batches))  # the schedule's length (1: a resumed run that had ended)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: learning_rate_factor(step, args, total_steps))
    if last:
        restore(last, model, optimizer, scheduler, device)
        print(f"resumed from {last_path} after epoch {state['epoch']}", file=sys.stderr)

    def checkpoint(**more):
        return {"config": asdict(model.config), "model": model.state_dict(), "args": vars(args), **extra, **more}

    for name, parameter in model.named_parameters():  # BART's first stage trains the encoder alone
        parameter.requires_grad_(trainable is None or name in trainable)
    if denoiser is not None and not state["history"]:  # composed: Pi(f(x)) of the f it starts from, as epoch 0,
        started = time.time()                           # kept if no composed epoch does better
        with autocast(args.precision, device):
            val_loss = composed_validation_loss(model, denoiser, val_batches, error_free, args.gamma)
            share = val_share(model) if val_share else None
        state["best_loss"], state["best_share"] = val_loss, share
        save_checkpoint(best_path, checkpoint(best_val_loss=val_loss, epoch=0))
        state["history"].append({"epoch": 0, "train_loss": float("nan"), "val_loss": val_loss,
                                 **({"val_share": share} if val_share else {}), "seconds": time.time() - started})
        print(f"epoch 0 (f as it starts): val loss {val_loss:.4f}{shown(share, args)}", file=sys.stderr, flush=True)
    while state["epoch"] < epochs and state["epoch"] - state["best_epoch"] < args.patience:
        epoch, started = state["epoch"] + 1, time.time()
        smoothing = label_smoothing_at(epoch, args.label_smoothing)
        train_loss = train_one_epoch(model, next(upcoming), optimizer, scheduler, args, device,
                                     f"epoch {epoch}/{epochs}", smoothing, denoiser, error_free)
        with autocast(args.precision, device):
            val_loss = validation_loss(model, val_batches) if denoiser is None else \
                composed_validation_loss(model, denoiser, val_batches, error_free, args.gamma)  # of Pi(f(x))
            share = val_share(model) if val_share else None
        state["epoch"] = epoch
        improved = kept_before((share, val_loss), (state.get("best_share"), state["best_loss"]))
        if improved:
            state["best_loss"], state["best_share"], state["best_epoch"] = val_loss, share, epoch
            save_checkpoint(best_path, checkpoint(best_val_loss=val_loss, epoch=epoch))
        notes = on_epoch(model, epoch) if on_epoch else ""
        seconds = time.time() - started  # the epoch with its validation and reports
        state["history"].append({"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss,
                                 **({"val_share": share} if val_share else {}), "seconds": seconds,
                                 **({"notes": notes} if notes else {})})
        print(f"epoch {epoch}: train loss {train_loss:.4f}, val loss {val_loss:.4f}{shown(share, args)}"
              f"{' (best)' if improved else ''}{notes}; {seconds:.1f} s", file=sys.stderr, flush=True)
        save_checkpoint(last_path, checkpoint(optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
                                              state=state, rng=random_states(device)))
    model.requires_grad_(True)
    if state["best_epoch"] == 0 and denoiser is None:  # (composed keeps its epoch 0, the f it starts from)
        raise TrainingFailed(f"no epoch had a finite validation loss (the last: {state['history'][-1]['val_loss']}), "
                             f"so {out_dir} holds no model.pt: a lower --lr may help")
    return state


# Each epoch's batches (fit's docstring, "Batches"): cut from the epoch's pairs (batches) and made one epoch ahead in a
# worker process (epoch_loader, start_epoch_worker), handed over packed (pack_epoch, unpack_epoch).

def batches(pairs: list, batch_size: int, rng: random.Random | None = None, length_multiple: int = 1) -> list[tuple]:
    """(src, tgt_in, tgt_out) padded LongTensors from (source ids, target ids) pairs. The decoder
    reads BOS + target and predicts target + EOS. Pairs of similar length share a batch, as in
    fairseq: unsorted batches are half padding, which the CPU pays for in full. With an rng, ties
    are broken at random and the batches come in random order. length_multiple: lengths padded up to a
    multiple of it (a GPU's: fewer shapes, each aligned for its matrix units). A pair whose target is None (an input
    with no gold output: finetune.py --unlabeled-inputs) goes in a batch of such inputs alone, whose targets are a
    single PAD each (composed_loss reads that as no gold)."""
    order = list(range(len(pairs)))
    if rng is not None:
        rng.shuffle(order)
    # Inputs alone first, then by length (the sort is stable: shuffled ties stay shuffled); no batch holds both kinds.
    order.sort(key=lambda i: (pairs[i][1] is not None, len(pairs[i][1] or ()), len(pairs[i][0])))
    inputs_alone = sum(target is None for _, target in pairs)
    spans = [(start, min(start + batch_size, end)) for begin, end in ((0, inputs_alone), (inputs_alone, len(order)))
             for start in range(begin, end, batch_size)]
    if rng is not None:
        rng.shuffle(spans)
    prepared = []
    for start, end in spans:
        chosen = [pairs[i] for i in order[start:end]]
        src = pad([s + [EOS_ID] for s, _ in chosen], length_multiple)
        if chosen[0][1] is None:  # inputs alone: a target of one PAD each
            tgt = torch.full((len(chosen), 2), PAD_ID, dtype=torch.long)
        else:
            tgt = pad([[BOS_ID] + t + [EOS_ID] for _, t in chosen], length_multiple, extra=1)
        prepared.append((src, tgt[:, :-1], tgt[:, 1:]))
    return prepared


def device_batches(pairs: list, batch_size: int, device) -> list[tuple]:
    """A fixed set of batches (validation's) on the device, copied once."""
    on_device = batches(pairs, batch_size, length_multiple=length_multiple(device))
    return [tuple(t.to(device) for t in batch) for batch in on_device]


def length_multiple(device) -> int:
    """On a GPU, every batch's lengths are padded up to a multiple of 8: a few shapes, not one per batch, so that no
    step pays for a shape seen for the first time, and bf16 matrix products aligned for the tensor cores. On the CPU
    padding is work: none."""
    return 8 if device.type == "cuda" else 1


def validation_batch_size(pairs: list, batch_size: int, device) -> int:
    """On a GPU, validation (and the denoiser's repair report) takes as many programs a batch as 2^16 tokens of the
    longest hold: SansType's 500 val programs in one batch, one decoding instead of three. On the CPU, the run's own."""
    longest = max(len(s) + len(t) for s, t in pairs) + 2
    return max(batch_size, 2 ** 16 // longest) if device.type == "cuda" else batch_size


def pad(sequences: list[list[int]], length_multiple: int = 1, extra: int = 0) -> torch.Tensor:
    """(B, T) PAD-padded ids; T - extra rounded up to a multiple of length_multiple."""
    longest = max(map(len, sequences)) - extra
    out = torch.full((len(sequences), -(-longest // length_multiple) * length_multiple + extra), PAD_ID,
                     dtype=torch.long)
    for row, ids in enumerate(sequences):
        out[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def epoch_loader(make_epoch: Callable, epochs: range):
    """Each epoch's batches (make_epoch(epoch)) as pack_epoch packs them, made in a worker process one epoch ahead of
    the training: the denoiser's fresh corruptions are seconds of Python, and in a thread they would hold the
    interpreter's lock that the training loop needs between its kernel launches (a 19 ms GPU step took 256 ms; a
    15 ms CPU step 343 ms). The worker is forked (make_epoch may be a closure) and runs at the lowest priority (on 2
    cores it takes only what the training leaves idle)."""
    run = os.getpid()
    return torch.utils.data.DataLoader(
        epochs, batch_size=None, collate_fn=lambda epoch: pack_epoch(make_epoch(epoch)), num_workers=1,
        prefetch_factor=1, multiprocessing_context="fork", worker_init_fn=lambda _: start_epoch_worker(run),
        generator=torch.Generator())  # (its own: seeding the worker must not draw from the training's generator)


def start_epoch_worker(run: int):
    """The epoch worker dies with its run, even one killed by SIGKILL (which no Python code sees): the kernel sends it
    SIGKILL when its parent dies (Linux's parent-death signal), where it would otherwise live on, blocked on a full
    pipe. It runs at the lowest priority."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != run:  # the run died before the signal was set
            os._exit(0)
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def pack_epoch(epoch_batches: list[tuple]) -> tuple:
    """An epoch's batches as (every id in one flat array, each batch's (rows, source length, target length)): NumPy
    arrays, which cross to the training process as bytes (tensors would go as shared memory, whose hand-over a Ctrl-C
    can break mid-way)."""
    flat = torch.cat([t.flatten() for src, tgt_in, tgt_out in epoch_batches
                      for t in (src, torch.cat([tgt_in[:, :1], tgt_out], dim=1))])
    shapes = [(len(src), src.shape[1], tgt_in.shape[1] + 1) for src, tgt_in, _ in epoch_batches]
    return flat.numpy(), np.array(shapes, dtype=np.int64).reshape(-1, 3)


def unpack_epoch(packed: tuple, pin: bool = False) -> list[tuple]:
    """The batches of pack_epoch, as (src, tgt_in, tgt_out) views of one flat tensor; pin: in page-locked memory
    (pinned once an epoch), from which copies to a GPU do not make the host wait (non_blocking)."""
    flat, shapes = torch.from_numpy(packed[0]), packed[1]
    flat = flat.pin_memory() if pin else flat
    epoch_batches, start = [], 0
    for rows, source, target in shapes.tolist():
        src = flat[start:start + rows * source].view(rows, source)
        tgt = flat[start + rows * source:start + rows * (source + target)].view(rows, target)
        epoch_batches.append((src, tgt[:, :-1], tgt[:, 1:]))
        start += rows * (source + target)
    return epoch_batches


def train_one_epoch(model, epoch_batches, optimizer, scheduler, args, device, what: str, label_smoothing: float,
                    denoiser=None, error_free=None) -> float:
    """One pass over the epoch's batches; the mean training loss per gold target token (batches of inputs alone,
    which have none, weigh nothing in it). A step's loss is -log p(y|x) or, with a frozen denoiser Pi,
    composed_loss's (section 6), whose gradient estimates minus Eq. 1's. Nothing in the loop waits for the GPU (but
    Pi's error detector g, which reads each step's samples as text on the host, and a batch of inputs alone, which
    composed_loss tells by a host sync): the loss is summed on the device and read only for a progress line and at the
    end. what: the progress line's label ("epoch 3/80")."""
    model.train()
    meter = Progress(len(epoch_batches), what, every_seconds=30)
    total = torch.zeros((), dtype=torch.float64, device=device)
    tokens = torch.zeros((), dtype=torch.long, device=device)
    for batch in epoch_batches:
        src, tgt_in, tgt_out = (t.to(device, non_blocking=True) for t in batch)
        with autocast(args.precision, device):
            if denoiser is None:  # -log p_theta(y|x) per target token
                loss = sequence_loss(model(src, tgt_in), tgt_out, label_smoothing)
            else:  # composed fine-tuning: Eq. 1's surrogate (its gradient), Pi frozen
                loss = composed_loss(model, denoiser, src, tgt_in, tgt_out, args, label_smoothing, error_free)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
        optimizer.step()
        scheduler.step()
        n = (tgt_out != PAD_ID).sum()
        total += loss.detach().double() * n
        tokens += n
        meter.step(extra=lambda: f"loss {(total / tokens).item():.3f}, {tokens.item() / meter.elapsed():.0f} tok/s")
    return (total / tokens).item()  # a CPU-GPU sync point, once per epoch


def pick_device(name: str | None = None) -> torch.device:
    """--device, or the default: cuda when there is one, else cpu."""
    available = ["cpu"] + ["cuda"] * torch.cuda.is_available()
    try:
        device = torch.device(name or available[-1])
    except RuntimeError:  # not a device torch knows
        device = None
    if device is None or device.type not in available or (device.index or 0) >= max(1, torch.cuda.device_count()):
        raise UsageError(f"--device {name}: this machine has {' and '.join(available)}")
    if device.type == "cuda":  # fp32 matrix products in TF32 on the GPU's tensor cores: as the bf16 runs, 8x faster
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        # Attention with a padding mask went to cuDNN, which builds an execution plan for every new (batch, length):
        # 392 ms for a step on a shape seen for the first time, 19 ms again (an H100, torch 2.11). The
        # memory-efficient kernel, next in line, needs no plan.
        torch.backends.cuda.enable_cudnn_sdp(False)
    return device


def cpu_has_native_bf16() -> bool:
    """bf16 autocast pays on a CPU only with bf16 matrix units: 1.5x faster at the paper's size on AVX512-BF16,
    10-17x slower on AVX2 (EXPERIMENTS.md, "the Transformer and bf16")."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:  # not Linux: assume none
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def autocast(precision: str, device: torch.device):
    """--precision bf16: matrix products in bfloat16; weights, optimizer state and losses stay fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def label_smoothing_at(epoch: int, schedule: str) -> float:
    """--label-smoothing "0.2:100,0.1:25,0.05": 0.2 for 100 epochs, then 0.1 for 25, then 0.05 to the end
    (Appendix E: lowering the smoothing near the end improved every SPoC model); "0.1": 0.1 throughout."""
    start = 0
    for stage in str(schedule).split(","):
        value, _, epochs = stage.partition(":")
        start += int(epochs) if epochs else 10 ** 9
        if epoch <= start:
            return float(value)
    return float(value)


def learning_rate_factor(step: int, args, total_steps: int) -> float:
    """The multiplier of the peak rate at `step`: a linear warm-up from --warmup-start-lr, then
      constant      the peak to the end;
      inverse-sqrt  peak * sqrt(warm-up steps / step), fairseq's schedule, which the paper's models used;
      linear        the warm-up times a decay from the first step, 1 - step / steps, down to 1 / steps at the last
                    update (the cpu preset); its top, at the warm-up's last step, is below the peak by about the share
                    of the run the warm-up took, at most a tenth (so that a short run comes near its peak)."""
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


# ============================================================================
# 8. Command line: flags with the preset's (or a resumed run's) values, one-line errors, progress lines
# ============================================================================

# What a number must be, for check_ranges: a test and the words of its one-line refusal.
RANGES = {"at_least_1": (lambda v: v >= 1, "at least 1"), "not_negative": (lambda v: v >= 0, "at least 0"),
          "positive": (lambda v: v > 0, "above 0"), "fraction": (lambda v: 0 <= v < 1, "within [0, 1)"),
          "probability": (lambda v: 0 <= v <= 1, "within [0, 1]")}


def add_training_args(parser):
    """Flags shared by the training scripts; parse_training_args sets their defaults to the preset's values."""
    parser.add_argument("--preset", choices=("cpu", "paper", "smoke"), default="cpu",
                        help="cpu (default): minutes on 2 cores; paper: the paper's sizes, for a GPU; smoke: tests")
    for flag, kind, text in [
            ("--epochs", int, "maximum epochs"), ("--batch-size", int, "examples per batch"),
            ("--lr", float, "peak learning rate of AdamW"),
            ("--warmup-steps", int, "linear warm-up (--lr-schedule linear: at most a tenth of the run)"),
            ("--warmup-start-lr", float, "the rate the warm-up starts from"),
            ("--patience", int, "stop after this many epochs without a better one (finetune.py: by --keep-by)"),
            ("--d-model", int, "the model's width"), ("--n-heads", int, "attention heads"),
            ("--layers", int, "encoder and decoder layers each"), ("--d-ff", int, "the feed-forward layer's width"),
            ("--dropout", float, "on the residual branches and the embeddings"),
            ("--attention-dropout", float, "on the attention weights"),
            ("--activation-dropout", float, "after the feed-forward ReLU")]:
        parser.add_argument(flag, type=kind, help=text)
    parser.add_argument("--lr-schedule", choices=("constant", "inverse-sqrt", "linear"),
                        help="after the warm-up: the peak rate to the end, fairseq's peak * sqrt(warm-up / step) "
                             "(the paper's), or (times the warm-up, from the first step) a linear decay to 1/steps "
                             "of it at the last update")
    parser.add_argument("--label-smoothing", default="0",
                        help="0: plain cross entropy, as the paper; VALUE:EPOCHS,...,VALUE: by epoch")
    parser.add_argument("--weight-decay", type=float, default=EVERY_PRESET["weight_decay"], help="AdamW's")
    parser.add_argument("--clip-norm", type=float, default=EVERY_PRESET["clip_norm"],
                        help="clip the gradient's norm (0: no clipping)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "auto"), default=EVERY_PRESET["precision"],
                        help="bf16: matrix products in bfloat16 under autocast (weights and optimizer stay fp32); "
                             "auto: bf16 on a CUDA GPU that has it or a CPU with native bf16 (AVX512-BF16 or AMX), "
                             "else fp32")
    parser.add_argument("--seed", type=int, default=EVERY_PRESET["seed"],
                        help="initialisation, batch order, dropout, sampling, Pi's noise")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    either = parser.add_mutually_exclusive_group()
    either.add_argument("--resume", action="store_true", help="continue from OUT/last.pt after an interrupt")
    either.add_argument("--overwrite", action="store_true", help="start over in an --out that holds a run, "
                        "removing its checkpoints and evaluations")


TASK_WORDS = " A task folder (make_task.py): read program and code as your outputs, pseudocode as your inputs."


def parse_training_args(parser, argv, preset_of, run_folder):
    """The one place a training run's settings are resolved: every flag's default is the value the run will use, the
    preset's (its column of ARCHITECTURE, and preset_of(dataset, the flags --data, --preset, --method, --out)) or, with
    --resume, the run's own (run_folder(those flags)'s last.pt, or model.pt before it has one: checkpoint_ran_with,
    settings_ran_with); a flag given on the command line wins and changes only itself (check_resume_settings says which
    may change). --help shows exactly these values (AdamW's betas, which have no flag, are EVERY_PRESET's). Then bad
    numbers are refused, one line and exit 2."""
    first = argparse.ArgumentParser(add_help=False)
    for name in ("data", "preset", "method", "out"):
        first.add_argument(f"--{name}", default=parser.get_default(name))
    first.add_argument("--resume", action="store_true")
    known = first.parse_known_args(argv)[0]
    try:
        try:
            dataset, of = read_dataset(known.data), known.data
        except UsageError:  # no data yet: --help shows a SansType folder's values (a run is refused below)
            dataset, of = "sanstype", f"a SansType folder ({known.data} holds no data yet)"
        parser.set_defaults(data=known.data, **column(ARCHITECTURE, dataset, known.preset), **preset_of(dataset, known))
        methods = "--method" in parser._option_string_actions and not known.method  # finetune.py, none chosen yet
        parser.epilog = f"Defaults: the {known.preset} preset's for {of}" + \
            " before a method's changes (--help with --method shows that method's)" * methods + "; a flag given wins." \
            + TASK_WORDS * (dataset == "task")
        ran = checkpoint_ran_with(run_folder(known))
        if known.resume and ran:
            parser.set_defaults(**settings_ran_with(ran))
            parser.epilog = f"Defaults: the settings {ran} ran with; a flag given wins."
    except KeyError:  # no such method: the parse below says so
        parser.epilog = "Flags shown without a default take the preset's value: --help with --method shows it."
    args = parser.parse_args(argv)
    try:
        args.dataset, device = read_dataset(args.data), pick_device(args.device)
    except UsageError as error:
        parser.error(str(error))
    check_ranges(parser, args, at_least_1="epochs batch_size patience d_model n_heads layers d_ff", positive="lr",
                 not_negative="warmup_steps warmup_start_lr weight_decay clip_norm",
                 fraction="dropout attention_dropout activation_dropout")
    if args.precision == "auto":  # decided here, so that the run's args say which it was
        native = torch.cuda.is_bf16_supported() if device.type == "cuda" else cpu_has_native_bf16()
        args.precision = "bf16" if native else "fp32"
    try:
        label_smoothing_at(1, args.label_smoothing)
    except ValueError:
        parser.error(f"--label-smoothing {args.label_smoothing!r}: a number, or VALUE:EPOCHS,...,VALUE")
    return args


def column_name(dataset: str, preset: str) -> str:
    """The COLUMNS entry of a dataset's preset: SPoC's own where it has one, else SansType's."""
    return f"spoc {preset}" if dataset == "spoc" and f"spoc {preset}" in COLUMNS else preset


def column(table: dict, dataset: str, preset: str) -> dict:
    """A preset's values in a table of settings (a row per setting: a value per COLUMNS entry)."""
    return {setting: values[COLUMNS.index(column_name(dataset, preset))] for setting, values in table.items()}


def check_ranges(parser, args, **names):
    """Refuse a number out of its range, one line and exit 2: names by RANGES' key, check_ranges(parser, args,
    at_least_1="epochs batch_size"); a flag left None (not this run's) passes, a list's every value is checked."""
    for range_name, listed in names.items():
        ok, words = RANGES[range_name]
        for name in listed.split():
            value = getattr(args, name, None)
            for v in value if isinstance(value, list) else [value]:
                if v is not None and not ok(v):
                    parser.error(f"--{name.replace('_', '-')} {v:g}: must be {words}")


def settings(args) -> str:
    """Every value a run uses, as its checkpoint's args hold them (None: a flag this run does not use), and the device
    it runs on."""
    values = {**vars(args), "device": device_name(pick_device(args.device))}
    return ", ".join(f"{name}={value}" for name, value in sorted(values.items()) if value is not None)


def device_name(device: torch.device) -> str:
    """cpu, or the GPU's name too: cuda:0 (NVIDIA H100 80GB HBM3)."""
    return f"{device} ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else str(device)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage dump), with exit code 2 as usual, and whose --help shows the
    description as written (the script's docstring, with its examples) and every flag's default."""

    def __init__(self, **kwargs):
        super().__init__(**{"formatter_class": HelpFormatter, **kwargs})

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description as written; after each flag's help, its default (when it has one)."""

    def _get_help_string(self, action):
        shown = all(action.default is not v for v in (None, False, argparse.SUPPRESS)) and "default" not in action.help
        return action.help + (" (default: %(default)s)" if shown else "")


RESUME_HINT = "interrupted: run again with --resume to continue from the last finished epoch"


def run_main(script: str, work, args, on_interrupt: str = "interrupted"):
    """Run a script's work: bad input becomes one line on stderr and exit code 2, a run that kept no model one line and
    1; Ctrl-C a line and 130, the shell's code for an interrupt."""
    try:
        work(args)
    except (UsageError, FileNotFoundError) as error:  # (the judge's: no g++)
        print(f"{script}: error: {error}", file=sys.stderr)
        sys.exit(2)
    except TrainingFailed as error:
        print(f"{script}: {error}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(f"{script}: {on_interrupt}", file=sys.stderr)
        sys.exit(130)


class Progress:
    """Prints `what: done/total (rate/s, ETA 1m23s)` to stderr, at most every few seconds."""

    def __init__(self, total: int, what: str, every_seconds: float = 5.0):
        self.total, self.what, self.every = total, what, every_seconds
        self.done, self.start = 0, time.time()
        self.last_print = self.start  # the first line waits for a rate worth an ETA
        self.lock = threading.Lock()  # steps may come from several threads

    def step(self, n: int = 1, extra: str | Callable[[], str] = ""):
        """extra: more text for the line, or a function that gives it, called only when a line is printed (so
        that reading the GPU's numbers, a sync point, happens only then)."""
        with self.lock:
            self.done += n
            now = time.time()
            if now - self.last_print >= self.every or self.done == self.total:
                self.last_print = now
                print(self.line(now, extra() if callable(extra) else extra), file=sys.stderr, flush=True)

    def elapsed(self) -> float:
        return max(time.time() - self.start, 1e-9)

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
