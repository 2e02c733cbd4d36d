"""Pre-train the denoiser Pi: a Transformer that maps a corrupted output back to the valid one (SansType: code).

    python train_denoiser.py                                  # cpu preset: data/sanstype -> runs/denoiser/model.pt
    python train_denoiser.py --corruption random --out runs/denoiser_random   # Table 5's random deletions
    python train_denoiser.py --preset paper                   # the paper's sizes and 50 epochs, for a GPU
    python train_denoiser.py --data data/spoc --out runs/spoc/denoiser   # SPoC (make_spoc.py): one-line edits, g
    python train_denoiser.py --data data/molecules --out runs/molecules/denoiser   # SMILES edits (make_molecules.py)
    python train_denoiser.py --resume                         # continue after an interrupt

Pi learns only from outputs: the unlabeled programs plus the labeled training code (code without its pseudocode is
unlabeled output data too). Every epoch corrupts them afresh (--pi-data authors: the unlabeled programs alone, each
corrupted once, as the authors made Pi's data); the epoch kept is chosen on a fixed corrupted copy of val.tgt (its
noise named by a fingerprint, so that two Pis' losses compare), on which it also reports, every --repair-every
epochs, how its repairs fare (the docstring of report_repairs, in train, says what each number counts). On SPoC, Pi
is Appendix E's pair (g, nu): the error detector g (the compiler) passes a program that compiles, and only the others
are repaired; on a task of one's own, --error-detector valid makes its validity command g.
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
import judge
import spoc

# The values a denoiser trains with: a row per setting, a value per preset (common.COLUMNS); the noise's own are its
# flags' defaults (CORRUPTIONS). The model's size is common.ARCHITECTURE's, which the predictors share; AdamW's betas,
# weight decay, clipping, precision and seed are common.EVERY_PRESET's (both at the top of common.py's section 6). A
# flag given on the command line wins; a run's settings line lists every value a flag has. paper: the authors' fairseq
# command (Appendix C), ~16000 tokens (about 176 programs) an update, inverse-sqrt. cpu, 75 minutes on 2 cores: ~16000
# updates of 32 programs (the paper: ~6000 of 176), no attention or activation dropout (their random masks cost a
# quarter of a step). With the paper's dropout 0.4, standard fine-tuning learns more from Pi than with 0.1; Pi's
# validation loss then jumps between epochs, so it trains all of them and keeps the best (EXPERIMENTS.md, "the regime on
# two CPU cores"). SPoC's paper (Appendix E): FLoRes's recipe; the authors' 9 epochs hold every program 4 times (clean
# once, one corrupted line 3 times), 36 of ours, which corrupt 3 programs in 4 afresh every epoch. SPoC's cpu: sized for
# the full release's 11355 programs.
# pi_data: ours, the unlabeled and the labeled code corrupted afresh every epoch; authors, the unlabeled programs
# alone, each corrupted once with the run's seed and the same pairs every epoch, as the authors made Pi's data (a
# suspect for standard's gap to the paper, measured in EXPERIMENTS.md, "Pi's data": off until it is shown to help).
#                       SansType: paper  cpu         smoke        SPoC: paper          cpu
PRESETS = dict(
    dropout=           (0.4,             0.4,        0.1,         0.4,                 0.1),
    attention_dropout= (0.2,             0.0,        0.2,         0.2,                 0.0),
    activation_dropout=(0.2,             0.0,        0.2,         0.2,                 0.0),
    batch_size=        (176,             32,         8,           90,                  32),
    lr=                (1e-3,            1e-3,       1e-3,        1e-3,                1e-3),
    lr_schedule=       ("inverse-sqrt",  "constant", "constant",  "inverse-sqrt",      "constant"),
    warmup_steps=      (4000,            300,        5,           4000,                300),
    warmup_start_lr=   (1e-7,            0.0,        0.0,         1e-7,                0.0),
    epochs=            (50,              25,         2,           36,                  4),
    patience=          (50,              25,         2,           36,                  2),
    label_smoothing=   ("0",             "0",        "0",         "0.2:20,0.1:4,0.0",  "0"),
    repair_every=      (10,              1,          1,           6,                   1),
    unlabeled=         (0,               0,          64,          0,                   0),
    pi_data=           ("ours",          "ours",     "ours",      "ours",              "ours"),
)
# Each dataset's noise (molecules: SMILES edits; a task of one's own, make_task.py: the edits that need no knowledge
# of it) and SPoC's error detector g; then where a dataset departs from its column: SPoC's test files hold a dozen
# programs; on 2 cores Pi trains 20 epochs of the ~47000 SMILES (about 40 minutes) and keeps its best (its validation
# loss is still falling then, as SansType's Pi's).
DATASET_CHANGES = {"sanstype": dict(corruption="code", error_detector="none"),
                   "spoc": dict(corruption="line", error_detector="compile"),
                   "molecules": dict(corruption="smiles", error_detector="none"),
                   "task": dict(corruption="edits", error_detector="none"),
                   ("spoc", "smoke"): dict(unlabeled=0), ("molecules", "cpu"): dict(epochs=20, patience=20)}
# The noises Pi learns to undo, each registered here once: what it does to an output, what --help says of it, the
# paper's table its rows are compared with, by dataset (a checkpoint carries it to evaluate.py's table), and its
# parameter, if it has one (a flag of its own, --help's "NAME: ..." line, its default and what a value must be). The
# paper has SansType with its code noise (Table 2) and with random deletions (Table 5), and SPoC with its one-line noise
# (Table 2): any other pairing, e.g. a SansType Pi of SPoC's noise, has no paper numbers beside it (evaluate.py needs no
# change for a new noise). A noise that is a dataset's own is also its DATASET_CHANGES entry above.
class Corruption(NamedTuple):
    corrupt: Callable  # (output, rng, args, tokenizer) -> the output corrupted
    help: str
    paper_tables: dict  # dataset -> the paper's table its rows are compared with
    parameter: tuple = ()  # (flag, type, default, help, problem): args holds its value under the flag's name;
    #                        problem(value) says what is wrong with a value (a one-line refusal), or None
    reads: Callable = lambda output: True  # whether it can corrupt an output (refused before any work if not)


def edit_rates_problem(rates: str) -> str | None:
    """--edit-rates: four probabilities within [0, 1), not all zero (each output would draw no edit 100 times, then
    lose its first piece)."""
    if len(rates.split(",")) != 4 or not all(re.fullmatch(r"0?\.\d+|0", rate) for rate in rates.split(",")):
        return "four probabilities within [0, 1), for delete, insert, substitute and swap"
    return "all zero, the noise could never change an output" if not any(map(float, rates.split(","))) else None


CORRUPTIONS = {
    "code": Corruption(lambda code, rng, args, tokenizer: common.corrupt_code(code, rng, args.num_corruptions),
                       "SansType's: Appendix C's statement-level type, stream and print edits", {"sanstype": "Table 2"},
                       ("--num-corruptions", int, 3, "in 90%% of programs, 1 to N statement positions drawn (with "
                                                     "replacement), each noised",
                        lambda n: None if n >= 1 else "must be at least 1"), common.is_program),
    "random": Corruption(lambda code, rng, args, tokenizer: common.delete_random_words(code, rng,
                                                                                       args.deletion_probability),
                         "drop each word of a statement", {"sanstype": "Table 5"},
                         ("--deletion-probability", float, 0.15, "of each word",  # (0: it could never change one)
                          lambda p: None if 0 < p <= 1 else "must be within (0, 1]"), common.is_program),
    "line": Corruption(lambda code, rng, args, tokenizer: spoc.corrupt_one_line(code, rng),
                       "SPoC's: Appendix E's one-line insertion, deletion or replacement of a keyword, identifier or "
                       "symbol", {"spoc": "Table 2"}),
    "smiles": Corruption(lambda smiles, rng, args, tokenizer: common.corrupt_smiles(smiles, rng),
                         "molecules': 1-2 edits of an atom, ring digit, branch, bond or fragment", {}),
    "edits": Corruption(lambda text, rng, args, tokenizer: common.corrupt_pieces(
        text, rng, tokenizer, tuple(map(float, args.edit_rates.split(",")))),
        "a task of your own (make_task.py): at least one piece deleted, inserted, substituted or swapped (a tenth "
        "left as they are)", {},
        ("--edit-rates", str, "0.03,0.03,0.03,0.03", "the probabilities of deleting, inserting, substituting and "
                                                     "swapping, per piece of the output: about one edit in 8 pieces",
         edit_rates_problem)),
}


def parse_args(argv=None):
    parser = common.ArgumentParser(prog="train_denoiser.py", description=__doc__)
    parser.add_argument("--data", default="data/sanstype", help=f"a folder {common.DATA_MAKERS} wrote")
    parser.add_argument("--out", default="runs/denoiser", help="output folder")
    parser.add_argument("--corruption", choices=sorted(CORRUPTIONS), help="; ".join(
        f"{name}: {corruption.help}" for name, corruption in CORRUPTIONS.items()))
    noise_parameters = {name: corruption.parameter for name, corruption in CORRUPTIONS.items() if corruption.parameter}
    for name, (flag, kind, default, text, _) in noise_parameters.items():
        parser.add_argument(flag, type=kind, help=f"{name}: {text} (default: {default})")
    parser.add_argument("--unlabeled", type=int, help="use only the first N outputs (the unlabeled ones, "
                        "then the labeled pairs'; 0: all)")
    parser.add_argument("--pi-data", choices=("ours", "authors"),
                        help="ours: the unlabeled and the labeled outputs, corrupted afresh every epoch; authors: the "
                             "unlabeled outputs alone, each corrupted once (the run's seed), the same every epoch")
    parser.add_argument("--error-detector", choices=("compile", "valid", "none"),
                        help="Appendix E's g, stored with Pi: Pi leaves an output g passes as it is; compile (SPoC's): "
                             "g passes programs that compile; valid (a task folder's): outputs its validity command "
                             "accepts; none: Pi repairs every output")
    parser.add_argument("--repair-every", type=int, help="judge val repairs every N epochs (0: never; on a "
                        "GPU the report costs as much as several epochs: the paper preset's is every 10th)")
    parser.add_argument("--repair-programs", type=int, default=100, help="how many val outputs to repair")
    common.add_training_args(parser)
    args = common.parse_training_args(parser, argv, preset_values, lambda known: known.out)
    for corruption, (flag, _, default, _, problem) in noise_parameters.items():  # its value, or its default
        name = flag[2:].replace("-", "_")
        if getattr(args, name) != parser.get_default(name) and args.corruption != corruption:  # given, for another
            parser.error(f"{flag} is for --corruption {corruption}, not {args.corruption}")
        value = default if getattr(args, name) is None else getattr(args, name)
        if problem(value):
            parser.error(f"{flag} {value}: {problem(value)}")
        setattr(args, name, value)
    if args.error_detector == "compile" and args.dataset != "spoc":
        parser.error("--error-detector compile needs SPoC data (make_spoc.py)")
    if args.error_detector == "valid" and not common.read_manifest(args.data).get("valid_command"):
        parser.error(f"--error-detector valid needs a task folder with a validity command (make_task.py "
                     f"--valid-command); {args.data} has none")
    common.check_ranges(parser, args, at_least_1="repair_programs", not_negative="unlabeled repair_every")
    return args


def preset_values(dataset: str, known) -> dict:
    """What Pi trains with unless a flag says otherwise: its column of PRESETS, with its dataset's changes."""
    return {**common.column(PRESETS, dataset, known.preset), **DATASET_CHANGES[dataset],
            **DATASET_CHANGES.get((dataset, known.preset), {})}


