"""Train a predictor of outputs from inputs on the labeled pairs, by one of the paper's methods.

    python finetune.py --method baseline         # from scratch                          -> runs/baseline/model.pt
    python finetune.py --method standard         # init from the denoiser, train all     -> runs/standard/model.pt
    python finetune.py --method bart             # encoder alone (bart/frozen/), then all -> runs/bart/model.pt
    python finetune.py --method composed         # Pi(f(x)): f from runs/standard, Pi frozen -> runs/composed/model.pt
    python finetune.py --method composed --estimator straight-through --composed-weight 1 --out runs/composed_st
    python finetune.py --method composed --unlabeled-inputs 1000 --out runs/composed_unlabeled  # + inputs, no gold
    python finetune.py --method backtranslation  # + synthetic inputs for unlabeled outputs -> runs/backtranslation/
    python finetune.py --method composed --init runs/bart/model.pt --out runs/composed_bart
    python finetune.py --method standard --layers 4 --denoiser runs/denoiser_deep/model.pt --out runs/standard_deep
    python finetune.py --method baseline --resume   # continue after an interrupt
    python finetune.py --method standard --data data/spoc --denoiser runs/spoc/denoiser/model.pt \\
        --out runs/spoc/standard                   # SPoC (make_spoc.py): its own presets (Appendix E)

baseline and backtranslation start from random weights; standard and bart from the denoiser's (--denoiser); composed
from --init's, and keeps the denoiser Pi frozen (a copy goes into its checkpoint, so that evaluate.py applies it
unasked). Every method keeps the epoch of the lowest validation loss (composed: of Pi(f(x)), f decoding greedily; on a
task with a validity command, the epoch whose Pi(f(x)) it passes most often, ties broken by the loss: where the f it
starts from passes all of val, only an epoch that does too and lowers the loss replaces it), or the one --keep-by names.
"""
import os
import sys

import torch

import common
import harness

