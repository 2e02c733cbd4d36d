"""Train a predictor of outputs from inputs on the labeled pairs (SansType: code from pseudocode).

    python finetune.py --method baseline         # from scratch                          -> runs/baseline/model.pt
    python finetune.py --method standard         # init from the denoiser, train all     -> runs/standard/model.pt
    python finetune.py --method bart             # encoder alone (bart/frozen/), then all -> runs/bart/model.pt
    python finetune.py --method composed         # Pi(f(x)): f from runs/standard, Pi frozen -> runs/composed/model.pt
    python finetune.py --method composed --estimator straight-through --composed-weight 1 --out runs/composed_st
    python finetune.py --method composed --unlabeled-inputs 1000 --out runs/composed_unlabeled  # + inputs, no gold
    python finetune.py --method backtranslation  # + synthetic pseudocode for unlabeled code -> runs/backtranslation/
    python finetune.py --method composed --init runs/bart/model.pt --out runs/composed_bart
    python finetune.py --method standard --layers 4 --denoiser runs/denoiser_deep/model.pt --out runs/standard_deep
    python finetune.py --method baseline --resume   # continue after an interrupt
    python finetune.py --method standard --data data/spoc --denoiser runs/spoc/denoiser/model.pt \\
        --out runs/spoc/standard                   # SPoC (make_spoc.py): its own presets (Appendix E)

Every run trains with its PRESETS entry (and flags) below, its model of common.ARCHITECTURE's size. baseline
and backtranslation start from random weights; standard and bart from the pre-trained denoiser's (--denoiser,
default runs/denoiser/model.pt); composed from --init's, and keeps the denoiser frozen (a copy goes into its
checkpoint, so evaluate.py applies it without being told). Every method keeps the epoch with the lowest
validation loss (composed: of the composition Pi(f(x)), f decoding greedily), or the one --keep-by names (composed on a
task with a validity command: the most valid, KEEP_BY).
"""
import os
import sys

import torch

import common

METHODS = ("baseline", "standard", "bart", "composed", "backtranslation")

