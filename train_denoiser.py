"""Pre-train the denoiser Pi: a Transformer that maps a corrupted output back to the valid one (SansType: code).

    python train_denoiser.py                                  # cpu preset: data/sanstype -> runs/denoiser/model.pt
    python train_denoiser.py --corruption random --out runs/denoiser_random   # Table 5's random deletions
    python train_denoiser.py --preset paper                   # the paper's sizes and 50 epochs, for a GPU
    python train_denoiser.py --data data/spoc --out runs/spoc/denoiser   # SPoC (make_spoc.py): one-line edits, g
    python train_denoiser.py --data data/molecules --out runs/molecules/denoiser   # SMILES edits (make_molecules.py)
    python train_denoiser.py --resume                         # continue after an interrupt

Pi learns from outputs alone: the unlabeled ones and the labeled pairs' (an output without its input is unlabeled data
too), corrupted afresh every epoch by the data's own noise (its dataset.json names it) or --corruption's
(--pi-data authors: the unlabeled outputs alone, each corrupted once, as the authors made Pi's data). The epoch kept is
chosen on a fixed corrupted copy of val.tgt, on which Pi also reports, every --repair-every epochs, how its repairs
fare (report_repairs says what each number counts). On SPoC, Pi is Appendix E's pair (g, nu): the error detector g
(the compiler) passes a program that compiles, and only the others are repaired; on a task of one's own,
--error-detector valid makes its validity command g.
"""
import hashlib
import os
import random
import re
import sys
from collections.abc import Callable
from typing import NamedTuple

import torch

import common
import harness
import judge
import spoc

# Every value a denoiser trains with: a row per setting, a value per preset (SPoC's and the molecules' own where their
# data takes them; a task's are SansType's). A flag given wins. paper: the authors' fairseq command (Appendix C); cpu:
# sized for 2 cores, no attention or activation dropout (their masks cost a quarter of a step), the paper's dropout 0.4
# (Pi's validation loss then jumps between epochs, so it trains every epoch and keeps the best); smoke: the tests. SPoC
# (Appendix E): FLoRes's recipe, as many corrupted copies of each program as the authors' epochs hold.
COLUMNS = ("paper", "cpu", "smoke", "spoc paper", "spoc cpu", "spoc smoke", "molecules cpu")
PRESETS = dict(  #  SansType: paper   cpu         smoke       SPoC: paper          cpu         smoke       molecules
    d_model=           (256,          128,        32,         256,                 128,        32,         128),
    n_heads=           (2,            4,          2,          8,                   4,          2,          4),
    layers=            (3,            2,          1,          5,                   2,          1,          2),
    d_ff=              (1024,         512,        64,         1024,                512,        64,         512),
    dropout=           (0.4,          0.4,        0.1,        0.4,                 0.1,        0.1,        0.4),
    attention_dropout= (0.2,          0.0,        0.2,        0.2,                 0.0,        0.2,        0.0),
    activation_dropout=(0.2,          0.0,        0.2,        0.2,                 0.0,        0.2,        0.0),
    batch_size=        (176,          32,         8,          90,                  32,         8,          32),
    lr_schedule=       ("inverse-sqrt", "constant", "constant", "inverse-sqrt",    "constant", "constant", "constant"),
    warmup_steps=      (4000,         300,        5,          4000,                300,        5,          300),
    warmup_start_lr=   (1e-7,         0.0,        0.0,        1e-7,                0.0,        0.0,        0.0),
    epochs=            (50,           25,         2,          36,                  4,          2,          20),
    patience=          (50,           25,         2,          36,                  2,          2,          20),
    label_smoothing=   ("0",          "0",        "0",        "0.2:20,0.1:4,0.0",  "0",        "0",        "0"),
    repair_every=      (10,           1,          1,          6,                   1,          1,          1),
    unlabeled=         (0,            0,          64,         0,                   0,          0,          0),
    lr=(1e-3,) * 7, adam_betas=((0.9, 0.98),) * 7, weight_decay=(1e-4,) * 7, clip_norm=(0.0,) * 7,
    precision=("fp32",) * 7, seed=(0,) * 7, pi_data=("ours",) * 7, repair_programs=(100,) * 7,
    num_corruptions=(3,) * 7, deletion_probability=(0.15,) * 7, edit_rates=("0.03,0.03,0.03,0.03",) * 7)


