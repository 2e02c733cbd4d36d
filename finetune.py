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

Every run builds its model from its row of PRESETS (and flags) below. baseline and backtranslation start
from random weights; standard and bart from the pre-trained denoiser's (--denoiser, default
runs/denoiser/model.pt); composed from --init's, and keeps the denoiser frozen (a copy goes into its
checkpoint, so evaluate.py applies it without being told). Every method keeps the epoch with the lowest
validation loss (composed: of the composition Pi(f(x)), f decoding greedily).
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

import common
import make_spoc

METHODS = ("baseline", "standard", "bart", "composed", "backtranslation")
# Every value a predictor trains with, one row per dataset, preset and method; a flag overrides its column.
# paper: the authors' fairseq commands: ~16000 tokens (about 176 programs) an update, inverse-sqrt after a warm-up that
#   depends on the start (from scratch 400 updates from 5e-4, from Pi 150 from 1e-4, composed 90), 500 epochs from
#   scratch, 300 fine-tuning (BART-style: 200 with only the encoder and embeddings training, then 100), composed at a
#   tenth of the rate (f starts from a fine-tuned model, and the REINFORCE gradient is noisy).
# cpu: smaller models and budgets that end long before the paper's, so each run anneals linearly to 0 by its last
#   epoch: at a constant rate, 4 more epochs of the same standard model moved its test accuracy by 13 points.
# spoc paper: Appendix E: 5+5 layers, 8 heads, dropout 0.4, FLoRes's recipe (1e-3 after 4000 updates from 1e-7,
#   ~16000 tokens, about 90 programs, an update), 150 epochs with label smoothing 0.2 -> 0.1 -> 0.05, composed 20
#   epochs at 0.05. spoc cpu: sized for the full release's 11355 programs, 11 times SansType's labeled pairs.
# backtranslation trains a code-to-pseudocode model (reverse epochs), then a model on labeled + synthetic pairs
#   (epochs), then fine-tunes that on the labeled pairs alone (labeled epochs).
PRESETS = {
    # d_model, heads, layers (each side), d_ff, dropout, attention dropout, activation dropout, batch (programs),
    # lr, schedule, warm-up updates, warm-up's first lr;
    # epochs, patience, label smoothing (VALUE:EPOCHS,...), bart: frozen epochs, backtranslation: reverse epochs,
    # labeled epochs, unlabeled programs given synthetic pseudocode (0: all)
    "sanstype": {
        ("paper", "baseline"):        (256, 2, 3, 1024, 0.1, 0.2, 0.2, 176, 2e-3, "inverse-sqrt", 400, 5e-4,
                                       500, 500, "0", None, None, None,  None),
        ("paper", "standard"):        (256, 2, 3, 1024, 0.1, 0.2, 0.2, 176, 2e-3, "inverse-sqrt", 150, 1e-4,
                                       300, 500, "0", None, None, None,  None),
        ("paper", "bart"):            (256, 2, 3, 1024, 0.1, 0.2, 0.2, 176, 2e-3, "inverse-sqrt", 150, 1e-4,
                                       300, 500, "0",  200, None, None,  None),
        ("paper", "composed"):        (256, 2, 3, 1024, 0.1, 0.2, 0.2, 176, 2e-4, "inverse-sqrt",  90,  0.0,
                                       300, 500, "0", None, None, None,  None),
        ("paper", "backtranslation"): (256, 2, 3, 1024, 0.1, 0.2, 0.2, 176, 2e-3, "inverse-sqrt", 400, 5e-4,
                                       500, 500, "0", None,  500,  300,     0),
        ("cpu", "baseline"):          (128, 4, 2,  512, 0.1, 0.0, 0.0,  32, 1e-3, "linear",       300,  0.0,
                                        60,   8, "0", None, None, None,  None),
        ("cpu", "standard"):          (128, 4, 2,  512, 0.1, 0.0, 0.0,  32, 1e-3, "linear",       300,  0.0,
                                        25,   8, "0", None, None, None,  None),
        ("cpu", "bart"):              (128, 4, 2,  512, 0.1, 0.0, 0.0,  32, 1e-3, "linear",       300,  0.0,
                                        25,   8, "0",   15, None, None,  None),
        ("cpu", "composed"):          (128, 4, 2,  512, 0.1, 0.0, 0.0,  32, 1e-4, "linear",       300,  0.0,
                                         6,   8, "0", None, None, None,  None),
        ("cpu", "backtranslation"):   (128, 4, 2,  512, 0.1, 0.0, 0.0,  32, 1e-3, "linear",       300,  0.0,
                                        12,   8, "0", None,   60,   25,  4000),
        ("smoke", "baseline"):        ( 32, 2, 1,   64, 0.1, 0.2, 0.2,   8, 1e-3, "linear",         5,  0.0,
                                         2,   2, "0", None, None, None,  None),
        ("smoke", "standard"):        ( 32, 2, 1,   64, 0.1, 0.2, 0.2,   8, 1e-3, "linear",         5,  0.0,
                                         2,   2, "0", None, None, None,  None),
        ("smoke", "bart"):            ( 32, 2, 1,   64, 0.1, 0.2, 0.2,   8, 1e-3, "linear",         5,  0.0,
                                         2,   2, "0",    1, None, None,  None),
        ("smoke", "composed"):        ( 32, 2, 1,   64, 0.1, 0.2, 0.2,   8, 1e-4, "linear",         5,  0.0,
                                         2,   2, "0", None, None, None,  None),
        ("smoke", "backtranslation"): ( 32, 2, 1,   64, 0.1, 0.2, 0.2,   8, 1e-3, "linear",         5,  0.0,
                                         1,   2, "0", None,    2,    2,    16),
    },
    "spoc": {
        ("paper", "baseline"):        (256, 8, 5, 1024, 0.4, 0.2, 0.2, 90, 1e-3, "inverse-sqrt", 4000, 1e-7,
                                       150, 150, "0.2:100,0.1:25,0.05", None, None, None,  None),
        ("paper", "standard"):        (256, 8, 5, 1024, 0.4, 0.2, 0.2, 90, 1e-3, "inverse-sqrt", 4000, 1e-7,
                                       150, 150, "0.2:100,0.1:25,0.05", None, None, None,  None),
        ("paper", "bart"):            (256, 8, 5, 1024, 0.4, 0.2, 0.2, 90, 1e-3, "inverse-sqrt", 4000, 1e-7,
                                       150, 150, "0.2:100,0.1:25,0.05",  100, None, None,  None),
        ("paper", "composed"):        (256, 8, 5, 1024, 0.4, 0.2, 0.2, 90, 1e-4, "inverse-sqrt", 4000, 1e-7,
                                        20, 150, "0.05",                None, None, None,  None),
        ("paper", "backtranslation"): (256, 8, 5, 1024, 0.4, 0.2, 0.2, 90, 1e-3, "inverse-sqrt", 4000, 1e-7,
                                       150, 150, "0.2:100,0.1:25,0.05", None,  150,  150,     0),
        ("cpu", "baseline"):          (128, 4, 2,  512, 0.1, 0.0, 0.0, 32, 1e-3, "linear",        300,  0.0,
                                         6,   3, "0",                   None, None, None,  None),
        ("cpu", "standard"):          (128, 4, 2,  512, 0.1, 0.0, 0.0, 32, 1e-3, "linear",        300,  0.0,
                                         3,   3, "0",                   None, None, None,  None),
        ("cpu", "bart"):              (128, 4, 2,  512, 0.1, 0.0, 0.0, 32, 1e-3, "linear",        300,  0.0,
                                         4,   3, "0",                      2, None, None,  None),
        ("cpu", "composed"):          (128, 4, 2,  512, 0.1, 0.0, 0.0, 32, 1e-4, "linear",        300,  0.0,
                                         1,   3, "0",                   None, None, None,  None),
        ("cpu", "backtranslation"):   (128, 4, 2,  512, 0.1, 0.0, 0.0, 32, 1e-3, "linear",        300,  0.0,
                                         2,   3, "0",                   None,    6,    3,  4000),
        ("smoke", "baseline"):        ( 32, 2, 1,   64, 0.1, 0.2, 0.2,  8, 1e-3, "linear",          5,  0.0,
                                         2,   2, "0",                   None, None, None,  None),
        ("smoke", "standard"):        ( 32, 2, 1,   64, 0.1, 0.2, 0.2,  8, 1e-3, "linear",          5,  0.0,
                                         2,   2, "0",                   None, None, None,  None),
        ("smoke", "bart"):            ( 32, 2, 1,   64, 0.1, 0.2, 0.2,  8, 1e-3, "linear",          5,  0.0,
                                         2,   2, "0",                      1, None, None,  None),
        ("smoke", "composed"):        ( 32, 2, 1,   64, 0.1, 0.2, 0.2,  8, 1e-4, "linear",          5,  0.0,
                                         2,   2, "0",                   None, None, None,  None),
        ("smoke", "backtranslation"): ( 32, 2, 1,   64, 0.1, 0.2, 0.2,  8, 1e-3, "linear",          5,  0.0,
                                         1,   2, "0",                   None,    2,    2,    16),
    },
}
COLUMNS = (*common.PRESET_COLUMNS, "frozen_epochs", "reverse_epochs", "labeled_epochs", "synthetic_programs")