# The values a predictor trains with: a row per setting, a value per preset (common.COLUMNS), then what a dataset and a
# method change (run_defaults, below, merges them). The model's size is common.ARCHITECTURE's, Pi's too; AdamW's betas,
# weight decay, clipping, precision and seed are common.EVERY_PRESET's; Eq. 1's settings are common.EQ1 (the three
# together, at the top of common.py's section 6, just above Eq. 1's loss). A flag given on the command line wins; a
# run's settings line lists every value a flag has. paper: the authors' fairseq commands, ~16000 tokens (about 176
# programs) an update, inverse-sqrt after a warm-up, each run stopped 50 epochs after its best (the authors train to the
# last epoch; on a GPU the baselines' validation loss was lowest at epochs 107-126 of 500 and doubled by the end, a
# better epoch never came more than 18 after the one before, in baseline or standard: EXPERIMENTS.md, "Table 2 at the
# paper preset"); cpu, minutes on 2 cores: no attention or activation dropout (their random masks cost a quarter of a
# step; more dropout underfits at this size), a linear decay over more epochs than a run needs, so that each stops at
# its best (patience; EXPERIMENTS.md, "the regime on two CPU cores"); smoke: the tests. SPoC's paper (Appendix E):
# FLoRes's recipe, label smoothing lowered near the end (it helped); its cpu: for the full release.
#                       SansType: paper  cpu       smoke          SPoC: paper             cpu
PRESETS = dict(
    dropout=           (0.1,             0.1,      0.1,           0.4,                    0.1),
    attention_dropout= (0.2,             0.0,      0.2,           0.2,                    0.0),
    activation_dropout=(0.2,             0.0,      0.2,           0.2,                    0.0),
    batch_size=        (176,             32,       8,             90,                     32),
    lr=                (2e-3,            1e-3,     1e-3,          1e-3,                   1e-3),
    lr_schedule=       ("inverse-sqrt",  "linear", "linear",      "inverse-sqrt",         "linear"),
    warmup_steps=      (150,             300,      5,             4000,                   300),
    warmup_start_lr=   (1e-4,            0.0,      0.0,           1e-7,                   0.0),
    epochs=            (300,             80,       2,             150,                    3),
    patience=          (50,              10,       2,             150,                    3),
    label_smoothing=   ("0",             "0",      "0",           "0.2:100,0.1:25,0.05",  "0"),
)
# Where a dataset departs from its column, before a method's changes: a task of your own (make_task.py) waits 30
# epochs for a better one, not 10 (on the dates example its validation loss, tiny and noisy, fell for 100 epochs:
# EXPERIMENTS.md, "A task of one's own: dates").
DATASET_CHANGES = {("task", "cpu"): dict(patience=30)}
# The epoch a run keeps (--keep-by): the lowest validation loss (composed: of Pi(f(x))), but for composed on a task of
# one's own that has a validity command, the largest share of val Pi(f(x)) that the command passes, ties broken by the
# loss: chosen on validation over the two worked examples, 3 seeds (EXPERIMENTS.md, "The kept model of a task").
KEEP_BY = {("task", "composed"): "valid"}
# What each method changes in a preset. From scratch, the paper's warm-up is 400 updates from 5e-4 (from Pi: 150 from
# 1e-4); composed trains at a tenth of the rate (the authors' released command: f starts fine-tuned), at the
# paper preset up to the authors' 300 epochs, stopped 20 after its best (on an H200, composed's and the control's
# criterion was lowest at epochs 13-29, a better epoch at most 16 after the one before: EXPERIMENTS.md, "Table 2 at
# the paper preset"). bart: epochs of the encoder alone.
METHOD_CHANGES = {
    "baseline": {"paper": dict(warmup_steps=400, warmup_start_lr=5e-4, epochs=500), "cpu": dict(epochs=120),
                 "spoc cpu": dict(epochs=6)},
    "standard": {},
    "bart": {"paper": dict(frozen_epochs=200), "cpu": dict(frozen_epochs=15), "smoke": dict(frozen_epochs=1),
             "spoc paper": dict(frozen_epochs=100), "spoc cpu": dict(epochs=4, frozen_epochs=2)},
    "composed": {"paper": dict(lr=2e-4, warmup_steps=90, warmup_start_lr=0.0, patience=20),
                 "cpu": dict(lr=1e-4, epochs=6, patience=3), "smoke": dict(lr=1e-4),
                 "spoc paper": dict(lr=1e-4, epochs=20, label_smoothing="0.05"), "spoc cpu": dict(lr=1e-4, epochs=1)},
    "backtranslation": {
        "paper": dict(warmup_steps=400, warmup_start_lr=5e-4, epochs=500, reverse_epochs=500, labeled_epochs=300,
                      synthetic_programs=0),
        "cpu": dict(epochs=12, reverse_epochs=60, labeled_epochs=25, synthetic_programs=4000),
        "smoke": dict(epochs=1, reverse_epochs=2, labeled_epochs=2, synthetic_programs=16),
        "spoc paper": dict(reverse_epochs=150, labeled_epochs=150, synthetic_programs=0),
        "spoc cpu": dict(epochs=2, reverse_epochs=6, labeled_epochs=3, synthetic_programs=4000)},
}


def run_defaults(dataset: str, known) -> dict:
    """What a run of --method with --preset trains with unless a flag says otherwise: its column of PRESETS with its
    dataset's changes and its method's, the epoch it keeps (KEEP_BY), and where it reads and writes (runs/<method>; Pi
    from runs/denoiser, f from runs/standard); composed's Eq. 1 settings, common.EQ1."""
    preset = {**common.column(PRESETS, dataset, known.preset), **DATASET_CHANGES.get((dataset, known.preset), {})}
    changes = METHOD_CHANGES.get(known.method, {}).get(common.column_name(dataset, known.preset), {})
    keep_by = KEEP_BY.get((dataset, known.method), "loss")
    if keep_by == "valid" and not common.read_manifest(known.data).get("valid_command"):
        keep_by = "loss"  # a task with no validity command
    paths = {"out": os.path.join("runs", known.method or "")}
    if known.method in ("standard", "bart", "composed"):
        paths["denoiser"] = "runs/denoiser/model.pt"
    if known.method == "composed":
        paths.update(init="runs/standard/model.pt", **common.EQ1)  # Eq. 1's settings
    return {**preset, **changes, "keep_by": keep_by, **paths}


