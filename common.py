"""Composed Fine-Tuning (Xie, Liang, Ma, ICML 2021), to read top to bottom and copy with torch and sentencepiece.

  1. Tokenizer and data     one sentencepiece vocabulary for inputs and outputs; text files of one example a line
  2. Transformer            the encoder-decoder: encode, decode (teacher forcing), generate with a key/value cache
  3. U-Net                  the image denoiser of the font experiment (fonts.py)
  4. Corruptions            the noises a denoiser Pi learns to undo
  5. Eq. 1                  composed fine-tuning's loss: REINFORCE through the frozen Pi, plus the direct term
  6. Validation             the losses by which fit picks the epoch a run keeps
  7. The training loop      batches, the learning rate set by hand, one epoch, fit

Every function here takes modules, tensors and plain values. The run machinery (flags, run folders, checkpoints,
resume, devices, CUDA graphs) is harness.py's, the presets each script's PRESETS, the C++ judge judge.py's.
"""
import io
import math
import os
import random
import re
import sys
import time
from dataclasses import dataclass
from typing import NamedTuple

import sentencepiece
import torch
import torch.nn as nn
import torch.nn.functional as F


class UsageError(Exception):
    """Bad input from the user (a missing file, a checkpoint that is not one): one line, exit code 2."""


# ============================================================================
# 1. Tokenizer and data
# ============================================================================

# Inputs and outputs share one vocabulary. Id 0 is padding; the rest are sentencepiece's usual specials.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
# Decoders never output these (an output's PAD comes only after its EOS), and log_likelihood masks them as they do;
# still, composed_loss scores y' with f's dropout on, and draws it with dropout off (see there).
NEVER_GENERATED = [PAD_ID, BOS_ID]


def never_generated(vocab_size: int, device) -> torch.Tensor:
    """(V,) True at NEVER_GENERATED's ids, made on the device (an index copied from the host would make a GPU wait)."""
    ids = torch.arange(vocab_size, device=device)
    return torch.stack([ids == i for i in NEVER_GENERATED]).any(dim=0)


# The statement separator, the block indentation and the pseudocode's indentation word are one piece each ("▁" is
# sentencepiece's word-initial space), so that a model sees a program's structure directly.
STRUCTURE_PIECES = ["▁$", "▁~", "▁TAB"]


def train_tokenizer(lines: list[str], vocab_size: int, split_digits: bool = False, verbatim: list[str] = ()) -> bytes:
    """A BPE model's bytes, of vocab_size pieces or as many as the lines support (said so); same lines, same bytes.
    split_digits: each digit a piece, so that a model can copy numbers. verbatim: texts to give back as they are."""
    def train(size):
        model = io.BytesIO()  # verbatim: no NFKC, spaces kept, a piece per character (but " " and "▁", its own space)
        kept = dict(normalization_rule_name="identity", remove_extra_whitespaces=False,
                    required_chars="".join(sorted(set("".join(verbatim)) - {" ", "▁"}))) if verbatim else {}
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=size,
            character_coverage=1.0, user_defined_symbols=STRUCTURE_PIECES, num_threads=1, split_digits=split_digits,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, minloglevel=2, **kept)
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


def load_tokenizer(model_bytes: bytes):
    return sentencepiece.SentencePieceProcessor(model_proto=model_bytes)