class Noise(NamedTuple):
    corrupt: Callable  # (output, rng, args, tokenizer) -> the output corrupted
    paper_tables: dict  # dataset -> the paper's table a Pi of this noise is compared with (evaluate.py --table)
    reads: Callable = lambda output: True  # whether it can corrupt an output (refused before any work if not)


# The noises Pi learns to undo (common.py section 4; SPoC's in spoc.py). The paper has SansType with its code noise
# (Table 2) and random deletions (Table 5), and SPoC with its one-line noise (Table 2).
CORRUPTIONS = {
    "code": Noise(lambda y, rng, args, tokenizer: common.corrupt_code(y, rng, args.num_corruptions),
                  {"sanstype": "Table 2"}, common.is_program),
    "random": Noise(lambda y, rng, args, tokenizer: common.delete_random_words(y, rng, args.deletion_probability),
                    {"sanstype": "Table 5"}, common.is_program),
    "line": Noise(lambda y, rng, args, tokenizer: spoc.corrupt_one_line(y, rng), {"spoc": "Table 2"}),
    "smiles": Noise(lambda y, rng, args, tokenizer: common.corrupt_smiles(y, rng), {}),
    "edits": Noise(lambda y, rng, args, tokenizer: common.corrupt_pieces(
        y, rng, tokenizer, tuple(map(float, args.edit_rates.split(",")))), {}),
}


def preset_values(data: dict, known) -> dict:
    """--preset's column (the data's own where it has one), and the noise and error detector its data names."""
    column = f"{data['dataset']} {known.preset}"
    values = {name: row[COLUMNS.index(column if column in COLUMNS else known.preset)] for name, row in PRESETS.items()}
    return {**values, "corruption": data["corruption"], "error_detector": data.get("error_detector", "none")}


def parse_args(argv=None):
    parser = harness.ArgumentParser(prog="train_denoiser.py", description=__doc__)
    parser.add_argument("--corruption", choices=sorted(CORRUPTIONS), help="the noise Pi learns to undo (common.py "
                        "section 4): code, SansType's; random, Table 5's deletions; line, SPoC's; smiles; edits, any's")
    parser.add_argument("--num-corruptions", type=int, help="code: 1 to N statements noised, in 90%% of outputs")
    parser.add_argument("--deletion-probability", type=float, help="random: of each word")
    parser.add_argument("--edit-rates", help="edits: of deleting, inserting, substituting and swapping a piece")
    parser.add_argument("--unlabeled", type=int, help="the first N outputs alone, unlabeled then labeled (0: all)")
    parser.add_argument("--pi-data", choices=("ours", "authors"), help="ours: every output, corrupted afresh every "
                        "epoch; authors: the unlabeled alone, corrupted once")
    parser.add_argument("--error-detector", choices=("compile", "valid", "none"), help="g (Appendix E): Pi leaves "
                        "what g passes as it is; compile (SPoC's), valid (a task's validity command)")
    parser.add_argument("--repair-every", type=int, help="report Pi's repairs of val every N epochs (0: never)")
    parser.add_argument("--repair-programs", type=int, help="how many val outputs the report repairs")
    parser.epilog = "Defaults: the preset's for the data given; a flag given wins."
    args = harness.parse_training_args(parser, argv, preset_values, out="runs/denoiser")
    given = {word.split("=")[0] for word in (sys.argv[1:] if argv is None else argv)}
    for flag, noise in (("--num-corruptions", "code"), ("--deletion-probability", "random"), ("--edit-rates", "edits")):
        if flag in given and args.corruption != noise:
            parser.error(f"{flag} is for --corruption {noise}, not {args.corruption}")
    rates = args.edit_rates.split(",")
    if len(rates) != 4 or not all(re.fullmatch(r"0?\.\d+|0", rate) for rate in rates) or not any(map(float, rates)):
        parser.error(f"--edit-rates {args.edit_rates}: four probabilities within [0, 1), not all zero")
    harness.check_ranges(parser, args, at_least_1="num_corruptions repair_programs", not_negative="unlabeled "
                         "repair_every", positive="deletion_probability", probability="deletion_probability")
    if args.corruption not in CORRUPTIONS:  # (argparse checks a flag's choices, not a default from dataset.json)
        parser.error(f"{args.data}/dataset.json names the corruption {args.corruption!r}: not one of "
                     f"{', '.join(CORRUPTIONS)}")
    if args.error_detector == "compile" and args.dataset != "spoc":
        parser.error("--error-detector compile needs SPoC data (make_spoc.py)")
    if args.error_detector == "valid" and not args.manifest.get("valid_command"):
        parser.error(f"--error-detector valid needs a task folder with a validity command; {args.data} has none")
    return args