def parse_args(argv=None):
    parser = common.ArgumentParser(prog="finetune.py", description=__doc__)
    parser.add_argument("--method", choices=METHODS, required=True, help="which predictor to train")
    parser.add_argument("--data", default="data/sanstype", help=f"a folder {common.DATA_MAKERS} wrote")
    parser.add_argument("--denoiser", help="pre-trained denoiser (standard, bart: the init; composed: the frozen "
                        "Pi)")
    parser.add_argument("--out", help="output folder")
    parser.add_argument("--labeled", type=int, help="train on the first N labeled pairs only (Figure 4's sweep)")
    parser.add_argument("--frozen-epochs", type=int, help="bart: epochs with only the encoder training")
    parser.add_argument("--reverse-epochs", type=int, help="backtranslation: epochs of the code-to-pseudocode model")
    parser.add_argument("--labeled-epochs", type=int, help="backtranslation: epochs on the labeled pairs at the end")
    parser.add_argument("--synthetic-programs", type=int,
                        help="backtranslation: unlabeled programs to write pseudocode for (0: all)")
    composed = parser.add_argument_group("composed fine-tuning (Eq. 1, Appendix D)")
    composed.add_argument("--init", help="the base predictor's initialisation")
    composed.add_argument("--estimator", choices=("reinforce", "straight-through", "gumbel"),
                          help="the gradient of the first term through f's discrete outputs: REINFORCE (the paper's), "
                               "or the denoiser reading them as one-hot rows with the gradient of f's softmax "
                               "(straight-through) or of a Gumbel-softmax sample at temperature --tau (gumbel)")
    composed.add_argument("--samples", type=int, help="outputs sampled per input")
    composed.add_argument("--reinforce-baseline", choices=("batch", "leave-one-out", "none"),
                          help="subtract the mean reward of the batch's other inputs (batch) or of the input's other "
                               "samples (leave-one-out, needs --samples 2 or more); none: the paper's estimator")
    composed.add_argument("--clamp", choices=("reward", "sample", "padded-sample"),
                          help="clamp at gamma: log p_beta(y|y') (the paper's text), log p_theta(y'|x), or "
                               "log p_theta(y'|x) summed over the batch's padded samples (the released code)")
    composed.add_argument("--gamma", type=float, help="the clamp's floor")
    composed.add_argument("--composed-weight", type=float, help="scale of the composed term")
    composed.add_argument("--lam", type=float, help="lambda, the weight of the direct term")
    composed.add_argument("--tau", type=float, help="gumbel: the Gumbel-softmax's temperature")
    composed.add_argument("--unlabeled-inputs", type=int, metavar="N",
                          help="the first term also over N inputs with no gold output an epoch (the next N lines of "
                               "DATA/unlabeled.src), its reward Pi's log-likelihood of leaving y' as it is, "
                               "log p_beta(y'|y'); 0: labeled inputs only, the paper's")
    parser.add_argument("--keep-by", choices=("loss", "exact", "valid"),
                        help="the epoch kept in model.pt: the lowest validation loss; or the highest share of val "
                             "decoded greedily (composed: Pi(f(x))) that is the gold output exactly, or that a task's "
                             "validity command passes, ties broken by the loss (baseline, standard, composed)")
    common.add_training_args(parser)
    args = common.parse_training_args(parser, argv, run_defaults,
                                      lambda known: known.out or os.path.join("runs", known.method or ""))
    # A method's own flags are those its defaults hold (composed's estimator, bart's frozen epochs, ...).
    defaults = run_defaults(args.dataset, args)
    for name in ("denoiser", "init", "frozen_epochs", "reverse_epochs", "labeled_epochs", "synthetic_programs",
                 *common.EQ1):
        if getattr(args, name) is not None and name not in defaults:
            parser.error(f"--{name.replace('_', '-')} does not apply to --method {args.method}")
    for name, estimator in {"reinforce_baseline": "reinforce", "clamp": "reinforce", "gamma": "reinforce",
                            "tau": "gumbel"}.items():  # flags of one estimator, where not EQ1's value
        if args.method == "composed" and getattr(args, name) != parser.get_default(name) and \
                estimator != args.estimator:
            parser.error(f"--{name.replace('_', '-')} applies to --estimator {estimator} only")
    common.check_ranges(parser, args, at_least_1="samples labeled reverse_epochs labeled_epochs", positive="tau",
                        not_negative="synthetic_programs frozen_epochs composed_weight lam unlabeled_inputs")
    if args.method == "bart" and not 0 <= args.frozen_epochs < args.epochs:
        parser.error(f"bart: --frozen-epochs ({args.frozen_epochs}) must be below --epochs ({args.epochs})")
    if args.keep_by != "loss" and args.method in ("bart", "backtranslation"):
        parser.error(f"--keep-by {args.keep_by} applies to baseline, standard and composed")
    if args.keep_by == "valid" and not common.read_manifest(args.data).get("valid_command"):
        parser.error(f"--keep-by valid needs a task folder with a validity command (make_task.py --valid-command); "
                     f"{args.data} has none")
    if args.reinforce_baseline == "leave-one-out" and args.samples < 2:
        parser.error("--reinforce-baseline leave-one-out needs --samples 2 or more (with 1 sample: batch or none)")
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