def read_lines(path: str) -> list[str]:
    """A text file's lines, one example each (a final newline makes no extra line)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        raise UsageError(f"missing file: {path}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    return lines[:-1] if lines and lines[-1] == "" else lines


def write_lines(path: str, lines):
    """One line per item, through a temporary file, so that a kill never leaves half a file."""
    with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)
    os.replace(path + ".tmp", path)


# ============================================================================
# 2. Transformer
# ============================================================================
# The encoder-decoder of the paper's SansType models, as fairseq's `transformer` builds it: token embeddings scaled by
# sqrt(d) plus sinusoidal positions, pre-norm layers and one more LayerNorm after the last, ReLU feed-forward, dropout
# on the residual branches, the attention weights and after the ReLU, and one embedding matrix shared by the encoder,
# the decoder and the output projection.

@dataclass
class TransformerConfig:
    """The sizes and dropouts (these defaults: the paper preset's)."""
    vocab_size: int
    d_model: int = 256
    n_heads: int = 2
    encoder_layers: int = 3
    decoder_layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    attention_dropout: float = 0.2
    activation_dropout: float = 0.2
    max_positions: int = 2048  # SPoC's longest test programs


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


def dropout(x, p: float, training: bool):
    """F.dropout: each value zeroed with probability p, the rest scaled by 1 / (1 - p), in x's dtype. On the CPU the
    mask is uniform numbers >= p: Bernoulli(1 - p) draws, which torch's own take several times as long to make there."""
    if not training or p in (0, 1) or x.is_cuda:
        return F.dropout(x, p, training)
    return x * torch.rand(x.shape, device=x.device).ge_(p).div_(1 - p).to(x.dtype)


class Dropout(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        return dropout(x, self.p, self.training)


class Attention(nn.Module):
    """Multi-head attention. Decoding reads keys and values from a cache: the encoder's, projected once, or its own,
    this step's written at `position` into a slot allocated up front (no step changes a shape)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.q, self.k, self.v, self.out = (linear(d_model, d_model) for _ in range(4))

    def forward(self, x, context, mask, cache=None, position=None):
        heads = lambda t: t.view(t.shape[0], t.shape[1], self.n_heads, -1).transpose(1, 2)  # noqa: E731 (B, H, T, D/H)
        q = heads(self.q(x))
        if cache is None:
            k, v = self.k(context), self.v(context)
        else:
            if position is not None:  # self-attention: this step's key and value into their slot
                cache["k"].index_copy_(1, position, self.k(x))
                cache["v"].index_copy_(1, position, self.v(x))
            k, v = cache["k"], cache["v"]
        y = F.scaled_dot_product_attention(q, heads(k), heads(v), attn_mask=mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(x.shape))


class Layer(nn.Module):
    """A pre-norm layer, each sublayer as x + dropout(sublayer(LayerNorm(x))): self-attention (the decoder's causal),
    in the decoder attention to the encoder's output, then feed-forward."""

    def __init__(self, c: TransformerConfig, decoder: bool):
        super().__init__()
        self.self_attention = Attention(c.d_model, c.n_heads, c.attention_dropout)
        self.cross_attention = Attention(c.d_model, c.n_heads, c.attention_dropout) if decoder else None
        self.ffn = nn.Sequential(linear(c.d_model, c.d_ff), nn.ReLU(), Dropout(c.activation_dropout),
                                 linear(c.d_ff, c.d_model))
        self.self_norm, self.ffn_norm = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
        self.cross_norm = nn.LayerNorm(c.d_model) if decoder else None
        self.dropout = c.dropout

    def forward(self, x, mask, memory=None, memory_mask=None, cache=None, position=None):
        y = self.self_norm(x)
        y = self.self_attention(y, y, mask, cache and cache["self"], position)
        x = x + dropout(y, self.dropout, self.training)
        if self.cross_attention is not None:
            y = self.cross_attention(self.cross_norm(x), memory, memory_mask, cache and cache["cross"])
            x = x + dropout(y, self.dropout, self.training)
        return x + dropout(self.ffn(self.ffn_norm(x)), self.dropout, self.training)


class Decoded(NamedTuple):
    """A decoded batch: tokens (B, T), each row's ids, EOS where it chose one, PAD after; lengths (B,), the ids
    before EOS (max_len where it never chose one)."""
    tokens: torch.Tensor
    lengths: torch.Tensor


class Transformer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = self.config = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model, padding_idx=PAD_ID)
        # N(0, 1/d) times sqrt(d): unit-size inputs and logits of a sensible size (N(0, 1) blows both up).
        nn.init.normal_(self.embed.weight, std=c.d_model ** -0.5)
        nn.init.zeros_(self.embed.weight[PAD_ID])
        self.register_buffer("positions", sinusoidal_positions(c.max_positions, c.d_model), persistent=False)
        self.encoder = nn.ModuleList(Layer(c, decoder=False) for _ in range(c.encoder_layers))
        self.decoder = nn.ModuleList(Layer(c, decoder=True) for _ in range(c.decoder_layers))
        # Pre-norm layers add to an un-normalised residual stream: each stack ends with one LayerNorm.
        self.encoder_norm, self.decoder_norm = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
        self.graph_decoding = None  # on a GPU, harness.py's decoding by captured steps, which generate then uses

    def embed_tokens(self, tokens, positions=None, one_hot=None):
        """Embeddings plus positions; one_hot: the tokens as (B, T, V) rows, as straight-through feeds Pi y'."""
        weight = self.embed.weight  # (one_hot: f's fp32 softmax rows, read in Pi's dtype where Pi is bf16)
        vectors = self.embed(tokens) if one_hot is None else one_hot.to(weight.dtype) @ weight
        positions = self.positions[:tokens.shape[1]] if positions is None else positions
        return dropout(vectors * math.sqrt(self.config.d_model) + positions, self.config.dropout, self.training)

    def encode(self, src, one_hot=None):
        """src (B, S) PAD-padded ids -> (memory (B, S, D), its mask (B, 1, 1, S): True where a key may be read)."""
        mask = (src != PAD_ID)[:, None, None, :]
        x = self.embed_tokens(src, one_hot=one_hot)
        for layer in self.encoder:
            x = layer(x, mask)
        return self.encoder_norm(x), mask

    def decode(self, tgt_in, memory, memory_mask):
        """Logits (B, T, V) of the next token at every position of tgt_in (B, T): teacher forcing."""
        T = tgt_in.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).tril()
        x = self.embed_tokens(tgt_in)
        for layer in self.decoder:
            x = layer(x, causal, memory, memory_mask)
        return self.decoder_norm(x) @ self.embed.weight.T  # the output projection shares the embeddings

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, *self.encode(src))

    @torch.no_grad()
    def generate(self, src, max_len: int = 200, sample: bool = False) -> Decoded:
        """Greedy (sample=True: ancestral) decoding, each row until EOS or max_len tokens, a token a step."""
        memory, memory_mask = self.encode(src)
        if self.graph_decoding is not None:
            return self.graph_decoding(self, memory, memory_mask, max_len, sample)
        s, step = start_decoding(self, memory, memory_mask, max_len, sample), 0
        for step in range(1, max_len + 1):
            decode_step(self, s, written=step)
            finished = s.done[s.rows]
            if finished.all():
                break
            if 4 * finished.sum() >= len(s.rows):  # shed the finished rows, a quarter at a time: a step costs by its
                going = ~finished                   # rows, and shedding, which copies each cache, about a step
                s.rows, s.memory_mask = s.rows[going], s.memory_mask[going]
                for cache in s.caches:
                    for part in cache.values():
                        part["k"], part["v"] = part["k"][going], part["v"][going]
        tokens = s.tokens[:, 1:step + 1]
        return Decoded(tokens, torch.where(s.done, (tokens == EOS_ID).int().argmax(dim=1), max_len))