METHODS = ("baseline", "standard", "bart", "composed", "backtranslation")
PI, STANDARD = "runs/denoiser/model.pt", "runs/standard/model.pt"  # where Pi and composed's f come from by default
# Every value a predictor trains with: a block per preset (SPoC's and a task's own where their data takes them), a row
# per setting, and where the methods differ a value per method, in METHODS' order; None: a method has no such setting
# (its flag is refused). A flag given wins. paper: the authors' fairseq commands, composed's their released command (a
# tenth of the rate: f starts fine-tuned), each run stopped `patience` epochs after its best (the authors train to the
# last epoch); cpu: sized for 2 cores, no attention or activation dropout, a linear decay over more epochs than a run
# needs, so that each stops at its best; smoke: the tests. SPoC (Appendix E): FLoRes's recipe, label smoothing lowered
# near the end.
PRESETS = {
    "every preset": dict(
        adam_betas=(0.9, 0.98), weight_decay=1e-4, clip_norm=0.0, precision="fp32", seed=0, labeled=0,
        #                  baseline  standard  bart  composed     backtranslation
        denoiser=          [None,    PI,       PI,   PI,          None],
        init=              [None,    None,     None, STANDARD,    None],
        keep_by=           ["loss",  "loss",   None, "valid",     None],  # "loss" where data has no validity command
        estimator=         [None,    None,     None, "reinforce", None],  # Eq. 1 (common.composed_loss)
        reinforce_baseline=[None,    None,     None, "batch",     None],  # ours, chosen on val; the paper's: none
        gamma=             [None,    None,     None, -50.0,       None],
        composed_weight=   [None,    None,     None, 0.1,         None],
        lam=               [None,    None,     None, 1.0,         None],
        unlabeled_inputs=  [None,    None,     None, 0,           None]),
    "paper": dict(
        d_model=256, n_heads=2, layers=3, d_ff=1024, dropout=0.1, attention_dropout=0.2, activation_dropout=0.2,
        batch_size=176, lr_schedule="inverse-sqrt", label_smoothing="0",
        lr=                [2e-3,    2e-3,     2e-3, 2e-4,        2e-3],
        warmup_steps=      [400,     150,      150,  90,          400],
        warmup_start_lr=   [5e-4,    1e-4,     1e-4, 0.0,         5e-4],
        epochs=            [500,     300,      300,  300,         500],
        patience=          [50,      50,       50,   20,          50],
        frozen_epochs=     [None,    None,     200,  None,        None],
        reverse_epochs=    [None,    None,     None, None,        500],
        labeled_epochs=    [None,    None,     None, None,        300],
        synthetic_programs=[None,    None,     None, None,        0]),
    "cpu": dict(
        d_model=128, n_heads=4, layers=2, d_ff=512, dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
        batch_size=32, lr_schedule="linear", warmup_steps=300, warmup_start_lr=0.0, label_smoothing="0",
        lr=                [1e-3,    1e-3,     1e-3, 1e-4,        1e-3],
        epochs=            [120,     80,       80,   6,           12],
        patience=          [10,      10,       10,   3,           10],
        frozen_epochs=     [None,    None,     15,   None,        None],
        reverse_epochs=    [None,    None,     None, None,        60],
        labeled_epochs=    [None,    None,     None, None,        25],
        synthetic_programs=[None,    None,     None, None,        4000]),
    "smoke": dict(
        d_model=32, n_heads=2, layers=1, d_ff=64, dropout=0.1, attention_dropout=0.2, activation_dropout=0.2,
        batch_size=8, lr_schedule="linear", warmup_steps=5, warmup_start_lr=0.0, label_smoothing="0", patience=2,
        lr=                [1e-3,    1e-3,     1e-3, 1e-4,        1e-3],
        epochs=            [2,       2,        2,    2,           1],
        frozen_epochs=     [None,    None,     1,    None,        None],
        reverse_epochs=    [None,    None,     None, None,        2],
        labeled_epochs=    [None,    None,     None, None,        2],
        synthetic_programs=[None,    None,     None, None,        16]),
    "spoc paper": dict(
        d_model=256, n_heads=8, layers=5, d_ff=1024, dropout=0.4, attention_dropout=0.2, activation_dropout=0.2,
        batch_size=90, lr_schedule="inverse-sqrt", warmup_steps=4000, warmup_start_lr=1e-7, patience=150,
        lr=                [1e-3,    1e-3,     1e-3, 1e-4,        1e-3],
        epochs=            [150,     150,      150,  20,          150],
        label_smoothing=   ["0.2:100,0.1:25,0.05"] * 3 + ["0.05", "0.2:100,0.1:25,0.05"],
        frozen_epochs=     [None,    None,     100,  None,        None],
        reverse_epochs=    [None,    None,     None, None,        150],
        labeled_epochs=    [None,    None,     None, None,        150],
        synthetic_programs=[None,    None,     None, None,        0]),
    "spoc cpu": dict(
        d_model=128, n_heads=4, layers=2, d_ff=512, dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
        batch_size=32, lr_schedule="linear", warmup_steps=300, warmup_start_lr=0.0, label_smoothing="0", patience=3,
        lr=                [1e-3,    1e-3,     1e-3, 1e-4,        1e-3],
        epochs=            [6,       3,        4,    1,           2],
        frozen_epochs=     [None,    None,     2,    None,        None],
        reverse_epochs=    [None,    None,     None, None,        6],
        labeled_epochs=    [None,    None,     None, None,        3],
        synthetic_programs=[None,    None,     None, None,        4000]),
}
PRESETS["task cpu"] = {**PRESETS["cpu"], "patience": [30, 30, 30, 3, 30]}  # a task's loss, tiny and noisy, falls long


def preset_values(data: dict, known) -> dict:
    """--method's values in --preset's block (the data's own block where it has one) and every preset's, and where
    the run goes (runs/METHOD). Without --method (--help), standard's."""
    block = PRESETS.get(f"{data['dataset']} {known.preset}", PRESETS[known.preset])
    method = METHODS.index(known.method) if known.method in METHODS else 1
    values = {name: value[method] if isinstance(value, list) else value
              for name, value in {**PRESETS["every preset"], **block}.items()}
    if values["keep_by"] == "valid" and not data.get("valid_command"):
        values["keep_by"] = "loss"  # validity is judged only where the data names a command
    return {**values, "out": os.path.join("runs", METHODS[method])}


