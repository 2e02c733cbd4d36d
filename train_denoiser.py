"""Pre-train the denoiser Pi: a Transformer that maps corrupted code back to the valid program.

    python train_denoiser.py                                  # cpu preset: data/sanstype -> runs/denoiser/model.pt
    python train_denoiser.py --corruption random --out runs/denoiser_random   # Table 5's random deletions
    python train_denoiser.py --preset paper                   # the paper's sizes and 50 epochs, for a GPU
    python train_denoiser.py --data data/spoc --out runs/spoc/denoiser   # SPoC (make_spoc.py): one-line edits, g
    python train_denoiser.py --resume                         # continue after an interrupt

Pi learns only from outputs: the unlabeled programs plus the labeled training code (code without
its pseudocode is unlabeled output data too). Every epoch corrupts them afresh; early stopping uses
a fixed corrupted copy of val.tgt, on which it also reports, every --repair-every epochs, how many
repairs are exact and how many compile. On SPoC, Pi is Appendix E's pair (g, nu): the error
detector g (the compiler) passes a program that compiles, and only the others are repaired.
"""
import argparse
import os
import random
import sys

import torch

import common

# Training presets; the model sizes come from common.MODEL_PRESETS under the same name.
# paper: the authors' fairseq command (dropout 0.4, 1e-3 after 4000 warm-up updates from 1e-7, inverse-sqrt,
# ~16000 tokens, i.e. about 176 programs, per update). cpu: 12 epochs at the peak rate. Π's training decides whether
# pre-training helps at all (README: standard and composed from Π after 4, 8, 12 epochs); annealing the rate to 0
# over 8 epochs (the budget that would fit 45 minutes) gave Π a loss between those of 8 and 12 epochs at the peak
# rate, but a start for fine-tuning no better than 8 epochs' (README).
PRESETS = {
    "paper": dict(epochs=50, batch_size=176, lr=1e-3, warmup_steps=4000, warmup_start_lr=1e-7, patience=50,
                  max_programs=0, lr_schedule="inverse-sqrt", dropout=0.4),
    "cpu": dict(epochs=12, batch_size=32, lr=1e-3, warmup_steps=300, patience=3, max_programs=0,
                lr_schedule="constant"),
    "smoke": dict(epochs=2, batch_size=8, lr=1e-3, warmup_steps=5, patience=2, max_programs=64,
                  lr_schedule="constant"),
    # SPoC (Appendix E): the authors' 9 epochs each hold every program 4 times (clean once, one corrupted line
    # 3 times), i.e. 36 of ours, which corrupt 3 programs in 4 afresh every epoch; smoothing 0.2 for 5 of
    # theirs, 0.1 for 1, then 0; FLoRes's rate (1e-3 after 4000 updates from 1e-7, inverse-sqrt) and ~16000
    # tokens an update (about 90 programs). cpu: sized for the full release's 11355 programs on 2 cores.
    "spoc-paper": dict(epochs=36, batch_size=90, lr=1e-3, warmup_steps=4000, warmup_start_lr=1e-7, patience=36,
                       max_programs=0, lr_schedule="inverse-sqrt", label_smoothing_schedule="0.2:20,0.1:4,0.0"),
    "spoc-cpu": dict(epochs=4, batch_size=32, lr=1e-3, warmup_steps=300, patience=2, max_programs=0,
                     lr_schedule="constant"),
}
CORRUPTIONS = {
    "code": lambda code, rng, args: common.corrupt_code(code, rng, args.num_corruptions),
    "random": lambda code, rng, args: common.delete_random_words(code, rng, args.deletion_probability),
    "line": lambda code, rng, args: common.corrupt_spoc_code(code, rng),
}