@dataclass
class Decoding:
    """One batch's decoding, each buffer allocated at its full size (start_decoding), advanced by decode_step."""
    tokens: torch.Tensor       # (B, max_len + 1): BOS, then each step's choice; PAD after a row's EOS
    done: torch.Tensor         # (B,) bool: the row has chosen EOS
    position: torch.Tensor     # (1,) the position the next step reads (a tensor: a CUDA graph reads it anew)
    rows: torch.Tensor         # (R,) the rows still decoded (the CPU sheds finished ones)
    caches: list               # per decoder layer, for those rows: {"self": {"k", "v"} (R, max_len, D),
                               #                                     "cross": {"k", "v"} (R, S, D)}
    memory_mask: torch.Tensor  # (R, 1, 1, S)
    never_generated: torch.Tensor  # (V,) True at NEVER_GENERATED's ids
    sample: bool


def start_decoding(model, memory, memory_mask, max_len: int, sample: bool) -> Decoding:
    """A decoding's state at its first step: BOS in every row, the encoder's keys and values projected once."""
    B, D, device = memory.shape[0], model.config.d_model, memory.device
    caches = []
    for layer in model.decoder:
        cross = {"k": layer.cross_attention.k(memory), "v": layer.cross_attention.v(memory)}
        # zeros, not empty: a slot not yet written is masked, but NaN garbage would still poison the softmax
        caches.append({"cross": cross, "self": {name: cross[name].new_zeros(B, max_len, D) for name in "kv"}})
    tokens = torch.full((B, max_len + 1), PAD_ID, dtype=torch.long, device=device)
    tokens[:, 0] = BOS_ID
    done, position = torch.zeros(B, dtype=torch.bool, device=device), torch.zeros(1, dtype=torch.long, device=device)
    return Decoding(tokens, done, position, torch.arange(B, device=device), caches, memory_mask.clone(),
                    never_generated(model.config.vocab_size, device), sample)