def parse_args(argv=None):
    parser = harness.ArgumentParser(prog="finetune.py", description=__doc__)
    parser.add_argument("--method", choices=METHODS, required=True, help="which predictor to train")
    parser.add_argument("--denoiser", help="the pre-trained Pi (standard, bart: their start; composed: frozen)")
    parser.add_argument("--labeled", type=int, help="the first N labeled pairs alone (0: all; Figure 4)")
    parser.add_argument("--keep-by", choices=("loss", "exact", "valid"), help="the epoch kept: the lowest val loss, "
                        "or the most of val decoded right or a task's command passes, ties broken by the loss")
    for name, text in (("frozen", "bart: the encoder's alone"), ("reverse", "backtranslation: the reverse model's"),
                       ("labeled", "backtranslation: the last, on the labeled pairs alone")):
        parser.add_argument(f"--{name}-epochs", type=int, help=text)
    parser.add_argument("--synthetic-programs", type=int, help="backtranslation: outputs given inputs (0: all)")
    composed = parser.add_argument_group("composed fine-tuning (Eq. 1, common.composed_loss)")
    composed.add_argument("--init", help="the f it starts from")
    composed.add_argument("--estimator", choices=("reinforce", "straight-through"), help="of the first term's gradient")
    composed.add_argument("--reinforce-baseline", choices=("batch", "none"), help="b: the other inputs' mean, or 0")
    for name, text in (("gamma", "the reward's floor"), ("composed-weight", "the first term's (0: the control)"),
                       ("lam", "lambda, the direct term's weight")):
        composed.add_argument(f"--{name}", type=float, help=text)
    composed.add_argument("--unlabeled-inputs", type=int, metavar="N", help="the first term also over N inputs with "
                          "no gold an epoch (DATA/unlabeled.src; 0: none)")
    parser.epilog = "Defaults: the preset's for the data and --method given (none given: standard's); a flag wins."
    args = harness.parse_training_args(parser, argv, preset_values)
    for name, value in preset_values(args.manifest, args).items():
        if value is None and getattr(args, name) is not None:
            parser.error(f"--{name.replace('_', '-')} does not apply to --method {args.method}")
    harness.check_ranges(parser, args, at_least_1="frozen_epochs reverse_epochs labeled_epochs",
                         not_negative="labeled synthetic_programs composed_weight lam unlabeled_inputs")
    if args.method == "bart" and not args.frozen_epochs < args.epochs:
        parser.error(f"bart: --frozen-epochs ({args.frozen_epochs}) must be below --epochs ({args.epochs})")
    if args.keep_by == "valid" and not args.manifest.get("valid_command"):
        parser.error(f"--keep-by valid: {args.data} names no validity command (make_task.py --valid-command)")
    return args


def main(argv=None):
    harness.run_main("finetune.py", finetune, parse_args(argv))


def load_pairs(data_dir: str, split: str, tokenizer) -> list[tuple[list[int], list[int]]]:
    sources = common.read_lines(os.path.join(data_dir, f"{split}.src"))
    targets = common.read_lines(os.path.join(data_dir, f"{split}.tgt"))
    if not sources or len(sources) != len(targets):
        raise common.UsageError(f"{data_dir}/{split}.src and .tgt must have the same, non-zero number of lines")
    return list(zip(tokenizer.encode(sources), tokenizer.encode(targets)))


