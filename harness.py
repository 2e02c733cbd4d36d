"""The run machinery around the method (common.py): what a script needs to run it from a shell, not to understand it.

  1. Data folders       the dataset a folder holds (dataset.json), its tokenizer, a task's validity command
  2. Checkpoints        self-contained model files, loaded for a role (predictor, denoiser) and a tokenizer
  3. Runs               a run folder claimed (never replaced unasked), trained epoch by epoch, resumed (on the CPU
                        bit for bit)
  4. Devices            the default device, a GPU's padded shapes, and decoding as one CUDA graph a step
  5. Command line       flags whose defaults are the preset's (or a resumed run's), one-line errors, progress lines
"""
import argparse
import copy
import ctypes
import functools
import glob
import itertools
import json
import math
import os
import shutil
import signal
import sys
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F

import common
from common import UsageError

# ============================================================================
# 1. Data folders
# ============================================================================
# Every data folder names in dataset.json (each make_*.py writes it) its dataset, by which the later stages pick its
# presets and judge, and the noise its denoiser learns (corruption; SPoC's also its error detector g).
DATASETS = ("sanstype", "spoc", "molecules", "task")  # task: a folder make_task.py made from a user's pairs
DATA_MAKERS = "make_sanstype.py, make_spoc.py, make_molecules.py or make_task.py"


def write_manifest(data_dir: str, dataset: str, **facts):
    with open(os.path.join(data_dir, "dataset.json"), "w", encoding="utf-8") as f:
        json.dump({"dataset": dataset, **facts}, f, indent=1)


def claim_data_folder(out: str, overwrite: bool):
    """Refuse, before any work, a data folder that cannot be written or holds data, unless told to --overwrite it."""
    check_writable(out)
    if os.path.exists(os.path.join(out, "dataset.json")) and not overwrite:
        raise UsageError(f"--out {out}: there is data there already (dataset.json); --overwrite writes the new data "
                         "there (make_task.py, make_spoc.py with train: the old goes first), or name another folder")


# Every file a make_*.py writes, named here alone: --overwrite removes them first (an old ood split would be judged);
# the user's own files stay (unlabeled.src may be one: finetune.py --unlabeled-inputs reads it).
MADE_FILES = ["unlabeled.tgt", "spm.model", "dataset.json"] + [f"{split}.{end}" for split in (
    "train", "val", "test", "ood", "testw", "testp") for end in ("src", "tgt", "inp", "out", "ids", "cases.jsonl")]


def remove_made_files(out: str, keep=()):
    """The MADE_FILES in out go, but the paths in keep (this run's inputs)."""
    keep = {os.path.realpath(path) for path in keep if path}
    for path in (os.path.join(out, name) for name in MADE_FILES):
        if os.path.isfile(path) and os.path.realpath(path) not in keep:
            os.remove(path)


def read_data_folder(data_dir: str) -> dict:
    """A data folder's dataset.json (its dataset, noise, what made it) and, under "spm", its tokenizer's bytes."""
    manifest, spm = (os.path.join(data_dir, name) for name in ("dataset.json", "spm.model"))
    if os.path.isfile(data_dir):  # a file of the folder (data/sanstype/train.src) is a likely slip
        raise UsageError(f"--data {data_dir} is a file: name the data folder that holds it "
                         f"({os.path.dirname(data_dir) or '.'})")
    try:
        with open(manifest, encoding="utf-8") as f, open(spm, "rb") as g:
            facts = json.load(f)
            facts["spm"] = g.read()
        if facts["dataset"] not in DATASETS or not facts["corruption"]:
            raise ValueError
        common.load_tokenizer(facts["spm"] or b"-")
    except FileNotFoundError as error:
        raise UsageError(f"missing {error.filename}: make the data with {DATA_MAKERS}") from None
    except RuntimeError:  # (sentencepiece's; an empty model parses, and fails at every use)
        raise UsageError(f"{spm} is not a sentencepiece model: make the data again with {DATA_MAKERS}") from None
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{manifest} is not a manifest of this version's {DATA_MAKERS}: make the data again") \
            from None
    return facts


def valid_outputs(data_dir: str, outputs: list[str]) -> list[bool] | None:
    """A task's own validity check (make_task.py --valid-command) on outputs; None where the task has none."""
    import judge  # (only the runs that judge need the judge)
    command = read_data_folder(data_dir).get("valid_command")
    try:
        return judge.check_validity(command, outputs, data_dir) if command else None
    except ValueError as error:
        raise UsageError(f"{data_dir}/dataset.json: {error}") from None