def unlabeled_inputs(args, tokenizer):
    """composed --unlabeled-inputs N: epoch e's N inputs with no gold output, lines (e - 1) N .. e N - 1 of
    DATA/unlabeled.src (from its start again after its end), as (source ids, None) pairs, which common.batches puts
    in batches of their own."""
    if args.method != "composed" or not args.unlabeled_inputs:
        return lambda epoch: []
    path = os.path.join(args.data, "unlabeled.src")
    sources = tokenizer.encode(common.read_lines(path)) if os.path.isfile(path) else []
    if not sources:
        raise common.UsageError(f"--unlabeled-inputs needs inputs with no gold output, one a line, in {path} "
                                "(make_sanstype.py writes them)")
    n = args.unlabeled_inputs
    return lambda epoch: [(sources[i % len(sources)], None) for i in range((epoch - 1) * n, epoch * n)]


def finetune(args):
    torch.manual_seed(args.seed)  # initialisation, dropout and sampling
    spm, spm_path = common.read_tokenizer_bytes(args.data), os.path.join(args.data, "spm.model")
    tokenizer = common.load_tokenizer(spm)
    train_pairs, val_pairs = load_pairs(args.data, "train", tokenizer), load_pairs(args.data, "val", tokenizer)
    if args.labeled and args.labeled > len(train_pairs):
        raise common.UsageError(f"--labeled {args.labeled}: {args.data} has only {len(train_pairs)} labeled pairs")
    train_pairs = train_pairs[:args.labeled] if args.labeled else train_pairs
    unlabeled = os.path.join(args.data, "unlabeled.tgt")
    if args.method == "backtranslation" and not os.path.isfile(unlabeled):  # SPoC: only if the user brought some
        raise common.UsageError(f"backtranslation needs unlabeled code: missing {unlabeled} "
                                "(SPoC: make_spoc.py --unlabeled TSV)")
    # What evaluate.py needs to place the model in the paper's tables; deep: the 12-layer rows, which we run as
    # twice the preset's layers.
    extra = {"spm": spm, "role": "predictor", "method": args.method,
             "deep": args.layers >= 2 * common.column(common.ARCHITECTURE, args.dataset, args.preset)["layers"]}
    composed_training = {}  # composed: the frozen denoiser, and SPoC's g

    # Built from this run's preset and flags; standard, bart and composed then take the weights they start from.
    config = common.config_from_args(args, tokenizer.get_piece_size())
    if args.method in ("baseline", "backtranslation"):
        model = common.Transformer(config)
    elif args.method == "composed":
        model, init = common.load_model(args.init, spm, spm_path, "predictor", config)
        denoiser, denoiser_checkpoint = common.load_model(args.denoiser, spm, spm_path, "denoiser")
        if args.resume:
            check_same_denoiser(args, denoiser_checkpoint)
        composed_training = freeze(denoiser, denoiser_checkpoint, tokenizer, args)
        extra.update(init_method=init.get("method"), denoiser={key: denoiser_checkpoint.get(key) for key in (
            "config", "model", "error_detector", "valid_data", "args", "corruption", "own_noise", "paper_table")})
    else:
        model, denoiser_checkpoint = common.load_model(args.denoiser, spm, spm_path, "denoiser", config)
    if args.method in ("standard", "bart", "composed"):  # Pi's noise, seed and settings, for evaluate.py's tables
        extra.update({f"denoiser_{key}": denoiser_checkpoint.get(key) for key in ("corruption", "own_noise",
                                                                                  "paper_table", "args")})
    inputs_alone = unlabeled_inputs(args, tokenizer)
    common.claim_output(args)  # every input checked: now the run may begin
    print(f"{args.method}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{len(train_pairs)} labeled pairs, {args.dataset} preset {args.preset}\nsettings: {common.settings(args)}",
          file=sys.stderr)

    if args.method == "backtranslation":
        state = backtranslate(model, tokenizer, train_pairs, val_pairs, args, extra)
    elif args.method == "bart":  # the encoder alone in frozen/, then every weight in --out
        frozen_dir = os.path.join(args.out, "frozen")
        common.fit(model, lambda epoch: train_pairs, val_pairs, args, frozen_dir, extra,
                   trainable=encoder_parameters(model), epochs=args.frozen_epochs)
        model.load_state_dict(common.load_checkpoint(os.path.join(frozen_dir, "model.pt"))["model"])
        state = common.fit(model, lambda epoch: train_pairs, val_pairs, args, args.out, extra,
                           epochs=args.epochs - args.frozen_epochs)
    else:
        g = common.error_detector(denoiser_checkpoint) if composed_training else None  # composed: Pi's g, if any
        state = common.fit(model, lambda epoch: train_pairs + inputs_alone(epoch), val_pairs, args, args.out, extra,
                           **composed_training,
                           val_share=common.judged_share(args, tokenizer, composed_training.get("denoiser"), g))
    print(f"best epoch {state['best_epoch']} (val loss {state['best_loss']:.4f}"
          f"{common.shown(state.get('best_share'), args)}) -> {os.path.join(args.out, 'model.pt')}")