def main(argv=None):
    harness.run_main("train_denoiser.py", train, parse_args(argv))


def training_outputs(args) -> list[str]:
    """The outputs Pi learns from: the unlabeled ones, then the labeled pairs' (--pi-data authors: the unlabeled
    alone), the first --unlabeled of them."""
    path = os.path.join(args.data, "unlabeled.tgt")  # SPoC has none unless make_spoc.py --unlabeled wrote it
    outputs = common.read_lines(path) if os.path.exists(path) else []
    if args.pi_data == "authors" and not outputs:
        raise common.UsageError(f"--pi-data authors: {args.data} has no unlabeled.tgt to corrupt")
    if args.pi_data == "ours":
        outputs += common.read_lines(os.path.join(args.data, "train.tgt"))
    if args.unlabeled > len(outputs):
        raise common.UsageError(f"--unlabeled {args.unlabeled}: {args.data} has only {len(outputs)} outputs")
    return outputs[:args.unlabeled or None]


def corrupted_pairs(outputs: list[str], clean_ids: list, tokenizer, args, epoch: int) -> list[tuple]:
    """Epoch `epoch`'s pairs (corrupted ids, clean ids): each of training_outputs corrupted afresh by the noise (its
    draws the seed's and the epoch's; --pi-data authors: the same every epoch), then encoded. harness.train makes them
    an epoch ahead in a worker (harness.epochs_ahead) and batches them (common.epoch_batches: the seed's order)."""
    rng = random.Random(f"{args.seed}-epoch{epoch}" if args.pi_data == "ours" else f"{args.seed}-once")
    corrupt = CORRUPTIONS[args.corruption].corrupt
    return list(zip(tokenizer.encode([corrupt(y, rng, args, tokenizer) for y in outputs]), clean_ids))