# ============================================================================
# 2. Checkpoints
# ============================================================================
# One self-contained file a model: its config and weights, the tokenizer's bytes and the settings it was trained with,
# so that loading it needs no other file. Training writes model.pt (the kept epoch) and last.pt (the latest, with the
# optimizer, the random states and the history: --resume's), each through a temporary file.

def load_checkpoint(path: str, needs=("config", "model", "spm"), flag: str | None = None) -> dict:
    if not os.path.isfile(path):  # flag: the one that names another (where a default path was taken)
        raise UsageError(f"no checkpoint at {path}" + f" (from {os.getcwd()})" * (not os.path.isabs(path)) +
                         f": train it, or give {flag} PATH" * bool(flag))
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # pickle, zip or torch errors: whatever it is, it is not ours
        raise UsageError(f"{path} is not a checkpoint ({type(error).__name__})") from None
    if not isinstance(checkpoint, dict) or any(key not in checkpoint for key in needs):
        code, fonts = "the code experiments (train_denoiser.py, finetune.py)", "fonts.py"
        if isinstance(checkpoint, dict) and ("kind" in checkpoint or "role" in checkpoint) and \
                ("kind" in checkpoint) != ("kind" in needs):  # the other experiment's
            of, not_of = (fonts, code) if "kind" in checkpoint else (code, fonts)
            raise UsageError(f"{path} is a {checkpoint.get('kind') or checkpoint.get('role')} checkpoint of {of}, "
                             f"not of {not_of}")
        raise UsageError(f"{path} is not a checkpoint of this project (it lacks {', '.join(needs)})")
    return checkpoint


def save_checkpoint(path: str, payload: dict):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    torch.save(payload, f"{path}.tmp{os.getpid()}")
    os.replace(f"{path}.tmp{os.getpid()}", path)
    for stale in glob.glob(f"{glob.escape(path)}.tmp*"):  # left by a run killed while saving
        os.remove(stale)


def load_model(path: str, spm: bytes, spm_path: str, role: str, config: common.TransformerConfig | None = None,
               flag: str | None = None):
    """(model, checkpoint) of a role, a tokenizer (spm, spm_path's) and config's sizes (the model its dropouts)."""
    checkpoint = load_checkpoint(path, flag=flag)
    if checkpoint.get("role") != role:
        raise UsageError(f"{path} is a {checkpoint.get('method', '')} {checkpoint.get('role', 'unknown')} "
                         f"checkpoint, where a {role} is needed".replace("  ", " "))
    if checkpoint["spm"] != spm:  # SansType's released Pi fits the tokenizer make_sanstype.py writes with no flags
        sanstype = "make the data with `python make_sanstype.py` (no flags) under sentencepiece 0.2.3 (requirements" \
            ".txt), or " * (checkpoint.get("args", {}).get("dataset") == "sanstype")
        raise UsageError(f"{path} and {spm_path} use different tokenizers: {sanstype}retrain one on the same data")
    config, theirs = config or common.TransformerConfig(**checkpoint["config"]), checkpoint["config"]
    differ = [f"{key} {theirs[key]} (this run: {getattr(config, key)})" for key in ("vocab_size", "d_model", "n_heads",
              "encoder_layers", "decoder_layers", "d_ff") if theirs[key] != getattr(config, key)]
    if differ:
        raise UsageError(f"{path} has {', '.join(differ)}: give this run its sizes (--layers, --d-model, ...)")
    return model_from_checkpoint(checkpoint, config, path), checkpoint


def model_from_checkpoint(checkpoint: dict, config=None, path="the checkpoint") -> common.Transformer:
    """The model a checkpoint holds, as it was trained (or with config's dropouts)."""
    return load_weights(common.Transformer(config or common.TransformerConfig(**checkpoint["config"])), checkpoint, path)


def load_weights(model, checkpoint: dict, path: str):
    try:
        model.load_state_dict(checkpoint["model"])
    except RuntimeError:  # its weights are named or shaped as this code's Transformer's are not
        raise UsageError(f"{path} was made by an older version of this code: retrain it") from None
    return model