def decode_step(model, s: Decoding, written: int | None = None):
    """One more token for each of s.rows, in place (PAD once a row chose EOS), reading its cache's `written` slots."""
    # written=None: every slot, those not yet written masked: fixed shapes and no host synchronisation, so that
    # harness.py can capture the step in a CUDA graph.
    token = s.tokens.index_select(1, s.position)[s.rows]  # (R, 1)
    x = model.embed_tokens(token, model.positions[s.position])
    slots = s.caches[0]["self"]["k"].shape[1] if written is None else written
    visible = (torch.arange(slots, device=token.device) <= s.position)[None] if written is None else None
    for layer, cache in zip(model.decoder, s.caches):
        cache = {"self": {name: cache["self"][name][:, :slots] for name in "kv"}, "cross": cache["cross"]}
        x = layer(x, visible, None, s.memory_mask, cache, s.position)
    logits = (model.decoder_norm(x) @ model.embed.weight.T)[:, -1].float().masked_fill(s.never_generated, -math.inf)
    if s.sample:  # inverse-CDF draw: one uniform per row (torch.multinomial draws one per class)
        cdf = F.softmax(logits, dim=-1).cumsum(dim=-1)
        uniform = torch.rand(len(s.tokens), 1, device=cdf.device)[s.rows] * cdf[:, -1:]  # as many whoever is left
        uniform = uniform.clamp(min=torch.finfo(cdf.dtype).tiny)  # above 0, where the cdf of PAD (never drawn) lies
        next_token = torch.searchsorted(cdf, uniform).squeeze(1).clamp(max=logits.shape[-1] - 1)
    else:
        next_token = logits.argmax(dim=-1)
    done = s.done[s.rows]
    next_token = next_token.masked_fill(done, PAD_ID)  # a finished row stays finished
    s.position += 1
    s.tokens[s.rows, s.position] = next_token
    s.done[s.rows] = done | (next_token == EOS_ID)


def output_length_limit(model, src, tgt_out=None) -> int:
    """Where decoding gives up (code is about 1.2x its pseudocode); given tgt_out, at most 16 past its padded width."""
    longest = min(2 * src.shape[1] + 10, model.config.max_positions)
    return longest if tgt_out is None else min(longest, tgt_out.shape[1] + 16)


def as_lists(decoded: Decoded) -> list[list[int]]:
    """Each row's ids before EOS, as lists (for the tokenizer)."""
    return [row[:n] for row, n in zip(decoded.tokens.tolist(), decoded.lengths.tolist())]


def with_eos(decoded: Decoded):
    """(B, T + 1): each row's ids, then EOS (also after a cut one), PAD after: a decoded batch as a source."""
    return F.pad(decoded.tokens, (0, 1), value=PAD_ID).scatter(1, decoded.lengths[:, None], EOS_ID)


@torch.no_grad()
def translate(model, tokenizer, texts: list[str], batch_size: int, progress=None) -> list[str]:
    """Greedy outputs for texts (the paper decodes greedily), in batches of similar length, in input order;
    progress(n) is told of each n decoded."""
    device = next(model.parameters()).device
    model.eval()
    sources = tokenizer.encode(texts)
    order = sorted(range(len(texts)), key=lambda i: len(sources[i]))
    outputs = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        chosen = order[start:start + batch_size]
        src = pad([sources[i] + [EOS_ID] for i in chosen]).to(device)
        for i, text in zip(chosen, tokenizer.decode(as_lists(model.generate(src, output_length_limit(model, src))))):
            outputs[i] = text
        if progress:
            progress(len(chosen))
    return outputs


def denoise(denoiser, tokenizer, outputs: list[str], batch_size: int, error_free=None, progress=None) -> list[str]:
    """Pi(y') for each output: the denoiser's greedy repair. With an error detector g (SPoC, Appendix E: Pi(y') = y'
    where g passes y'), error_free(outputs) says which g passes, and only the others are repaired."""
    passed = error_free(outputs) if error_free else [False] * len(outputs)
    flagged = [output for output, ok in zip(outputs, passed) if not ok]
    repaired = iter(translate(denoiser, tokenizer, flagged, batch_size, progress))
    return [output if ok else next(repaired) for output, ok in zip(outputs, passed)]


