"""Train a pseudocode-to-code predictor on the labeled pairs.

    python finetune.py --method baseline         # from scratch                          -> runs/baseline/model.pt
    python finetune.py --method standard         # init from the denoiser, train all     -> runs/standard/model.pt
    python finetune.py --method bart             # encoder alone (bart/frozen/), then all -> runs/bart/model.pt
    python finetune.py --method composed         # Pi(f(x)): f from runs/standard, Pi frozen -> runs/composed/model.pt
    python finetune.py --method backtranslation  # + synthetic pseudocode for unlabeled code -> runs/backtranslation/
    python finetune.py --method composed --init runs/bart/model.pt --out runs/composed_bart
    python finetune.py --method standard --layers 4 --denoiser runs/denoiser_deep/model.pt --out runs/standard_deep
    python finetune.py --method baseline --resume   # continue after an interrupt
    python finetune.py --method standard --data data/spoc --denoiser runs/spoc/denoiser/model.pt \
        --out runs/spoc/standard                   # SPoC (make_spoc.py): its own presets (Appendix E)

standard and bart start from the pre-trained denoiser (--denoiser, default runs/denoiser/model.pt) and
take its architecture; baseline and backtranslation build fresh models of the preset's size; composed
starts from --init and keeps the denoiser frozen (a copy goes into its checkpoint, so evaluate.py
applies it without being told). Every method keeps the epoch with the lowest validation loss
(composed: of the composition Pi(f(x)), as in the paper).
"""
import argparse
import os
import sys

import torch

import common

METHODS = ("baseline", "standard", "bart", "composed", "backtranslation")
# Epoch budgets: the paper trains models from scratch for 500 epochs, fine-tunes for 300 (BART-style:
# 200 with the decoder frozen, then 100 more) and trains composed models for 300. backtranslation
# trains its code-to-pseudocode model for `baseline` epochs, its pseudocode-to-code model on labeled
# plus synthetic pairs for `backtranslation` epochs, then fine-tunes that on the labeled pairs for
# `standard` epochs. The cpu budgets stop well before convergence of the paper's: see the README.
EPOCHS = {
    "paper": dict(baseline=500, standard=300, bart=300, bart_frozen=200, composed=300, backtranslation=500),
    "cpu": dict(baseline=60, standard=25, bart=25, bart_frozen=15, composed=6, backtranslation=12),
    "smoke": dict(baseline=2, standard=2, bart=2, bart_frozen=1, composed=2, backtranslation=1),
    # SPoC (Appendix E): 150 epochs (the smoothing schedule's 100 + 25 + 25), composed 20. cpu: sized for the
    # full release's 11355 programs, 11 times SansType's labeled pairs, so that a run sees about as many.
    "spoc-paper": dict(baseline=150, standard=150, bart=150, bart_frozen=100, composed=20, backtranslation=150),
    "spoc-cpu": dict(baseline=6, standard=3, bart=4, bart_frozen=2, composed=1, backtranslation=2),
}
# paper: the authors' fairseq commands: ~16000 tokens (about 176 programs) an update, 2e-3 with an inverse-sqrt
# schedule after a warm-up that differs by method (PAPER_WARMUPS), no early stop before the last epoch.
PRESETS = {
    "paper": dict(batch_size=176, lr=2e-3, patience=500, synthetic_programs=0, lr_schedule="inverse-sqrt"),
    # The cpu budgets end long before the paper's, so each run anneals to 0 by its last epoch: at a
    # constant rate, 4 more epochs of the same standard model moved its test accuracy by 13 points (README).
    "cpu": dict(batch_size=32, lr=1e-3, warmup_steps=300, patience=8, synthetic_programs=4000,
                lr_schedule="linear"),
    "smoke": dict(batch_size=8, lr=1e-3, warmup_steps=5, patience=2, synthetic_programs=16, lr_schedule="linear"),
    # SPoC: FLoRes's recipe, as Appendix E says: 1e-3 after 4000 updates from 1e-7, inverse-sqrt, ~16000 tokens an
    # update (about 90 programs), label smoothing 0.2 -> 0.1 -> 0.05 (composed: 0.05, the schedule's last).
    "spoc-paper": dict(batch_size=90, lr=1e-3, warmup_steps=4000, warmup_start_lr=1e-7, patience=150,
                       synthetic_programs=0, lr_schedule="inverse-sqrt",
                       label_smoothing_schedule="0.2:100,0.1:25,0.05"),
    "spoc-cpu": dict(batch_size=32, lr=1e-3, warmup_steps=300, patience=3, synthetic_programs=4000,
                     lr_schedule="linear"),
}
# (updates, the rate they start from): from scratch, fine-tuning from Pi, and composed, as the authors ran them.
PAPER_WARMUPS = {"baseline": (400, 5e-4), "backtranslation": (400, 5e-4), "standard": (150, 1e-4),
                 "bart": (150, 1e-4), "composed": (90, 0.0)}