def transformer_config(args, vocab_size: int) -> common.TransformerConfig:
    """The Transformer a run's settings build (as many layers in the encoder as in the decoder)."""
    return common.TransformerConfig(vocab_size, args.d_model, args.n_heads, args.layers, args.layers, args.d_ff,
                                    args.dropout, args.attention_dropout, args.activation_dropout)


def chosen_denoiser(checkpoint: dict, flag: str | None, spm: bytes, spm_path: str):
    """(denoiser, its checkpoint) to apply to a predictor's outputs, or (None, None): --denoiser's (none: none), else a
    composed model's own (its checkpoint holds Pi: the model is Pi(f(x)))."""
    if flag and flag != "none":
        return load_model(flag, spm, spm_path, "denoiser")
    if "denoiser" in checkpoint and flag != "none":
        return model_from_checkpoint(checkpoint["denoiser"]), checkpoint["denoiser"]
    return None, None


def error_detector(checkpoint: dict):
    """A denoiser's error detector g (train_denoiser.py --error-detector) as a function from outputs to whether g
    passes each, or None: compile, g++ (SPoC's, Appendix E); valid, the validity command of Pi's task folder."""
    if checkpoint.get("error_detector") == "compile":
        import judge  # (only the runs that judge need the judge)
        return judge.compiles
    if checkpoint.get("error_detector") == "valid":
        return lambda outputs: valid_outputs(checkpoint["valid_data"], outputs)
    return None


# ============================================================================
# 3. Runs: folders, training, resume
# ============================================================================

def check_writable(path: str, flag: str = "--out", folder: str | None = None):
    """Refuse, before any work and creating nothing, a folder (or a file in `folder`) that cannot be written."""
    probe = os.path.abspath(folder or path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK):
        raise UsageError(f"{flag} {path}: cannot write there ({probe} is "
                         f"{'not a folder' if not os.path.isdir(probe) else 'not writable'})")


def check_output_file(path: str, flag: str = "--out"):
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path} is a folder: name a file")
    check_writable(path, flag, folder=os.path.dirname(path) or ".")


# What a resume may change (and its script's may_change): how long it goes on (not a begun stage before the last) and
# where it runs; any other setting would make it another run. Resumed as it was, a run ends on the CPU bit for bit as
# an unbroken one; another --epochs moves the rest of a linear decay, another --device the arithmetic.
MAY_CHANGE_ON_RESUME = ("epochs", "patience", "device", "out")
INVOCATION = ("resume", "overwrite")  # how a run was started, not its settings: never compared, never carried over
# A run folder, the same whichever script asks: the stages a method trains before its last (bart's, then
# backtranslation's), each a folder of checkpoints, in order; and what --overwrite removes besides them.
STAGES = ("frozen", "reverse", "mixed")
RUN_FILES = ("model.pt", "last.pt", "eval_*.json", "eval_*.jsonl", "synthetic.src", "synthetic.tgt")


def claim_output(args, may_change=()):
    """Refuse an --out that cannot be written or holds a run, but to --resume it with its settings or --overwrite it
    (which removes its checkpoints, evaluations and stages)."""
    check_writable(args.out)
    ran = checkpoint_ran_with(args.out)
    if ran and not (args.resume or args.overwrite):
        raise UsageError(f"{args.out} holds a run ({os.path.relpath(ran, args.out)}): --resume continues it, "
                         "--overwrite starts over")
    ran_with = settings_ran_with(ran, getattr(args, "method", None)) if args.resume else {}
    differ = {name: f"--{name.replace('_', '-')} {value} (it ran with {ran_with[name]})" for name, value in
              sorted(vars(args).items()) if name in ran_with and ran_with[name] != value}
    refused = [text for name, text in differ.items() if name not in MAY_CHANGE_ON_RESUME + may_change]
    if refused:
        raise UsageError(f"--resume: {'; '.join(refused)}: resume with its settings, or --overwrite to start over")
    if differ:
        print(f"--resume: changed {'; '.join(differ.values())}", file=sys.stderr)
    for name in (*RUN_FILES, *STAGES):
        for path in glob.glob(os.path.join(glob.escape(args.out), name)) if args.overwrite else ():
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    os.makedirs(args.out, exist_ok=True)


