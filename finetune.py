"""Train a pseudocode-to-code predictor on the labeled pairs.

    python finetune.py --method baseline        # from scratch                        -> runs/baseline/model.pt
    python finetune.py --method standard        # init from the denoiser, train all   -> runs/standard/model.pt
    python finetune.py --method bart            # decoder frozen first, then all      -> runs/bart/model.pt
    python finetune.py --method standard --layers 6 --denoiser runs/denoiser12/model.pt --out runs/standard12
    python finetune.py --method baseline --resume   # continue after an interrupt

standard and bart start from the pre-trained denoiser (--denoiser, default runs/denoiser/model.pt) and
take its architecture; baseline builds a fresh model of the preset's size. Every method keeps the
epoch with the lowest validation loss.
"""
import argparse
import os
import sys

import common

METHODS = ("baseline", "standard", "bart")
# Epoch budgets: the paper trains models from scratch for 500 epochs and fine-tunes for 300
# (BART-style: 200 with the decoder frozen, then 100 more).
EPOCHS = {
    "paper": dict(baseline=500, standard=300, bart=300, bart_frozen=200),
    "cpu": dict(baseline=40, standard=25, bart=25, bart_frozen=15),
    "smoke": dict(baseline=2, standard=2, bart=2, bart_frozen=1),
}
PRESETS = {
    "paper": dict(batch_size=32, lr=5e-4, warmup_steps=4000, patience=50),
    "cpu": dict(batch_size=32, lr=1e-3, warmup_steps=300, patience=8),
    "smoke": dict(batch_size=8, lr=1e-3, warmup_steps=5, patience=2),
}


def parse_args(argv=None):
    parser = common.ArgumentParser(prog="finetune.py", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", choices=METHODS, required=True)
    parser.add_argument("--data", default="data/sanstype")
    parser.add_argument("--denoiser", default="runs/denoiser/model.pt", help="pre-trained denoiser (standard, bart)")
    parser.add_argument("--out", help="output folder (default runs/<method>)")
    parser.add_argument("--frozen-epochs", type=int, help="bart: epochs with the decoder frozen")
    common.add_training_args(parser)
    args = parser.parse_args(argv)
    epochs = EPOCHS[args.preset]
    args.epochs = args.epochs or epochs[args.method]
    args.frozen_epochs = args.frozen_epochs if args.frozen_epochs is not None else epochs["bart_frozen"]
    args.out = args.out or os.path.join("runs", args.method)
    return common.resolve_preset(args, PRESETS)


def main(argv=None):
    common.run_main("finetune.py", finetune, parse_args(argv), on_interrupt=common.RESUME_HINT)


def load_pairs(data_dir: str, split: str, tokenizer) -> list[tuple[list[int], list[int]]]:
    sources = common.read_lines(os.path.join(data_dir, f"{split}.src"))
    targets = common.read_lines(os.path.join(data_dir, f"{split}.tgt"))
    if not sources or len(sources) != len(targets):
        raise common.UsageError(f"{data_dir}/{split}.src and .tgt must have the same, non-zero number of lines")
    return list(zip(tokenizer.encode(sources), tokenizer.encode(targets)))


def decoder_is_frozen(model, epoch: int, frozen_epochs: int):
    """BART-style fine-tuning (Appendix D): first only the encoder learns. The shared embedding
    matrix is also the decoder's input and output layer, so it stays frozen with the decoder."""
    if epoch > frozen_epochs:
        return [name for name, _ in model.named_parameters()]
    return [name for name, _ in model.named_parameters() if name.startswith("encoder.")]


def finetune(args):
    spm = common.read_tokenizer_bytes(args.data)
    tokenizer = common.load_tokenizer(spm)
    train_pairs, val_pairs = load_pairs(args.data, "train", tokenizer), load_pairs(args.data, "val", tokenizer)

    if args.method == "baseline":
        model = common.Transformer(common.config_from_args(args, tokenizer.get_piece_size()))
    else:
        denoiser = common.load_checkpoint(args.denoiser)
        common.check_same_tokenizer(denoiser["spm"], spm, args.denoiser, f"{args.data}/spm.model")
        model = common.model_from_checkpoint(denoiser)
    print(f"{args.method}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{len(train_pairs)} labeled pairs, preset {args.preset}", file=sys.stderr)

    trainable = (lambda epoch: decoder_is_frozen(model, epoch, args.frozen_epochs)) if args.method == "bart" else None
    extra = {"spm": spm, "role": "predictor", "method": args.method}
    state = common.fit(model, lambda epoch: train_pairs, val_pairs, args, args.out, extra, trainable=trainable)
    print(f"best epoch {state['best_epoch']} (val loss {state['best_loss']:.4f}) -> "
          f"{os.path.join(args.out, 'model.pt')}")


if __name__ == "__main__":
    main()