def train(args):
    torch.manual_seed(args.seed)  # initialisation, dropout
    spm = args.manifest["spm"]
    tokenizer = common.load_tokenizer(spm)
    outputs, val = training_outputs(args), common.read_lines(os.path.join(args.data, "val.tgt"))
    if not outputs or not val:
        raise common.UsageError(f"no outputs to train or validate on in {args.data}")
    noise = CORRUPTIONS[args.corruption]
    unreadable = [output for output in outputs + val if not noise.reads(output)]
    if unreadable:
        raise common.UsageError(f"--corruption {args.corruption} cannot read {len(unreadable)} of the outputs in "
                                f"{args.data} (e.g. {unreadable[0][:40]!r}): it needs programs whose statements are "
                                "separated by ' $ '; --corruption edits reads any output")
    spoc_cases = spoc.read_cases(args.data, "val") if args.dataset == "spoc" and args.repair_every else None
    harness.claim_output(args, may_change=("repair_every", "repair_programs"))  # (how it reports)
    own = args.corruption == args.manifest["corruption"]  # the data's own noise, or another's
    extra = {"spm": spm, "role": "denoiser", "corruption": args.corruption, "own_noise": own,
             "paper_table": noise.paper_tables.get(args.dataset),
             "error_detector": None if args.error_detector == "none" else args.error_detector}
    if args.error_detector == "valid":  # g runs the task's command in its folder, wherever Pi is used later
        extra["valid_data"] = os.path.abspath(args.data)
    g = harness.error_detector(extra) if extra["error_detector"] else None

    # The corrupted val set, the same every epoch and run of a seed; its fingerprint says which it is (two Pis'
    # losses compare only where it is the same).
    val_rng = random.Random(f"{args.seed}-val")
    val_noisy = [noise.corrupt(y, val_rng, args, tokenizer) for y in val]
    extra["val_noise"] = hashlib.sha256("\n".join(val_noisy).encode()).hexdigest()[:8]
    clean_ids = tokenizer.encode(outputs)

    def report_repairs(model, epoch) -> str:
        """Every --repair-every epochs, how Pi repairs the first --repair-programs of val_noisy. Of those outputs:
          N changed by the noise      the corrupted output differs from the original;
          M of them repaired exactly  of those N, how many Pi's greedy repair makes the original (with g, Pi repairs
                                      only those g flags; the others stay as they are);
          X% of all exact             of all of them after repair, the unchanged ones included;
          Y% compile / valid          of all after repair: g++ compiles them (SansType), RDKit reads them (molecules),
                                      the task's validity command passes them (a task without one: none);
          Z% correct                  SPoC, in Y's place: of all after repair, those passing their hidden tests."""
        if not args.repair_every or epoch % args.repair_every:
            return ""
        noisy, clean = val_noisy[:args.repair_programs], val[:args.repair_programs]
        repaired = common.denoise(model, tokenizer, noisy, args.batch_size, g)
        changed = [n != c for n, c in zip(noisy, clean)]
        fixed = sum(r == c for r, c, was_changed in zip(repaired, clean, changed) if was_changed)
        exact = 100 * sum(r == c for r, c in zip(repaired, clean)) / len(clean)
        report = (f", repairs of {len(clean)} val outputs (noise {extra['val_noise']}): {sum(changed)} changed by the "
                  f"noise, {fixed} of them repaired exactly; {exact:.1f}% of all {len(clean)} exact after repair")
        if args.dataset == "spoc":
            verdicts = judge.judge_spoc_programs(repaired, spoc_cases[:len(repaired)])
            return report + f", {100 * sum(v['verdict'] == 'correct' for v in verdicts) / len(verdicts):.1f}% correct"
        if args.dataset == "molecules":
            valid = [common.canonical_smiles(smiles) is not None for smiles in repaired]
        elif args.dataset == "task":
            valid = harness.valid_outputs(args.data, repaired)
            if not valid:
                return report
        else:
            valid = judge.sanstype_compiles(repaired)
        return report + f", {100 * sum(valid) / len(valid):.1f}% " + ("compile" if args.dataset == "sanstype"
                                                                      else "valid")

    val_pairs = list(zip(tokenizer.encode(val_noisy), tokenizer.encode(val)))
    config = harness.transformer_config(args, tokenizer.get_piece_size())
    model = common.Transformer(config)
    print(f"denoiser: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {len(outputs)} outputs, "
          f"{args.corruption} corruption, error detector {args.error_detector}, {args.dataset} preset {args.preset}\n"
          f"settings: {harness.settings_line(args)}", file=sys.stderr)
    state = harness.train(model, args, extra, lambda epoch: corrupted_pairs(outputs, clean_ids, tokenizer, args, epoch),
                          val_pairs, made_ahead=True, report=report_repairs)
    kept = next(h for h in state["history"] if h["epoch"] == state["best_epoch"])
    print(f"best epoch {state['best_epoch']} (val loss {state['best_loss']:.4f}"
          f"{kept['note'] or ', val noise ' + extra['val_noise']}) -> {os.path.join(args.out, 'model.pt')}")


if __name__ == "__main__":
    main()