def parse_args(argv=None):
    parser = common.ArgumentParser(prog="train_denoiser.py", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/sanstype")
    parser.add_argument("--out", default="runs/denoiser")
    parser.add_argument("--corruption", choices=sorted(CORRUPTIONS),
                        help="code (SansType's default): Appendix C's statement-level type, stream and print edits; "
                             "random: drop each word of a statement (Table 5); line (SPoC's default): Appendix E's "
                             "one-line insertion, deletion or replacement of a keyword, identifier or symbol")
    parser.add_argument("--num-corruptions", type=int, default=3,
                        help="code: at most this many statements noised per program (1 to N, 90%% of programs)")
    parser.add_argument("--deletion-probability", type=float, default=0.15)
    parser.add_argument("--max-programs", type=int, help="use only this many training programs (0: all)")
    parser.add_argument("--error-detector", choices=("compile", "none"),
                        help="Appendix E's g, stored with Pi: Pi leaves a program g passes as it is; compile (SPoC's "
                             "default): g passes programs that compile; none (SansType's): Pi repairs every program")
    parser.add_argument("--repair-every", type=int, default=1, help="judge val repairs every N epochs (0: never)")
    parser.add_argument("--repair-programs", type=int, default=100, help="how many val programs to repair")
    common.add_training_args(parser)
    args = parser.parse_args(argv)
    args.corruption = args.corruption or ("line" if common.is_spoc(args.data) else "code")
    args.error_detector = args.error_detector or ("compile" if common.is_spoc(args.data) else "none")
    if args.error_detector == "compile" and not common.is_spoc(args.data):
        parser.error("--error-detector compile needs SPoC data (make_spoc.py)")
    if args.num_corruptions < 1 or not 0 <= args.deletion_probability <= 1:
        parser.error("--num-corruptions must be at least 1 and --deletion-probability within [0, 1]")
    return common.resolve_preset(args, PRESETS)


def main(argv=None):
    common.run_main("train_denoiser.py", train, parse_args(argv), on_interrupt=common.RESUME_HINT)


def train(args):
    torch.manual_seed(args.seed)  # initialisation, dropout and sampling
    spm = common.read_tokenizer_bytes(args.data)
    tokenizer = common.load_tokenizer(spm)
    unlabeled = os.path.join(args.data, "unlabeled.tgt")  # SPoC has none unless make_spoc.py --unlabeled wrote it
    programs = (common.read_lines(unlabeled) if os.path.exists(unlabeled) else []) + \
        common.read_lines(os.path.join(args.data, "train.tgt"))
    programs = programs[:args.max_programs] if args.max_programs else programs
    val = common.read_lines(os.path.join(args.data, "val.tgt"))
    if not programs or not val:
        raise common.UsageError(f"no programs to train or validate on in {args.data}")
    corrupt = CORRUPTIONS[args.corruption]
    spoc_cases = common.read_spoc_cases(args.data, "val") if common.is_spoc(args.data) else None

    extra = {"spm": spm, "role": "denoiser", "corruption": args.corruption,
             "error_detector": None if args.error_detector == "none" else args.error_detector}
    error_free = common.error_detector(extra)  # g, as evaluate.py will read it back from the checkpoint

    clean_ids = tokenizer.encode(programs)
    val_rng = random.Random(f"{args.seed}-val")  # the same corrupted val set every epoch and every run
    val_noisy = [corrupt(code, val_rng, args) for code in val]
    val_pairs = list(zip(tokenizer.encode(val_noisy), tokenizer.encode(val)))

    def train_pairs(epoch):
        rng = random.Random(f"{args.seed}-epoch{epoch}")
        return list(zip(tokenizer.encode([corrupt(code, rng, args) for code in programs]), clean_ids))

    def report_repairs(model, epoch):
        if not args.repair_every or epoch % args.repair_every:
            return ""
        noisy, clean = val_noisy[:args.repair_programs], val[:args.repair_programs]
        repaired = common.denoise(model, tokenizer, noisy, args.batch_size, error_free)
        exact = sum(r == c for r, c in zip(repaired, clean)) / len(clean)
        if spoc_cases:  # SPoC: the repairs judged on their problems' hidden test cases
            verdicts = common.judge_spoc_programs(repaired, spoc_cases[:len(repaired)])
            correct = sum(v["verdict"] == "correct" for v in verdicts) / len(verdicts)
            return f", repairs of {len(clean)} val programs: {100 * exact:.1f}% exact, {100 * correct:.1f}% correct"
        results = common.run_programs(repaired, [""] * len(repaired))
        compiled = sum(r.status != "compile_error" for r in results) / len(results)
        return f", repairs of {len(clean)} val programs: {100 * exact:.1f}% exact, {100 * compiled:.1f}% compile"

    model = common.Transformer(common.config_from_args(args, tokenizer.get_piece_size()))
    print(f"denoiser: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{len(programs)} programs, {args.corruption} corruption, error detector {args.error_detector}, "
          f"preset {common.preset_key(args)}", file=sys.stderr)
    state = common.fit(model, train_pairs, val_pairs, args, args.out, extra, on_epoch=report_repairs)
    print(f"best epoch {state['best_epoch']} (val loss {state['best_loss']:.4f}) -> "
          f"{os.path.join(args.out, 'model.pt')}")


if __name__ == "__main__":
    main()