# ============================================================================
# 3. U-Net
# ============================================================================
# The denoiser Pi of the font experiment (Section 6.3): a 3-level U-Net (Ronneberger et al., 2015) from a 1x32x32
# image in [-1, 1] to another. Stride-2 convolutions go down 32 -> 16 -> 8 -> 4; transposed ones come back up, each
# concatenated with the encoder map of its size (fine strokes bypass the bottleneck). As in the authors' code, no
# convolution has a bias and the output is drawn from the 16x16 features alone, so Pi cannot copy its input pixel by
# pixel: it must redraw f(x) as a glyph. width=64 is theirs.

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
# The noises a denoiser learns to undo: SansType's code noise, statement by statement (` $ `-separated) as the authors'
# generator draws it, and random deletions (Table 5); then any task's piece edits and the molecules' SMILES edits.
# Each is a function of an output and a random.Random (and its own parameter; the piece edits also of the tokenizer),
# so that every epoch draws fresh, reproducible noise; train_denoiser.CORRUPTIONS names them.
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
# 5. Eq. 1
# ============================================================================
# Composed fine-tuning trains f = p_theta with the denoiser Pi = p_beta frozen, to maximise
#
#     E_{y' ~ p_theta(.|x)} [ log p_beta(y | y') ]  +  lambda * log p_theta(y | x)                    (Eq. 1)
#
# y' is discrete, so the first term's gradient needs an estimator (Section 3): REINFORCE, the paper's (Appendix D),
# E[(log p_beta(y | y') - b) grad log p_theta(y' | x)] from one y' per input, the reward (a sum over y's tokens)
# floored at gamma; or straight-through, Pi reading y' as one-hot rows that carry the gradient of f's softmax
# (Bengio et al., 2013).
#
# composed_loss: weight * (first term) + lam * (direct term), each summed over tokens and divided by the batch's gold
# tokens (fairseq's scale); in Eq. 1's form (first term weighted 1), lambda = lam / weight: 0.1 and 1 are lambda = 10,
# the loss scaled by 0.1. Pi is frozen, in eval mode (checked). baseline b: the mean reward of the batch's other inputs
# ("batch") or 0 ("none", the paper's). error_free: Pi's error detector g (SPoC, Appendix E), which passes a y' as it
# is. A batch of inputs with no gold output (targets of one PAD each: finetune.py --unlabeled-inputs) has the first
# term alone, rewarded by log p_beta(y' | y'): Pi's likelihood of leaving y' as it is. Pi reads y' as the ids f chose;
# evaluate.py and predict.py hand Pi f's text, encoded again (common.denoise): a text's encoding need not be those ids.
# Shapes: B inputs; widths S of the sources, T of the gold (none: L + 1), L of the samples; V the vocabulary; grad: f's.