def main(argv=None):
    common.run_main("train_denoiser.py", train, parse_args(argv), on_interrupt=common.RESUME_HINT)


def training_programs(args) -> list[str]:
    """The outputs Pi learns from: the unlabeled ones, then the labeled pairs' (--pi-data authors: the unlabeled alone),
    the first --unlabeled of them."""
    unlabeled = os.path.join(args.data, "unlabeled.tgt")  # SPoC has none unless make_spoc.py --unlabeled wrote it
    programs = common.read_lines(unlabeled) if os.path.exists(unlabeled) else []
    if args.pi_data == "authors" and not programs:
        raise common.UsageError(f"--pi-data authors: {args.data} has no unlabeled.tgt to corrupt")
    if args.pi_data == "ours":  # the labeled pairs' code is unlabeled output data too
        programs += common.read_lines(os.path.join(args.data, "train.tgt"))
    if args.unlabeled > len(programs):
        raise common.UsageError(f"--unlabeled {args.unlabeled}: {args.data} has only {len(programs)} programs")
    return programs[:args.unlabeled] if args.unlabeled else programs


def corrupted_pairs(programs: list[str], clean_ids: list, tokenizer, args, epoch: int) -> list[tuple]:
    """Epoch `epoch`'s training pairs (corrupted ids, clean ids): every program corrupted afresh, the same for a
    seed's epoch whatever else runs (common.fit makes them in a worker process); --pi-data authors: the same
    corruptions every epoch."""
    rng = random.Random(f"{args.seed}-epoch{epoch}" if args.pi_data == "ours" else f"{args.seed}-once")
    corrupt = CORRUPTIONS[args.corruption].corrupt
    return list(zip(tokenizer.encode([corrupt(code, rng, args, tokenizer) for code in programs]), clean_ids))