def finetune(args):
    torch.manual_seed(args.seed)  # initialisation, dropout and sampling
    spm, spm_path = args.manifest["spm"], os.path.join(args.data, "spm.model")
    tokenizer = common.load_tokenizer(spm)
    train_pairs, val_pairs = load_pairs(args.data, "train", tokenizer), load_pairs(args.data, "val", tokenizer)
    if args.labeled > len(train_pairs):
        raise common.UsageError(f"--labeled {args.labeled}: {args.data} has only {len(train_pairs)} labeled pairs")
    train_pairs = train_pairs[:args.labeled or None]
    if args.method == "backtranslation" and not os.path.isfile(os.path.join(args.data, "unlabeled.tgt")):
        raise common.UsageError(f"backtranslation needs unlabeled outputs: missing {args.data}/unlabeled.tgt "
                                "(SPoC: make_spoc.py --unlabeled TSV)")
    # What evaluate.py needs to place the model in the paper's tables; deep: the 12-layer rows (twice the layers).
    extra = {"spm": spm, "role": "predictor", "method": args.method,
             "deep": args.layers >= 2 * preset_values(args.manifest, args)["layers"]}
    config = harness.transformer_config(args, tokenizer.get_piece_size())
    composed = g = None  # composed: Pi, frozen, and Eq. 1's settings; g: Pi's error detector
    if args.method in ("baseline", "backtranslation"):
        model = common.Transformer(config)
    elif args.method == "composed":  # f from --init, with this run's dropouts; Pi frozen: a fixed function of y'
        model, init = harness.load_model(args.init, spm, spm_path, "predictor", config, "--init")
        denoiser, pi = harness.load_model(args.denoiser, spm, spm_path, "denoiser", flag="--denoiser")
        if args.resume:
            check_same_denoiser(args, pi)
        device = harness.pick_device(args.device)
        harness.to_device(denoiser, device).eval().requires_grad_(False)
        if pi.get("error_detector"):  # Pi = (g, nu) leaves what g passes as it is (Appendix E): g reads text
            g = harness.error_detector(pi)
            if args.estimator != "reinforce":
                raise common.UsageError(f"--estimator {args.estimator}: this Pi passes what its error detector g "
                                        "accepts unchanged, which no gradient goes through; use --estimator reinforce")
        error_free = g and (lambda y: torch.tensor(g(tokenizer.decode(common.as_lists(y))), device=device))
        composed = dict(denoiser=denoiser, error_free=error_free, estimator=args.estimator,
                        baseline=args.reinforce_baseline, gamma=args.gamma, weight=args.composed_weight, lam=args.lam)
        extra.update(init_method=init.get("method"), denoiser={key: pi.get(key) for key in (
            "config", "model", "error_detector", "valid_data", "args", "corruption", "own_noise", "paper_table")})
    else:
        model, pi = harness.load_model(args.denoiser, spm, spm_path, "denoiser", config, "--denoiser")
    if args.method in ("standard", "bart", "composed"):  # Pi's noise and settings, for evaluate.py's tables
        extra.update({f"denoiser_{key}": pi.get(key) for key in ("corruption", "own_noise", "paper_table", "args")})
    inputs_alone = unlabeled_inputs(args, tokenizer) if args.unlabeled_inputs else lambda epoch: []
    harness.claim_output(args)  # every input checked: now the run may begin
    print(f"{args.method}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {len(train_pairs)} "
          f"labeled pairs, {args.dataset} preset {args.preset}\nsettings: {harness.settings_line(args)}",
          file=sys.stderr)
    if args.method == "backtranslation":
        state = backtranslate(model, tokenizer, train_pairs, val_pairs, args, extra)
    elif args.method == "bart":  # the encoder alone in frozen/, then every weight in --out
        for frozen in (model.decoder, model.decoder_norm):  # the encoder and the shared embeddings train, as the
            frozen.requires_grad_(False)                     # authors ran it (Appendix D)
        harness.train(model, args, extra, lambda epoch: train_pairs, val_pairs, "frozen", args.frozen_epochs)
        model.requires_grad_(True)
        model.load_state_dict(harness.load_checkpoint(os.path.join(args.out, "frozen", "model.pt"))["model"])
        state = harness.train(model, args, extra, lambda epoch: train_pairs, val_pairs,
                              epochs=args.epochs - args.frozen_epochs)
    else:
        val_share = judged_share(args, tokenizer, composed, g) if args.keep_by != "loss" else None
        state = harness.train(model, args, extra, lambda epoch: train_pairs + inputs_alone(epoch), val_pairs,
                              composed=composed, val_share=val_share)
    share = "" if state["best_share"] is None else f", val share {state['best_share']:.1%}" + (
        ": every output passes, so the loss chose among such epochs" if state["best_share"] == 1 else "")
    start = "" if state["best_epoch"] else f": the f it started from (--init), unchanged: no epoch it trained (of " \
        f"{state['epoch']}) beat it on val; more --epochs or --patience, or another --lr, may train one that does"
    print(f"best epoch {state['best_epoch']} (val loss {state['best_loss']:.4f}{share}) -> "
          f"{os.path.join(args.out, 'model.pt')}{start}")


def check_same_denoiser(args, checkpoint):
    """--resume of composed goes on against the Pi its checkpoints hold a copy of: refuse another written at
    --denoiser's path since (the settings a resume checks name Pi's path, not its weights)."""
    ran = harness.checkpoint_ran_with(args.out)
    held = harness.load_checkpoint(ran, needs=("denoiser",))["denoiser"]["model"] if ran else None
    given = checkpoint["model"]
    if held is not None and (held.keys() != given.keys() or not all(torch.equal(held[k], given[k]) for k in given)):
        raise common.UsageError(f"--resume: {args.denoiser} is not the Pi this run trained against (its checkpoints "
                                "hold a copy): resume with that Pi, or --overwrite to start over")