def composed_loss(f, denoiser, src, tgt_in, tgt_out, estimator="reinforce", baseline="batch", gamma=-50.0,
                  weight=0.1, lam=1.0, label_smoothing=0.0, error_free=None, max_len=None):
    """A loss whose gradient estimates minus Eq. 1's for a batch."""
    if denoiser.training:  # (its dropout would make the reward, Pi's score of y', noisier than Pi is at test time)
        raise ValueError("composed_loss: Pi must be in eval mode and frozen: denoiser.eval().requires_grad_(False)")
    no_gold = tgt_out.shape[1] == 1 and bool((tgt_out == PAD_ID).all())
    max_len = max_len or output_length_limit(f, src, None if no_gold else tgt_out)
    # y' is drawn as f predicts, without dropout, and scored below with it (f in train mode), as the direct term is
    training = f.training
    y_prime = f.eval().generate(src, max_len, sample=True)              # (B, L) y' ~ p_theta(.|x); f eval, no grad
    f.train(training)
    y_prime_eos = with_eos(y_prime)                                     # (B, L+1) y', then EOS: as Pi reads it
    y_in, y_out = (shift_right(y_prime_eos), y_prime_eos) if no_gold else (tgt_in, tgt_out)  # (B, T) y (no gold: y')
    memory, memory_mask = f.encode(src)                                 # (B, S, D) f train, grad; both terms read it
    f_logits = f.decode(shift_right(y_prime_eos), memory, memory_mask).float()  # (B, L+1, V) f on y'; grad
    if estimator == "reinforce":
        sampled = F.pad(y_prime.tokens, (0, 1), value=PAD_ID)           # (B, L+1) y' as drawn (a cut row has no EOS)
        log_p_sample = log_likelihood(f_logits, sampled)                # (B,) log p_theta(y'|x); grad
        with torch.no_grad():  # the frozen Pi (eval mode) scores y': a reward, no grad
            reward = log_likelihood(denoiser(y_prime_eos, y_in), y_out)  # (B,) log p_beta(y|y')
            if error_free is not None:  # Pi = (g, nu): what g passes is Pi's output, right (0) or wrong (gamma)
                right = same_sequences(y_prime_eos, y_out)              # (B,) y' is y
                reward = torch.where(error_free(y_prime), torch.where(right, 0.0, gamma), reward)
            reward = reward.clamp(min=gamma)
        # b, no grad: (B,) the other inputs' mean (not the sample it is subtracted from: unbiased); none or one input: 0
        b = (reward.sum() - reward) / (len(reward) - 1) if baseline == "batch" and len(reward) > 1 else 0.0
        first_term = -((reward - b) * log_p_sample).sum()               # () REINFORCE's surrogate; grad
    else:  # straight-through: the gradient reaches f through Pi's input
        rows = straight_through_rows(f_logits, y_prime_eos)             # (B, L+1, V) one-hot y'; grad: f's softmax
        pi_logits = denoiser.decode(y_in, *denoiser.encode(y_prime_eos, rows))  # (B, T, V) Pi (eval) on rows; grad
        first_term = -log_likelihood(pi_logits, y_out).sum()            # () -log p_beta(y|y'); grad
    if no_gold:
        return weight * first_term / (src != PAD_ID).sum()  # (a count that does not depend on y')
    direct = sequence_loss(f.decode(y_in, memory, memory_mask), y_out, label_smoothing)  # () -log p_theta(y|x); grad
    return weight * first_term / (y_out != PAD_ID).sum() + lam * direct


def log_likelihood(logits, targets):
    """log p(targets) (B,): each row's token log-probabilities summed, padding skipped, as the decoders draw them."""
    logits = logits.float().masked_fill(never_generated(logits.shape[-1], logits.device), -math.inf)
    token = F.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    return token.masked_fill(targets == PAD_ID, 0.0).sum(dim=1)  # (not * mask: -inf * 0 is nan)


def sequence_loss(logits, targets, label_smoothing: float = 0.0):
    """Mean cross entropy per target token, padding ignored, label-smoothed (fairseq's)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=PAD_ID,
                           label_smoothing=label_smoothing)


def shift_right(tokens):
    """A decoder's input for teacher forcing on `tokens`: BOS, then every token but the last."""
    return F.pad(tokens[:, :-1], (1, 0), value=BOS_ID)


def same_sequences(a, b):
    """Row by row, whether two PAD-padded id tensors hold the same sequence."""
    width = max(a.shape[1], b.shape[1])
    return (F.pad(a, (0, width - a.shape[1]), value=PAD_ID) == F.pad(b, (0, width - b.shape[1]), value=PAD_ID)).all(1)


def straight_through_rows(f_logits, y_prime_eos):
    """y' + EOS as one-hot rows (B, T, V), one_hot(y') - p.detach() + p: exactly y' going forward, the gradient
    of f's softmax p going back (p from f teacher-forced on y'); padding a zero row, as its embedding."""
    p = F.log_softmax(f_logits, dim=-1).exp()
    hard = F.one_hot(y_prime_eos, p.shape[-1]).float()
    return (hard - p.detach() + p) * (y_prime_eos != PAD_ID)[..., None]


# ============================================================================
# 6. Validation: the criteria that keep an epoch
# ============================================================================

@torch.no_grad()
def validation_loss(model, val_batches) -> float:
    """Mean per-token cross entropy (no smoothing) of a model teacher-forced on batches on its device."""
    model.eval()
    total = tokens = 0
    for src, tgt_in, tgt_out in val_batches:
        logits = model(src, tgt_in).float()
        total += F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD_ID, reduction="sum").double()
        tokens += (tgt_out != PAD_ID).sum()
    return (total / tokens).item()