def train(args):
    torch.manual_seed(args.seed)  # initialisation, dropout and sampling
    spm = common.read_tokenizer_bytes(args.data)
    tokenizer = common.load_tokenizer(spm)
    programs = training_programs(args)
    val = common.read_lines(os.path.join(args.data, "val.tgt"))
    if not programs or not val:
        raise common.UsageError(f"no programs to train or validate on in {args.data}")
    unreadable = [output for output in programs + val if not CORRUPTIONS[args.corruption].reads(output)]
    if unreadable:
        raise common.UsageError(f"--corruption {args.corruption} cannot read {len(unreadable)} of the outputs in "
                                f"{args.data} (e.g. {unreadable[0][:40]!r}): it needs programs whose statements are "
                                "separated by ' $ '; --corruption edits reads any output")
    common.claim_output(args)
    corrupt = CORRUPTIONS[args.corruption].corrupt
    spoc_cases = spoc.read_cases(args.data, "val") if args.dataset == "spoc" else None

    own = args.corruption == DATASET_CHANGES[args.dataset]["corruption"]  # the dataset's noise, or another's
    paper_table = CORRUPTIONS[args.corruption].paper_tables.get(args.dataset)
    detector = None if args.error_detector == "none" else args.error_detector
    extra = {"spm": spm, "role": "denoiser", "corruption": args.corruption, "own_noise": own,
             "paper_table": paper_table, "error_detector": detector}
    if detector == "valid":  # g runs the task's command in its folder, wherever Pi is used later
        extra["valid_data"] = os.path.abspath(args.data)
    error_free = common.error_detector(extra)  # g, as evaluate.py will read it back from the checkpoint

    clean_ids = tokenizer.encode(programs)
    val_rng = random.Random(f"{args.seed}-val")  # the same corrupted val set every epoch and every run
    val_noisy = [corrupt(code, val_rng, args, tokenizer) for code in val]
    val_pairs = list(zip(tokenizer.encode(val_noisy), tokenizer.encode(val)))
    # Which corrupted val set the losses and repairs are of: two Pis' numbers compare only where this is the same
    # (a seed, or a change to the noise, gives another).
    extra["val_noise"] = hashlib.sha256("\n".join(val_noisy).encode()).hexdigest()[:8]

    def report_repairs(model, epoch):
        """The repair report that ends an epoch's line, every --repair-every epochs, of the first --repair-programs
        outputs of val.tgt, corrupted once for the run (val_noisy; "noise" is the fingerprint of all of val_noisy).
        Each number counts those outputs:
          N changed by the noise      the corrupted output differs from the original (a noise leaves some as they are);
          M of them repaired exactly  of those N, Pi's greedy repair is the original (with g: what g passes is left
                                      as it is, the rest repaired);
          X% of all exact             of all of them after repair, the unchanged ones included (a Pi that copies
                                      scores their share);
          Y% compile / valid          of all of them after repair, those that compile (run on an empty input: a crash
                                      or a run's time-out counts as compiling, a compile's time-out does not), that
                                      RDKit parses (molecules) or that the task's validity command passes (a task; no
                                      number without a command); SPoC instead: Z% correct, every hidden test of its
                                      problem passed.
        The run's last line quotes the kept epoch's report, if it made one (train's last lines, below)."""
        if not args.repair_every or epoch % args.repair_every:
            return ""
        noisy, clean = val_noisy[:args.repair_programs], val[:args.repair_programs]
        rows = common.validation_batch_size(val_pairs, args.batch_size, common.pick_device(args.device))  # speed only
        repaired = common.denoise(model, tokenizer, noisy, rows, error_free)
        changed = [n != c for n, c in zip(noisy, clean)]  # what the noise left alone is no repair
        fixed = sum(r == c for r, c, was_changed in zip(repaired, clean, changed) if was_changed)
        kind = {"molecules": "SMILES", "task": "outputs"}.get(args.dataset, "programs")
        exact = 100 * sum(r == c for r, c in zip(repaired, clean)) / len(clean)
        report = (f", repairs of {len(clean)} val {kind} (noise {extra['val_noise']}): {sum(changed)} changed by "
                  f"the noise, {fixed} of them repaired exactly; {exact:.1f}% of all {len(clean)} exact after repair")
        if spoc_cases:  # SPoC: the repairs judged on their problems' hidden test cases
            verdicts = judge.judge_spoc_programs(repaired, spoc_cases[:len(repaired)])
            return report + f", {100 * sum(v['verdict'] == 'correct' for v in verdicts) / len(verdicts):.1f}% correct"
        if args.dataset == "molecules":  # RDKit, the judge: a repair is valid where it parses
            valid = [common.canonical_smiles(smiles) is not None for smiles in repaired]
        elif args.dataset == "task":  # its own validity command, if it has one
            valid = common.valid_outputs(args.data, repaired)
            if not valid:
                return report
        else:
            valid = [r.status != "compile_error" for r in judge.run_programs(repaired, [""] * len(repaired))]
        return report + f", {100 * sum(valid) / len(valid):.1f}% " + ("compile" if kind == "programs" else "valid")

    model = common.Transformer(common.config_from_args(args, tokenizer.get_piece_size()))
    print(f"denoiser: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{len(programs)} programs, {args.corruption} corruption, error detector {args.error_detector}, "
          f"{args.dataset} preset {args.preset}\nsettings: {common.settings(args)}", file=sys.stderr)
    state = common.fit(model, lambda epoch: corrupted_pairs(programs, clean_ids, tokenizer, args, epoch), val_pairs,
                       args, args.out, extra, on_epoch=report_repairs)
    kept = next(h for h in state["history"] if h["epoch"] == state["best_epoch"])  # its report, if it made one
    report = kept.get("notes") or f", val noise {extra['val_noise']}"
    print(f"best epoch {state['best_epoch']} (val loss {state['best_loss']:.4f}{report}) -> "
          f"{os.path.join(args.out, 'model.pt')}")


if __name__ == "__main__":
    main()