def checkpoint_ran_with(run_folder: str) -> str | None:
    """Where a run's latest settings are: its latest stage's last.pt, else model.pt (not the newest: a copy lies)."""
    held = [path for stage in (*STAGES, "") for name in ("model.pt", "last.pt")
            if os.path.isfile(path := os.path.join(run_folder, stage, name))]
    return held[-1] if held else None


def settings_ran_with(ran: str | None, method: str | None) -> dict:
    """The settings in checkpoint `ran` that --resume goes on with ({}: none), refusing a run of another script or
    method (a denoiser's has none): its weights and settings would train as this one's."""
    if not ran:
        return {}
    settings = load_checkpoint(ran, needs=("args",))["args"]
    if settings.get("method") != method:
        script = f"finetune.py --method {settings['method']}" if settings.get("method") else "train_denoiser.py"
        raise UsageError(f"--resume: {ran} holds a run of {script}: resume it with that, or name another --out")
    return {name: value for name, value in settings.items() if name not in INVOCATION}


class TrainingFailed(Exception):
    """A run that trained but kept no model (no epoch had a finite validation loss): one line, exit code 1."""


def train(model, args, extra: dict, pairs_of, val_pairs, stage: str = "", epochs: int | None = None, made_ahead=False,
          composed: dict | None = None, val_share=None, report=None) -> dict:
    """Train `model` with the run's settings (common.fit) into --out, or a stage's folder; with --resume, the rest.
    pairs_of(epoch): the epoch's pairs (made_ahead: by a worker); epochs: a stage's own; extra: more for checkpoints.
    Resumed, last.pt gives the weights, AdamW's moments, torch's generators and common.fit's state; all else is made
    again from the seed and epoch (common.epoch_batches, train_denoiser.corrupted_pairs): on the CPU the run ends bit
    for bit as an unbroken one. Refused first: a setting but MAY_CHANGE_ON_RESUME's changed, another script's or
    --method's run (claim_output), another Pi (finetune.check_same_denoiser); here, a stage's length changed."""
    out_dir = os.path.join(args.out, stage) if stage else args.out
    device, epochs, patience = pick_device(args.device), args.epochs if epochs is None else epochs, args.patience
    to_device(model, device)
    # A GPU pads lengths to a multiple of 8 (a few shapes, not one a batch), and validates on as many outputs a batch
    # as 2^16 tokens hold (SansType's val in one decoding).
    cuda, multiple, val_size = device.type == "cuda", 1, args.batch_size
    if cuda:
        multiple, val_size = 8, max(args.batch_size, 2 ** 16 // (max(len(x) + len(y) for x, y in val_pairs) + 2))
    val_batches = [tuple(t.to(device) for t in b) for b in common.batches(val_pairs, val_size, None, multiple)]

    def validate(model):  # the criteria that keep an epoch: the val loss (composed: of Pi(f(x))), a judged share
        loss = common.validation_loss(model, val_batches) if composed is None else common.composed_validation_loss(
            model, composed["denoiser"], val_batches, composed["error_free"], composed["gamma"])
        return loss, val_share(model) if val_share else None
    optimizer = common.adamw(model, args.lr, args.adam_betas, args.weight_decay, fused=cuda)
    last_path, best_path = os.path.join(out_dir, "last.pt"), os.path.join(out_dir, "model.pt")
    last = load_checkpoint(last_path, ("optimizer", "state")) if args.resume and os.path.exists(last_path) else None
    state = last["state"] if last else dict(epoch=0, step=0, best_epoch=0, best_loss=math.inf, best_share=None,
                                            history=[])
    if stage and tuple(state.setdefault("length", (epochs, patience))) != (epochs, patience):  # the next stage's start
        raise UsageError(f"--resume: {stage}/ began with at most {state['length'][0]} epochs and patience "
                         f"{state['length'][1]} and keeps them: resume with the settings it ran with, or --overwrite")

    def batches_of(epoch):
        return common.epoch_batches(pairs_of(epoch), args.batch_size, args.seed, epoch, multiple)
    left = range(state["epoch"] + 1, epochs + 1)
    upcoming = epochs_ahead(batches_of, left, pin=cuda) if made_ahead else map(batches_of, left)
    first = next(upcoming, [])
    lr_at = functools.partial(common.learning_rate, steps=max(1, epochs * len(first)), peak=args.lr,  # (1: a
                              schedule=args.lr_schedule, warmup_steps=args.warmup_steps,      # resumed run that had
                              warmup_start=args.warmup_start_lr)                              # ended)

    def save_epoch(state, improved):
        checkpoint = {"config": vars(model.config), "model": model.state_dict(), "args": settings(args), **extra}
        if improved:
            save_checkpoint(best_path, {**checkpoint, "best_val_loss": state["best_loss"],
                                        "epoch": state["best_epoch"]})
        save_checkpoint(last_path, {**checkpoint, "optimizer": optimizer.state_dict(), "state": state, "rng": {
            "torch": torch.get_rng_state(), **({"cuda": torch.cuda.get_rng_state(device)} if cuda else {})}})
    if last:  # the weights, AdamW's moments and the generators (dropout, samples) where the run stopped
        load_weights(model, last, last_path)
        optimizer.load_state_dict(last["optimizer"])
        torch.set_rng_state(last["rng"]["torch"])
        if cuda and "cuda" in last["rng"]:
            torch.cuda.set_rng_state(last["rng"]["cuda"], device)  # (the run's GPU's, not the current one's)
        print(f"resumed from {last_path} after epoch {state['epoch']}", file=sys.stderr)
    elif args.resume:
        print(f"--resume: there is no {last_path} yet, so this run starts from its beginning", file=sys.stderr)
    trained, stepper = model, optimizer  # bf16: autocast on a GPU; on a CPU a bf16 copy of the model (Bf16Copy) and of
    if args.precision == "bf16" and not cuda:  # composed's Pi, which validate reads too
        stepper = Bf16Copy(model, optimizer)
        trained = stepper.model
        composed = composed and {**composed, "denoiser": copy.deepcopy(composed["denoiser"]).bfloat16()}
    state = common.fit(trained, stepper, itertools.chain([first], upcoming), lr_at, state, epochs, patience,
                       validate, save_epoch, composed, report, args.label_smoothing, args.clip_norm,
                       args.precision == "bf16" and cuda)
    if state["best_loss"] == math.inf:
        raise TrainingFailed(f"no epoch had a finite validation loss (the last: {state['history'][-1]['val_loss']}), "
                             f"so {out_dir} holds no model.pt: a lower --lr may help")
    return state


def epochs_ahead(make_epoch, epochs: range, pin: bool = False):
    """Each epoch's batches (make_epoch(epoch)), made in a worker process one epoch ahead of the training: a denoiser's
    fresh corruptions are seconds of Python, which in a thread would hold the interpreter's lock that the training
    loop needs between its kernel launches. The worker is forked (make_epoch may be a closure), runs at the lowest
    priority, dies with its run, and hands an epoch over as NumPy arrays (tensors would go as shared memory, whose
    hand-over a Ctrl-C can break)."""
    run = os.getpid()
    loader = torch.utils.data.DataLoader(
        epochs, batch_size=None, collate_fn=lambda epoch: pack_epoch(make_epoch(epoch)), num_workers=1,
        prefetch_factor=1, multiprocessing_context="fork", worker_init_fn=lambda _: start_epoch_worker(run),
        generator=torch.Generator())  # (its own: seeding the worker must not draw from the training's generator)
    return (unpack_epoch(packed, pin) for packed in loader)


def start_epoch_worker(run: int):
    """The worker dies with its run, even one killed by SIGKILL (Linux's parent-death signal), where it would otherwise
    live on, blocked on a full pipe; it takes only what the training leaves idle."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != run:  # the run died before the signal was set
            os._exit(0)
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def pack_epoch(epoch_batches: list[tuple]) -> tuple:
    """An epoch's batches as every id in one flat array and each batch's (rows, source length, target length)."""
    flat = torch.cat([t.flatten() for src, tgt_in, tgt_out in epoch_batches
                      for t in (src, torch.cat([tgt_in[:, :1], tgt_out], dim=1))])
    shapes = [(len(src), src.shape[1], tgt_in.shape[1] + 1) for src, tgt_in, _ in epoch_batches]
    return flat.numpy(), np.array(shapes, dtype=np.int64).reshape(-1, 3)


def unpack_epoch(packed: tuple, pin: bool = False) -> list[tuple]:
    """pack_epoch's batches as (src, tgt_in, tgt_out) views of one flat tensor (pin: page-locked, for a GPU)."""
    flat, shapes = torch.from_numpy(packed[0]), packed[1]
    flat = flat.pin_memory() if pin else flat
    epoch_batches, start = [], 0
    for rows, source, target in shapes.tolist():
        src = flat[start:start + rows * source].view(rows, source)
        tgt = flat[start + rows * source:start + rows * (source + target)].view(rows, target)
        epoch_batches.append((src, tgt[:, :-1], tgt[:, 1:]))
        start += rows * (source + target)
    return epoch_batches


# ============================================================================
# 4. Devices
# ============================================================================

def pick_device(name: str | None = None) -> torch.device:
    """--device, or the default: cuda when there is one, else cpu."""
    available = ["cpu"] + ["cuda"] * torch.cuda.is_available()
    try:  # (a device torch knows, and this machine has)
        device = torch.device(name or available[-1])
        if device.type not in available or (device.index or 0) >= max(1, torch.cuda.device_count()):
            raise RuntimeError
    except RuntimeError:
        raise UsageError(f"--device {name}: this machine has {' and '.join(available)}") from None
    if device.type == "cuda":  # fp32 products in TF32 on the tensor cores; cuDNN's attention plans anew for every shape
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.enable_cudnn_sdp(False)
    return device


def device_name(device: torch.device) -> str:
    """cpu, or the GPU's name too: cuda:0 (NVIDIA H100 80GB HBM3)."""
    return f"{device} ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else str(device)


def to_device(model, device):
    """The model on the device; on a GPU its generate then decodes by GraphDecoding, on the CPU step by step."""
    model.graph_decoding = GraphDecoding() if device.type == "cuda" else None
    return model.to(device)


class Bf16Copy:
    """--precision bf16 on a CPU: the model trains as a bfloat16 copy of itself, whose products run on the CPU's bf16
    units with no cast an operation (autocast's casts made its step slower than fp32's); AdamW keeps and updates the
    fp32 weights (an update below a bf16 weight's last bit would be lost), which go back into the copy after each step.
    It stands in for the optimizer that common.fit steps; the model and its optimizer stay fp32, as checkpoints are."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer, self.param_groups = copy.deepcopy(model).bfloat16(), optimizer, \
            optimizer.param_groups
        self.weights = list(zip(self.model.parameters(), model.parameters()))  # (bf16, fp32), frozen ones too

    def zero_grad(self, set_to_none=True):
        self.model.zero_grad(set_to_none)

    def step(self):
        for low, full in self.weights:
            full.grad = None if low.grad is None else low.grad.float()
        self.optimizer.step()
        with torch.no_grad():
            for low, full in self.weights:
                low.copy_(full)


class GraphDecoding:
    """Transformer.generate on a GPU. A decoding step of the paper's model is ~200 small kernels, each launched from
    Python, so decoding is bound by the launches: a CUDA graph of the whole step (common.decode_step with fixed
    shapes) replays them in one. A graph holds its shapes, so a batch is padded up to a bucket (sources and max_len
    to a multiple of BUCKET), and a few graphs, captured once, serve every batch. The host asks whether every row has
    finished every CHECK steps, and never when sampling, so that it queues the rest of a training step meanwhile."""
    BUCKET, CHECK = 32, 8

    def __init__(self):
        self.graphs = {}

    def __call__(self, model, memory, memory_mask, max_len: int, sample: bool) -> common.Decoded:
        S, L = (-(-n // self.BUCKET) * self.BUCKET for n in (memory.shape[1], max_len))
        memory = F.pad(memory, (0, 0, 0, S - memory.shape[1]))  # extra source positions: zeros, masked
        memory_mask = F.pad(memory_mask, (0, S - memory_mask.shape[-1]), value=False)
        key = (memory.shape[0], S, L, sample, model.training, torch.is_autocast_enabled("cuda"))
        if key not in self.graphs:
            s = common.start_decoding(model, memory, memory_mask, L, sample)
            try:
                step = capture_cuda_graph(lambda: common.decode_step(model, s)).replay
            except RuntimeError as error:  # the same step uncaptured decodes the same, only slower
                print(f"decoding: no CUDA graph ({str(error).splitlines()[0]}): one step at a time", file=sys.stderr)
                step = lambda: common.decode_step(model, s)  # noqa: E731
            self.graphs[key] = s, step
        s, step = self.graphs[key]
        s.tokens.fill_(common.PAD_ID)  # the captured buffers, at the start of this batch
        s.tokens[:, 0] = common.BOS_ID
        s.done.zero_()
        s.position.zero_()
        s.memory_mask.copy_(memory_mask)
        for layer, cache in zip(model.decoder, s.caches):
            cache["cross"]["k"].copy_(layer.cross_attention.k(memory))
            cache["cross"]["v"].copy_(layer.cross_attention.v(memory))
        for steps in range(1, max_len + 1):
            step()
            if not sample and steps % self.CHECK == 0 and s.done.all():
                break
        tokens = s.tokens[:, 1:steps + 1].clone()  # (a copy: the graph's buffers serve the next batch)
        return common.Decoded(tokens, torch.where(s.done, (tokens == common.EOS_ID).int().argmax(dim=1), max_len))


def capture_cuda_graph(step):
    """A CUDA graph of step(): one run on a side stream first (lazy initialisations must not happen in a capture);
    under autocast with its cast cache off (cached casts would not outlive the capture)."""
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
# 5. Command line
# ============================================================================

def parse_training_args(parser, argv, defaults_of, out: str | None = None):
    """A training run's settings: each flag's default its preset's (defaults_of), or a resumed run's; a flag wins."""
    add = parser.add_argument  # (--help shows the values a run would use)
    add("--data", default="data/sanstype", help=f"a folder {DATA_MAKERS} wrote")
    add("--out", default=out, help="the run's folder")
    preset = add("--preset", choices=("cpu", "paper", "smoke"), default="cpu", help="cpu: for 2 cores; paper: a GPU")
    for flag, kind, text in (  # (each script's PRESETS table says why each is what it is)
            ("--epochs", int, "at most"), ("--patience", int, "epochs after the best"), ("--batch-size", int, "pairs"),
            ("--lr", float, "AdamW's peak rate"), ("--warmup-steps", int, "updates"), ("--warmup-start-lr", float,
            "the warm-up's first rate"), ("--d-model", int, "width"), ("--n-heads", int, "heads"), ("--layers", int,
            "encoder's and decoder's each"), ("--d-ff", int, "feed-forward width"), ("--dropout", float, "residual"),
            ("--attention-dropout", float, "of the weights"), ("--activation-dropout", float, "after the ReLU"),
            ("--weight-decay", float, "AdamW's"), ("--clip-norm", float, "the gradient's norm (0: none)"),
            ("--label-smoothing", str, "VALUE, or VALUE:EPOCHS,...,VALUE"), ("--seed", int, "every draw's")):
        add(flag, type=kind, help=text)
    add("--lr-schedule", choices=("constant", "inverse-sqrt", "linear"), help="after the warm-up")
    add("--precision", choices=("fp32", "bf16", "auto"), help="bf16: autocast on a GPU, a bf16 copy of the model on a "
        "CPU; auto: bf16 where it pays (a GPU's)")
    add("--device", help="cuda or cpu (default: cuda when there is one)")
    either = parser.add_mutually_exclusive_group()
    either.add_argument("--resume", action="store_true", help="continue the run in --out after an interrupt")
    either.add_argument("--overwrite", action="store_true", help="start over in an --out that holds a run")
    first = ArgumentParser(prog=parser.prog, add_help=False)  # the flags the defaults depend on, first
    for name in ("data", "preset", "method", "out"):  # (--preset's choices checked first: its block is looked up)
        first.add_argument(f"--{name}", default=parser.get_default(name),
                           choices=preset.choices if name == "preset" else None)
    known = first.parse_known_args(argv)[0]
    try:
        data, read = read_data_folder(known.data), known.data
    except UsageError:  # no data yet: --help shows the preset's values for no kind of data (a run is refused below)
        data, read = {"dataset": None, "corruption": None}, None
    shown = f"--data {known.data}" + " (no data there yet)" * (read is None)
    parser.epilog = f"{parser.epilog or ''} Shown: those for {shown}; --data DIR --help shows DIR's."
    parser.set_defaults(data=known.data, **defaults_of(data, known))
    if "--resume" in (sys.argv if argv is None else argv):  # the run's settings (a run of this script and --method)
        try:
            ran = checkpoint_ran_with(known.out or parser.get_default("out"))
            parser.set_defaults(**settings_ran_with(ran, known.method))
        except UsageError as error:
            parser.error(str(error))
    args = parser.parse_args(argv)
    try:  # the folder read above, unless a resumed run's --data is another one (or there was none)
        args.manifest = data if args.data == read else read_data_folder(args.data)
        args.dataset, device = args.manifest["dataset"], pick_device(args.device)
        segments = [segment.partition(":") for segment in args.label_smoothing.split(",")]  # (VALUE, ":", EPOCHS)
        smoothing = [float(value) for value, _, _ in segments]
        if any(int(epochs) < 1 for _, _, epochs in segments if epochs):
            raise ValueError
    except UsageError as error:
        parser.error(str(error))
    except ValueError:
        parser.error(f"--label-smoothing {args.label_smoothing!r}: a number, or VALUE:EPOCHS,...,VALUE (EPOCHS >= 1)")
    check_ranges(parser, argparse.Namespace(label_smoothing=smoothing), fraction="label_smoothing")
    check_ranges(parser, args, at_least_1="epochs batch_size patience d_model n_heads layers d_ff", positive="lr",
                 not_negative="warmup_steps warmup_start_lr weight_decay clip_norm",
                 fraction="dropout attention_dropout activation_dropout")
    if args.precision == "auto":  # here, so that the settings say which; a CPU's fp32: bf16 is not shown to pay there
        args.precision = "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    return args


RANGES = {"at_least_1": (lambda v: v >= 1, "at least 1"), "not_negative": (lambda v: v >= 0, "at least 0"),
          "positive": (lambda v: v > 0, "above 0"), "fraction": (lambda v: 0 <= v < 1, "within [0, 1)"),
          "probability": (lambda v: 0 <= v <= 1, "within [0, 1]")}


def check_ranges(parser, args, **names):
    """Refuse a number out of its range, one line and exit 2: check_ranges(parser, args, at_least_1="epochs
    batch_size"); a flag left None passes, a list's every value is checked."""
    for range_name, listed in names.items():
        ok, words = RANGES[range_name]
        for name in listed.split():
            value = getattr(args, name, None)
            for v in value if isinstance(value, list) else [value]:
                if v is not None and not ok(v):
                    parser.error(f"--{name.replace('_', '-')} {v:g}: must be {words}")


def settings(args) -> dict:
    """A run's settings, as its checkpoints keep them: its flags' values, not its data folder's contents (manifest)."""
    return {name: value for name, value in vars(args).items() if name != "manifest"}


def settings_line(args) -> str:
    """Every value a run uses (None: a flag it does not use), and the device it runs on."""
    values = {**settings(args), "device": device_name(pick_device(args.device))}
    return ", ".join(f"{name}={value}" for name, value in sorted(values.items()) if value is not None)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help shows the description as written, and after each flag's help its default."""

    def _get_help_string(self, action):
        shown = all(action.default is not v for v in (None, False, argparse.SUPPRESS)) and "default" not in action.help
        return action.help + (" (default: %(default)s)" if shown else "")


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line (exit code 2), with HelpFormatter's --help; flags are spelled whole (the
    scripts look for --resume and a noise's flags in the command line)."""

    def __init__(self, **kwargs):
        super().__init__(**{"formatter_class": HelpFormatter, "allow_abbrev": False, **kwargs})

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def run_main(script: str, work, args):
    """Run a script's work: bad input is one line and exit code 2, a run that kept no model one line and 1, Ctrl-C a
    line and 130 (the shell's code for an interrupt)."""
    try:
        work(args)
    except (UsageError, FileNotFoundError) as error:  # (the judge's: no g++)
        print(f"{script}: error: {error}", file=sys.stderr)
        sys.exit(2)
    except TrainingFailed as error:
        print(f"{script}: {error}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(f"{script}: interrupted" + ": run again with --resume to continue from the last finished epoch"
              * hasattr(args, "resume"), file=sys.stderr)
        sys.exit(130)


class Progress:
    """Prints `what: done/total (rate/s, extra, elapsed, ETA)` to stderr, at most every few seconds."""

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
                self.last_print, elapsed = now, max(now - self.start, 1e-9)
                eta = (self.total - self.done) * elapsed / self.done if self.done else float("inf")
                print(f"{self.what}: {self.done}/{self.total} ({self.done / elapsed:.1f}/s, "
                      f"{extra + ', ' * bool(extra)}elapsed {format_seconds(elapsed)}, ETA {format_seconds(eta)})",
                      file=sys.stderr, flush=True)


def format_seconds(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"