def freeze(denoiser, denoiser_checkpoint, tokenizer, args) -> dict:
    """The frozen denoiser Pi, and its error detector g if it has one, as common.fit takes them for composed
    fine-tuning."""
    device = common.pick_device(args.device)
    denoiser.to(device).eval()  # eval: no dropout; Pi is a fixed function of its input
    denoiser.requires_grad_(False)
    g = common.error_detector(denoiser_checkpoint)
    if g and args.estimator != "reinforce":
        raise common.UsageError(f"--estimator {args.estimator}: this Pi passes what its error detector g accepts "
                                "unchanged, which no gradient goes through; use --estimator reinforce")
    # Pi = (g, nu) leaves what g passes as it is (Appendix E; SPoC's g: it compiles): g reads the text, on the host.
    error_free = (lambda decoded: torch.tensor(g(tokenizer.decode(common.as_lists(decoded))), device=device)) \
        if g else None
    return dict(denoiser=denoiser, error_free=error_free)


def check_same_denoiser(args, denoiser_checkpoint):
    """--resume of composed goes on against the Pi the run trained against, whose copy its checkpoints hold: refuse
    another written at --denoiser's path since (the settings a resume checks name Pi's path, not its weights)."""
    ran = common.checkpoint_ran_with(args.out)
    held = common.load_checkpoint(ran, needs=("denoiser",))["denoiser"]["model"] if ran else None
    given = denoiser_checkpoint["model"]
    if held is not None and (held.keys() != given.keys() or not all(torch.equal(held[k], given[k]) for k in given)):
        raise common.UsageError(f"--resume: {args.denoiser} is not the Pi this run trained against (its checkpoints "
                                "hold a copy): resume with that Pi, or --overwrite to start over")


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

    print("backtranslation 1/3: code -> pseudocode on the labeled pairs", file=sys.stderr)
    reverse = common.Transformer(model.config)
    common.fit(reverse, lambda epoch: swap(train_pairs), swap(val_pairs), args, reverse_dir,
               {**extra, "method": "backtranslation-reverse"}, epochs=args.reverse_epochs)
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
    common.fit(model, lambda epoch: train_pairs + synthetic, val_pairs, args, mixed_dir,
               {**extra, "method": "backtranslation-mixed"})
    model.load_state_dict(common.load_checkpoint(os.path.join(mixed_dir, "model.pt"))["model"])
    return common.fit(model, lambda epoch: train_pairs, val_pairs, args, args.out, extra, epochs=args.labeled_epochs)


if __name__ == "__main__":
    main()