# Composed fine-tuning trains f at a tenth of standard fine-tuning's rate (the authors: 2e-4 against 2e-3):
# f starts from a fine-tuned model, and the REINFORCE term's gradient is noisy.
COMPOSED_LR_FACTOR = 0.1


def parse_args(argv=None):
    parser = common.ArgumentParser(prog="finetune.py", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", choices=METHODS, required=True)
    parser.add_argument("--data", default="data/sanstype")
    parser.add_argument("--denoiser", default="runs/denoiser/model.pt",
                        help="pre-trained denoiser (standard, bart: the init; composed: the frozen Pi)")
    parser.add_argument("--out", help="output folder (default runs/<method>)")
    parser.add_argument("--frozen-epochs", type=int, help="bart: epochs with the decoder frozen")
    composed = parser.add_argument_group("composed fine-tuning (Eq. 1, Appendix D)")
    composed.add_argument("--init", default="runs/standard/model.pt", help="the base predictor's initialisation")
    # One sample with the batch baseline for 6 cpu epochs validated level with two samples and leave-one-out for 4
    # (3 seeds each, the same compute; README), and its step costs 3x a standard one instead of 5x. The paper's
    # estimator (1 sample, none) diverged.
    composed.add_argument("--samples", type=int, default=1, help="outputs sampled per input for REINFORCE")
    composed.add_argument("--reinforce-baseline", choices=("batch", "leave-one-out", "none"), default="batch",
                          help="subtract the mean reward of the batch's other inputs (batch) or of the input's other "
                               "samples (leave-one-out, needs --samples 2 or more); none: the paper's estimator")
    composed.add_argument("--clamp", choices=("reward", "sample"), default="reward",
                          help="clamp log p_beta(y|y') (the paper's text) or log p_theta(y'|x) (its code) at gamma")
    composed.add_argument("--gamma", type=float, default=-50.0)
    composed.add_argument("--composed-weight", type=float, default=0.1, help="scale of the composed term")
    composed.add_argument("--lam", type=float, default=1.0, help="lambda, the weight of the direct term")
    parser.add_argument("--labeled", type=int, help="train on the first N labeled pairs only (Figure 4's sweep)")
    parser.add_argument("--synthetic-programs", type=int,
                        help="backtranslation: unlabeled programs to write pseudocode for (0: all)")
    common.add_training_args(parser)
    args = parser.parse_args(argv)
    epochs = EPOCHS[common.preset_key(args)]
    args.epochs = args.epochs or epochs[args.method]
    args.frozen_epochs = args.frozen_epochs if args.frozen_epochs is not None else epochs["bart_frozen"]
    args.out = args.out or os.path.join("runs", args.method)
    if args.method == "bart" and not 0 <= args.frozen_epochs < args.epochs:
        parser.error(f"bart: --frozen-epochs ({args.frozen_epochs}) must be below --epochs ({args.epochs})")
    if args.samples < 1 or (args.labeled is not None and args.labeled < 1):
        parser.error("--samples and --labeled must be at least 1")
    if args.reinforce_baseline == "leave-one-out" and args.samples < 2:
        parser.error("--reinforce-baseline leave-one-out needs --samples 2 or more (with 1 sample: batch or none)")
    presets = {name: dict(preset) for name, preset in PRESETS.items()}
    presets["paper"]["warmup_steps"], presets["paper"]["warmup_start_lr"] = PAPER_WARMUPS[args.method]
    if args.method == "composed":
        for preset in presets.values():
            preset["lr"] *= COMPOSED_LR_FACTOR
        presets["spoc-paper"]["label_smoothing_schedule"] = "0.05"
    return common.resolve_preset(args, presets)


def main(argv=None):
    common.run_main("finetune.py", finetune, parse_args(argv), on_interrupt=common.RESUME_HINT)


def load_pairs(data_dir: str, split: str, tokenizer) -> list[tuple[list[int], list[int]]]:
    sources = common.read_lines(os.path.join(data_dir, f"{split}.src"))
    targets = common.read_lines(os.path.join(data_dir, f"{split}.tgt"))
    if not sources or len(sources) != len(targets):
        raise common.UsageError(f"{data_dir}/{split}.src and .tgt must have the same, non-zero number of lines")
    return list(zip(tokenizer.encode(sources), tokenizer.encode(targets)))


def encoder_parameters(model) -> list[str]:
    """BART-style fine-tuning (Appendix D) first trains only these: the encoder's layers and the shared
    embedding matrix, which is the encoder's input layer (and also the decoder's), as the authors ran it."""
    return [name for name, _ in model.named_parameters() if name.startswith(("encoder", "embed."))]


def with_epochs(args, epochs: int) -> argparse.Namespace:
    """args for one stage of a staged method; each stage has its own learning-rate schedule."""
    return argparse.Namespace(**{**vars(args), "epochs": epochs})


def finetune(args):
    torch.manual_seed(args.seed)  # initialisation, dropout and sampling
    spm = common.read_tokenizer_bytes(args.data)
    tokenizer = common.load_tokenizer(spm)
    train_pairs, val_pairs = load_pairs(args.data, "train", tokenizer), load_pairs(args.data, "val", tokenizer)
    train_pairs = train_pairs[:args.labeled] if args.labeled else train_pairs
    extra = {"spm": spm, "role": "predictor", "method": args.method}
    fit = dict(loss_fn=common.sequence_loss_of_batch, validate=None)

    if args.method in ("baseline", "backtranslation"):
        model = common.Transformer(common.config_from_args(args, tokenizer.get_piece_size()))
    elif args.method == "composed":
        model, init = common.load_model(args.init, spm, args.data)
        denoiser, denoiser_checkpoint = common.load_model(args.denoiser, spm, args.data)
        g = common.error_detector(denoiser_checkpoint)  # SPoC's Pi leaves what compiles alone
        error_free = (lambda outputs: g(tokenizer.decode(outputs))) if g else None  # on token ids
        fit.update(freeze_and_compose(model, denoiser, val_pairs, args, error_free))
        extra.update(init_method=init.get("method"), denoiser_corruption=denoiser_checkpoint.get("corruption"),
                     denoiser={key: denoiser_checkpoint.get(key) for key in ("config", "model", "error_detector")})
    else:
        model, denoiser_checkpoint = common.load_model(args.denoiser, spm, args.data)
        extra.update(denoiser_corruption=denoiser_checkpoint.get("corruption"))
    print(f"{args.method}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{len(train_pairs)} labeled pairs, preset {common.preset_key(args)}", file=sys.stderr)

    if args.method == "backtranslation":
        state = backtranslate(model, tokenizer, train_pairs, val_pairs, args, extra)
    elif args.method == "bart":  # the encoder alone in frozen/, then every weight in --out
        frozen_dir = os.path.join(args.out, "frozen")
        common.fit(model, lambda epoch: train_pairs, val_pairs, with_epochs(args, args.frozen_epochs), frozen_dir,
                   extra, trainable=encoder_parameters(model))
        model.load_state_dict(common.load_checkpoint(os.path.join(frozen_dir, "model.pt"))["model"])
        state = common.fit(model, lambda epoch: train_pairs, val_pairs,
                           with_epochs(args, args.epochs - args.frozen_epochs), args.out, extra)
    else:
        state = common.fit(model, lambda epoch: train_pairs, val_pairs, args, args.out, extra, **fit)
    print(f"best epoch {state['best_epoch']} (val loss {state['best_loss']:.4f}) -> "
          f"{os.path.join(args.out, 'model.pt')}")


def freeze_and_compose(model, denoiser, val_pairs, args, error_free=None) -> dict:
    """The frozen denoiser Pi (with its error detector g on SPoC: error_free) and composed fine-tuning's
    loss and early-stopping criterion."""
    device = common.pick_device(args.device)
    denoiser.to(device).eval()  # eval: no dropout; Pi is a fixed function of its input
    denoiser.requires_grad_(False)

    def loss_fn(model, src, tgt_in, tgt_out, args):
        return common.composed_loss(
            model, denoiser, src, tgt_in, tgt_out, samples=args.samples,
            baseline=args.reinforce_baseline, gamma=args.gamma, clamp=args.clamp,
            composed_weight=args.composed_weight, lam=args.lam, label_smoothing=args.label_smoothing,
            error_free=error_free)

    return dict(loss_fn=loss_fn, validate=lambda model: common.composed_validation_loss(
        model, denoiser, val_pairs, args.batch_size, device, error_free, args.gamma))


def backtranslate(model, tokenizer, train_pairs, val_pairs, args, extra) -> dict:
    """Backtranslation (Sennrich et al., 2016; the paper's Appendix C), in three stages, each in
    its own folder under --out so that --resume picks up where it stopped:
      1. reverse/: a code-to-pseudocode model learns from the labeled pairs, from scratch;
      2. it writes pseudocode for unlabeled programs (synthetic.src / synthetic.tgt);
      3. mixed/: the pseudocode-to-code model learns from labeled + synthetic pairs, from scratch,
         and is then fine-tuned on the labeled pairs only (--out/model.pt)."""
    epochs = EPOCHS[common.preset_key(args)]  # --epochs sets the mixed stage; the others take the preset's budgets
    reverse_dir, mixed_dir = os.path.join(args.out, "reverse"), os.path.join(args.out, "mixed")
    swap = lambda pairs: [(y, x) for x, y in pairs]  # noqa: E731
    unlabeled = os.path.join(args.data, "unlabeled.tgt")
    if not os.path.isfile(unlabeled):  # SPoC has unlabeled code only if the user brought some
        raise common.UsageError(f"backtranslation needs unlabeled code: missing {unlabeled} "
                                "(SPoC: make_spoc.py --unlabeled TSV)")

    print("backtranslation 1/3: code -> pseudocode on the labeled pairs", file=sys.stderr)
    reverse = common.Transformer(model.config)
    common.fit(reverse, lambda epoch: swap(train_pairs), swap(val_pairs), with_epochs(args, epochs["baseline"]),
               reverse_dir, {**extra, "method": "backtranslation-reverse"})
    reverse.load_state_dict(common.load_checkpoint(os.path.join(reverse_dir, "model.pt"))["model"])

    synthetic_src, synthetic_tgt = os.path.join(args.out, "synthetic.src"), os.path.join(args.out, "synthetic.tgt")
    if not (args.resume and os.path.exists(synthetic_tgt)):
        programs = common.read_lines(unlabeled)
        programs = programs[:args.synthetic_programs] if args.synthetic_programs else programs
        print(f"backtranslation 2/3: pseudocode for {len(programs)} unlabeled programs", file=sys.stderr)
        pseudocode = common.translate(reverse, tokenizer, programs, args.batch_size, progress=True)
        common.write_lines(synthetic_src, pseudocode)
        common.write_lines(synthetic_tgt, programs)  # written last: its presence marks the stage done
    synthetic = list(zip(tokenizer.encode(common.read_lines(synthetic_src)),
                         tokenizer.encode(common.read_lines(synthetic_tgt))))

    print(f"backtranslation 3/3: pseudocode -> code on {len(train_pairs)} labeled + {len(synthetic)} synthetic "
          "pairs, then on the labeled pairs only", file=sys.stderr)
    common.fit(model, lambda epoch: train_pairs + synthetic, val_pairs, with_epochs(args, args.epochs),
               mixed_dir, {**extra, "method": "backtranslation-mixed"})
    model.load_state_dict(common.load_checkpoint(os.path.join(mixed_dir, "model.pt"))["model"])
    labeled_only = with_epochs(args, epochs["standard"])
    return common.fit(model, lambda epoch: train_pairs, val_pairs, labeled_only, args.out, extra)


if __name__ == "__main__":
    main()