def parse_args(argv=None):
    parser = common.ArgumentParser(prog="finetune.py", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", choices=METHODS, required=True)
    parser.add_argument("--data", default="data/sanstype")
    parser.add_argument("--denoiser", default="runs/denoiser/model.pt",
                        help="pre-trained denoiser (standard, bart: the init; composed: the frozen Pi)")
    parser.add_argument("--out", help="output folder (default runs/<method>)")
    parser.add_argument("--frozen-epochs", type=int, help="bart: epochs with only the encoder training")
    composed = parser.add_argument_group("composed fine-tuning (Eq. 1, Appendix D)")
    composed.add_argument("--init", default="runs/standard/model.pt", help="the base predictor's initialisation")
    # One sample with the batch baseline for 6 cpu epochs validated level with two samples and leave-one-out for 4
    # (3 seeds each, the same compute; EXPERIMENTS.md), and its step costs 3x a standard one instead of 5x. The
    # paper's estimator (1 sample, none) diverged.
    composed.add_argument("--samples", type=int, default=1, help="outputs sampled per input for REINFORCE")
    composed.add_argument("--reinforce-baseline", choices=("batch", "leave-one-out", "none"), default="batch",
                          help="subtract the mean reward of the batch's other inputs (batch) or of the input's other "
                               "samples (leave-one-out, needs --samples 2 or more); none: the paper's estimator")
    composed.add_argument("--clamp", choices=("reward", "sample", "padded-sample"), default="reward",
                          help="clamp at gamma: log p_beta(y|y') (the paper's text), log p_theta(y'|x), or "
                               "log p_theta(y'|x) summed over the batch's padded samples (the released code)")
    composed.add_argument("--gamma", type=float, default=-50.0)
    composed.add_argument("--composed-weight", type=float, default=0.1, help="scale of the composed term")
    composed.add_argument("--lam", type=float, default=1.0, help="lambda, the weight of the direct term")
    parser.add_argument("--labeled", type=int, help="train on the first N labeled pairs only (Figure 4's sweep)")
    parser.add_argument("--synthetic-programs", type=int,
                        help="backtranslation: unlabeled programs to write pseudocode for (0: all)")
    common.add_training_args(parser)
    args = parser.parse_args(argv)
    common.apply_preset(parser, args, COLUMNS, lambda dataset: PRESETS[dataset][args.preset, args.method])
    args.out = args.out or os.path.join("runs", args.method)
    if args.method == "bart" and not 0 <= args.frozen_epochs < args.epochs:
        parser.error(f"bart: --frozen-epochs ({args.frozen_epochs}) must be below --epochs ({args.epochs})")
    if args.samples < 1 or (args.labeled is not None and args.labeled < 1):
        parser.error("--samples and --labeled must be at least 1")
    if args.reinforce_baseline == "leave-one-out" and args.samples < 2:
        parser.error("--reinforce-baseline leave-one-out needs --samples 2 or more (with 1 sample: batch or none)")
    if args.method == "backtranslation" and args.synthetic_programs < 0:
        parser.error("--synthetic-programs must not be negative (0: all)")
    return args


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
    if args.labeled and args.labeled > len(train_pairs):
        raise common.UsageError(f"--labeled {args.labeled}: {args.data} has only {len(train_pairs)} labeled pairs")
    train_pairs = train_pairs[:args.labeled] if args.labeled else train_pairs
    extra = {"spm": spm, "role": "predictor", "method": args.method}
    fit = {}  # composed: its own loss and early-stopping criterion

    # Built from this run's row and flags; standard, bart and composed then take the weights they start from.
    config = common.config_from_args(args, tokenizer.get_piece_size())
    if args.method in ("baseline", "backtranslation"):
        model = common.Transformer(config)
    elif args.method == "composed":
        model, init = common.load_model(args.init, spm, args.data, config)
        denoiser, denoiser_checkpoint = common.load_model(args.denoiser, spm, args.data)
        fit.update(freeze_and_compose(model, denoiser, denoiser_checkpoint, tokenizer, val_pairs, args))
        extra.update(init_method=init.get("method"), denoiser_corruption=denoiser_checkpoint.get("corruption"),
                     denoiser={key: denoiser_checkpoint.get(key) for key in ("config", "model", "error_detector")})
    else:
        model, denoiser_checkpoint = common.load_model(args.denoiser, spm, args.data, config)
        extra.update(denoiser_corruption=denoiser_checkpoint.get("corruption"))
    print(f"{args.method}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{len(train_pairs)} labeled pairs, {args.dataset} preset {args.preset}", file=sys.stderr)

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


def freeze_and_compose(model, denoiser, denoiser_checkpoint, tokenizer, val_pairs, args) -> dict:
    """Composed fine-tuning's loss and early-stopping criterion around the frozen denoiser Pi."""
    device = common.pick_device(args.device)
    denoiser.to(device).eval()  # eval: no dropout; Pi is a fixed function of its input
    denoiser.requires_grad_(False)
    reward = common.denoiser_reward(denoiser, args.gamma if args.clamp == "reward" else None)
    sample_log_prob = {"reward": common.output_log_probs, "sample": clamped_sample_log_probs(args.gamma),
                       "padded-sample": padded_sample_log_probs(args.gamma)}[args.clamp]
    pi_loss = common.denoiser_loss(denoiser, args.batch_size, device)
    g = make_spoc.error_detector(denoiser_checkpoint)
    if g:  # SPoC's Pi leaves what compiles as it is (Appendix E)
        error_free = lambda outputs: g(tokenizer.decode(outputs))  # noqa: E731 (on token ids)
        reward = make_spoc.reward_with_error_detector(reward, error_free, args.gamma)
        pi_loss = make_spoc.denoiser_loss_with_error_detector(pi_loss, error_free, args.gamma)

    def loss_fn(model, src, tgt_in, tgt_out, args):
        return common.composed_loss(model, reward, src, tgt_in, tgt_out, samples=args.samples,
                                    baseline=args.reinforce_baseline, composed_weight=args.composed_weight,
                                    lam=args.lam, label_smoothing=args.label_smoothing,
                                    sample_log_prob=sample_log_prob)

    return dict(loss_fn=loss_fn, validate=lambda model: common.composed_validation_loss(
        model, pi_loss, val_pairs, args.batch_size, device))


# The released code's log p_theta(y'|x) in the REINFORCE term (--clamp sample, padded-sample); common.composed_loss
# takes either in place of common.output_log_probs.

def clamped_sample_log_probs(gamma: float = -50.0):
    """--clamp sample: log p_theta(y'|x) clamped at gamma instead of the reward, which stops the gradient
    of samples less likely than e^gamma."""
    return lambda *args: common.output_log_probs(*args).clamp(min=gamma)


def padded_sample_log_probs(gamma: float = -50.0):
    """--clamp padded-sample, what the released code computes: log p_theta(y'|x) summed over every position
    of the batch's samples padded to the longest, the padding after a sample's end scored as the padding
    token (which f never learns to predict), then clamped at gamma. A sample shorter than the longest of its
    batch is almost always clamped, and a clamped sample gets no gradient."""
    def log_probs(model, memory, memory_mask, outputs, finished):
        rows = [[common.BOS_ID] + ids + [common.EOS_ID] * done for ids, done in zip(outputs, finished)]
        tgt = common.pad(rows).to(memory.device)
        log_p = F.log_softmax(model.decode(tgt[:, :-1], memory, memory_mask).float(), dim=-1)  # nothing masked
        return log_p.gather(-1, tgt[:, 1:, None]).squeeze(-1).sum(dim=1).clamp(min=gamma)
    return log_probs


def backtranslate(model, tokenizer, train_pairs, val_pairs, args, extra) -> dict:
    """Backtranslation (Sennrich et al., 2016; the paper's Appendix C), in three stages, each in
    its own folder under --out so that --resume picks up where it stopped:
      1. reverse/: a code-to-pseudocode model learns from the labeled pairs, from scratch;
      2. it writes pseudocode for unlabeled programs (synthetic.src / synthetic.tgt);
      3. mixed/: the pseudocode-to-code model learns from labeled + synthetic pairs, from scratch,
         and is then fine-tuned on the labeled pairs only (--out/model.pt)."""
    reverse_dir, mixed_dir = os.path.join(args.out, "reverse"), os.path.join(args.out, "mixed")
    swap = lambda pairs: [(y, x) for x, y in pairs]  # noqa: E731
    unlabeled = os.path.join(args.data, "unlabeled.tgt")
    if not os.path.isfile(unlabeled):  # SPoC has unlabeled code only if the user brought some
        raise common.UsageError(f"backtranslation needs unlabeled code: missing {unlabeled} "
                                "(SPoC: make_spoc.py --unlabeled TSV)")

    print("backtranslation 1/3: code -> pseudocode on the labeled pairs", file=sys.stderr)
    reverse = common.Transformer(model.config)
    common.fit(reverse, lambda epoch: swap(train_pairs), swap(val_pairs), with_epochs(args, args.reverse_epochs),
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
    return common.fit(model, lambda epoch: train_pairs, val_pairs, with_epochs(args, args.labeled_epochs), args.out,
                      extra)


if __name__ == "__main__":
    main()