@torch.no_grad()
def composed_validation_loss(f, denoiser, val_batches, error_free=None, gamma: float = -50.0) -> float:
    """Composed's criterion: Pi(f(x))'s cross entropy per gold token, f greedy, Pi teacher-forced on y (and its g)."""
    f.eval()
    total = tokens = 0
    for src, tgt_in, tgt_out in val_batches:
        y_prime = f.generate(src, output_length_limit(f, src))
        y_prime_eos = with_eos(y_prime)
        logits = denoiser.decode(tgt_in, *denoiser.encode(y_prime_eos)).float()
        loss = F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD_ID, reduction="none").sum(dim=1)
        if error_free is not None:  # what g passes is Pi's output: right (0) or wrong (-gamma, as composed_loss's)
            right = same_sequences(y_prime_eos, tgt_out)
            loss = torch.where(error_free(y_prime), torch.where(right, 0.0, -gamma), loss)
        total, tokens = total + loss.double().sum(), tokens + (tgt_out != PAD_ID).sum()
    return (total / tokens).item()


# ============================================================================
# 7. The training loop
# ============================================================================

# batches: the decoder reads BOS + output and predicts output + EOS. Pairs of similar length share a batch, as in
# fairseq (unsorted batches are half padding); with an rng, ties are broken at random and the batches come in random
# order.
# An input with no gold output (its target None) goes in a batch of such inputs alone, whose targets are one PAD each
# (composed_loss reads that as no gold). length_multiple: lengths padded up to a multiple of it (a GPU's).

def batches(pairs: list, batch_size: int, rng: random.Random | None = None, length_multiple: int = 1) -> list[tuple]:
    """(src, tgt_in, tgt_out) padded LongTensors from (input ids, output ids) pairs."""
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
        if chosen[0][1] is None:
            tgt = torch.full((len(chosen), 2), PAD_ID, dtype=torch.long)
        else:
            tgt = pad([[BOS_ID] + t + [EOS_ID] for _, t in chosen], length_multiple, extra=1)
        prepared.append((src, tgt[:, :-1], tgt[:, 1:]))
    return prepared


def epoch_batches(pairs: list, batch_size: int, seed: int, epoch: int, length_multiple: int = 1) -> list[tuple]:
    """Epoch `epoch`'s batches, in an order of the seed's and the epoch's own (the same whatever the run's length)."""
    return batches(pairs, batch_size, random.Random(f"{seed}-batch order-{epoch}"), length_multiple)