def unlabeled_inputs(args, tokenizer):
    """composed --unlabeled-inputs N: epoch e's N inputs with no gold output, lines (e - 1) N .. e N - 1 of
    DATA/unlabeled.src (from its start again after its end), as (ids, None) pairs: common.batches puts them in batches
    of their own."""
    path = os.path.join(args.data, "unlabeled.src")
    sources = tokenizer.encode(common.read_lines(path)) if os.path.isfile(path) else []
    if not sources:
        raise common.UsageError(f"--unlabeled-inputs needs inputs with no gold output, one a line, in {path} "
                                "(make_sanstype.py writes them)")
    n = args.unlabeled_inputs
    return lambda epoch: [(sources[i % len(sources)], None) for i in range((epoch - 1) * n, epoch * n)]


def judged_share(args, tokenizer, composed, g):
    """--keep-by exact or valid: a function of the model, the share of val decoded greedily as evaluate.py decodes it
    (composed: Pi(f(x)), through Pi's g) that is the gold output exactly, or that the task's validity command passes."""
    sources, gold = (common.read_lines(os.path.join(args.data, f"val.{side}")) for side in ("src", "tgt"))

    def share(model) -> float:
        outputs = common.translate(model, tokenizer, sources, args.batch_size)
        if composed:
            outputs = common.denoise(composed["denoiser"], tokenizer, outputs, args.batch_size, g)
        judged = [output == y for output, y in zip(outputs, gold)] if args.keep_by == "exact" else \
            harness.valid_outputs(args.data, outputs)
        return sum(judged) / len(judged)
    return share


def backtranslate(model, tokenizer, train_pairs, val_pairs, args, extra) -> dict:
    """Backtranslation (Sennrich et al., 2016; the paper's Appendix C), in three stages, each in its own folder under
    --out, so that --resume picks up where it stopped:
      1. reverse/: an output-to-input model learns from the labeled pairs, from scratch;
      2. it writes inputs for unlabeled outputs (synthetic.src / synthetic.tgt);
      3. mixed/: the predictor learns from labeled + synthetic pairs, from scratch, and is then fine-tuned on the
         labeled pairs alone (--out/model.pt)."""
    swap = lambda pairs: [(y, x) for x, y in pairs]  # noqa: E731
    print("backtranslation 1/3: outputs -> inputs on the labeled pairs", file=sys.stderr)
    reverse = common.Transformer(model.config)
    harness.train(reverse, args, {**extra, "method": "backtranslation-reverse"}, lambda epoch: swap(train_pairs),
                  swap(val_pairs), "reverse", args.reverse_epochs)
    reverse.load_state_dict(harness.load_checkpoint(os.path.join(args.out, "reverse", "model.pt"))["model"])

    synthetic_src, synthetic_tgt = os.path.join(args.out, "synthetic.src"), os.path.join(args.out, "synthetic.tgt")
    if not (args.resume and os.path.exists(synthetic_tgt)):
        outputs = common.read_lines(os.path.join(args.data, "unlabeled.tgt"))[:args.synthetic_programs or None]
        print(f"backtranslation 2/3: inputs for {len(outputs)} unlabeled outputs", file=sys.stderr)
        inputs = common.translate(reverse, tokenizer, outputs, args.batch_size,
                                  harness.Progress(len(outputs), "decoding").step)
        common.write_lines(synthetic_src, inputs)
        common.write_lines(synthetic_tgt, outputs)  # written last: its presence marks the stage done
    synthetic = list(zip(*(tokenizer.encode(common.read_lines(path)) for path in (synthetic_src, synthetic_tgt))))

    print(f"backtranslation 3/3: on {len(train_pairs)} labeled + {len(synthetic)} synthetic pairs, then on the "
          "labeled pairs alone", file=sys.stderr)
    harness.train(model, args, {**extra, "method": "backtranslation-mixed"}, lambda epoch: train_pairs + synthetic,
                  val_pairs, "mixed")
    model.load_state_dict(harness.load_checkpoint(os.path.join(args.out, "mixed", "model.pt"))["model"])
    return harness.train(model, args, extra, lambda epoch: train_pairs, val_pairs, epochs=args.labeled_epochs)


if __name__ == "__main__":
    main()