def pad(sequences: list[list[int]], length_multiple: int = 1, extra: int = 0) -> torch.Tensor:
    """(B, T) PAD-padded ids; T - extra rounded up to a multiple of length_multiple."""
    longest = max(map(len, sequences)) - extra
    out = torch.full((len(sequences), -(-longest // length_multiple) * length_multiple + extra), PAD_ID,
                     dtype=torch.long)
    for row, ids in enumerate(sequences):
        out[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


# The learning rate, set by hand before each update: a linear warm-up from warmup_start to the peak, then
#   constant      the peak;
#   inverse-sqrt  peak * sqrt(warm-up steps / step), fairseq's, which the paper's models used;
#   linear        the warm-up times 1 - step / steps from the first step, down to peak / steps at the last update; its
#                 warm-up takes at most a tenth of the run, so that a short run comes near its peak.

def learning_rate(step: int, steps: int, peak: float, schedule: str, warmup_steps: int, warmup_start: float) -> float:
    """The rate of update `step` (0 .. steps - 1)."""
    if schedule == "linear":
        warmup_steps = min(warmup_steps, steps // 10)
    warmup_steps = max(1, warmup_steps)
    start = warmup_start / peak
    warmup = min(1.0, start + (1.0 - start) * (step + 1) / warmup_steps)
    if schedule == "linear":
        return peak * (warmup * max(0.0, 1.0 - step / steps))
    if schedule == "inverse-sqrt":
        return peak * (warmup * min(1.0, math.sqrt(warmup_steps / (step + 1))))
    return peak * warmup


def adamw(model, lr: float, betas: tuple[float, float], weight_decay: float, fused: bool = False):
    """Every run's optimizer: Adam with decoupled weight decay (fairseq's adam); fused, on a GPU: one kernel a step."""
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, weight_decay=weight_decay, fused=fused)


def label_smoothing_at(epoch: int, schedule: str) -> float:
    """"0.2:100,0.1:25,0.05": 0.2 for 100 epochs, 0.1 for 25, then 0.05 (SPoC's, Appendix E); "0.1": throughout."""
    start = 0
    for stage in str(schedule).split(","):
        value, _, epochs = stage.partition(":")
        start += int(epochs) if epochs else 10 ** 9
        if epoch <= start:
            return float(value)
    return float(value)


def train_one_epoch(model, epoch_batches, optimizer, lr_at, state: dict, composed: dict | None, label_smoothing: float,
                    clip_norm: float, bf16: bool, what: str) -> float:
    """One pass over the batches: -log p(y|x), or composed_loss with `composed`'s Pi and settings; the mean loss."""
    model.train()
    measure = "loss" if composed is None else "surrogate"  # composed_loss: a surrogate whose gradient estimates Eq. 1's
    device = next(model.parameters()).device
    total = torch.zeros((), dtype=torch.float64, device=device)  # summed on the device: nothing waits for a GPU
    tokens = torch.zeros((), dtype=torch.long, device=device)
    started = shown = time.time()
    for i, batch in enumerate(epoch_batches, 1):
        src, tgt_in, tgt_out = (t.to(device, non_blocking=True) for t in batch)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(state["step"])
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            if composed is None:
                loss = sequence_loss(model(src, tgt_in), tgt_out, label_smoothing)
            else:
                loss = composed_loss(model, src=src, tgt_in=tgt_in, tgt_out=tgt_out, label_smoothing=label_smoothing,
                                     **composed)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        optimizer.step()
        state["step"] += 1
        n = (tgt_out != PAD_ID).sum()
        total += loss.detach().double() * n
        tokens += n
        if time.time() - shown >= 30 or i == len(epoch_batches):  # a progress line (a GPU's one wait) every 30 s
            shown, seconds = time.time(), time.time() - started
            print(f"{what}: {i}/{len(epoch_batches)} batches, {measure} {(total / tokens).item():.3f}, "
                  f"{tokens.item() / seconds:.0f} tok/s, ETA {(len(epoch_batches) - i) * seconds / i:.0f} s",
                  file=sys.stderr, flush=True)
    return (total / tokens).item()


def fit(model, optimizer, upcoming, lr_at, state: dict, epochs: int, patience: int, validate, save_epoch,
        composed: dict | None = None, report=None, label_smoothing="0", clip_norm=0.0, bf16=False):
    """Train on each epoch's batches (upcoming), validate, keep the best, stop `patience` epochs after it."""
    # state: epoch, step, best_epoch, best_loss, best_share, history (a resumed run's: where it stopped);
    # validate(model): the epoch's val loss and judged share (or None); save_epoch(state, improved) saves the run (both
    # harness.py's); composed: composed_loss's keywords, its Pi and settings; report(model, epoch): a line's note.
    device = next(model.parameters()).device.type
    first = 0 if composed and not state["history"] else state["epoch"] + 1  # composed: epoch 0, the f it starts from
    for epoch in range(first, epochs + 1):
        if epoch - state["best_epoch"] > patience:
            break
        started, train_loss = time.time(), math.nan  # composed's epoch 0 trains nothing: it validates f as it starts
        if epoch:
            train_loss = train_one_epoch(model, next(upcoming), optimizer, lr_at, state, composed,
                                         label_smoothing_at(epoch, label_smoothing), clip_norm, bf16,
                                         f"epoch {epoch}/{epochs}")
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss, share = validate(model)
        # The kept epoch: the highest judged share of val where there is one (--keep-by), ties broken by the loss
        if share is None or state["best_share"] is None or share == state["best_share"]:
            improved = loss < state["best_loss"]
        else:
            improved = share > state["best_share"]
        if improved:
            state.update(best_epoch=epoch, best_loss=loss, best_share=share)
        state["epoch"], note, seconds = epoch, report(model, epoch) if report else "", time.time() - started
        state["history"].append(dict(epoch=epoch, train_loss=train_loss, val_loss=loss, val_share=share, note=note,
                                     seconds=seconds))
        trained = f"train {'surrogate' if composed else 'loss'} {train_loss:.4f}," if epoch else "(f as it starts)"
        shown = "" if share is None else f", val share {share:.1%}"
        print(f"epoch {epoch}: {trained} val loss {loss:.4f}{shown}{' (best)' * improved}{note}; {seconds:.1f} s",
              file=sys.stderr, flush=True)
        save_epoch(state, improved)
    return state
