"""Make the molecules dataset: chemical names to SMILES, from PubChem's identifier table, with RDKit as the judge.

    python make_molecules.py                          # data/molecules: 1000 labeled pairs, 500 per eval split
    python make_molecules.py --labeled 250 --out data/molecules_250
    python make_molecules.py --table tests/fixtures/molecules/identifiers.tsv --out /tmp/tiny --num-eval 20

Like code, molecules are outputs that must be valid (the paper's introduction). The table is PubChem's (public domain)
as the `chemicals` package ships it (MIT; `pip install chemicals==1.5.2`, or --table FILE). Kept: single molecules
with a SMILES of at most 60 characters and a name of at most 80, each once, in RDKit's canonical form.

Writes, one molecule per line and the same line number across a split's files:
    {train,val,test,ood}.src   a name       'methyl 4-oxidanylbenzoate'
    {train,val,test,ood}.tgt   its SMILES   'COC(=O)c1ccc(O)cc1'
    unlabeled.tgt              the SMILES of every other molecule, to pre-train the denoiser
    spm.model                  sentencepiece BPE, one vocabulary for train names + all training SMILES
    dataset.json               {"dataset": "molecules", "noise": {"rejected": ..., "another_molecule": ..., ...}}
train, val, test: PubChem's IUPAC names; ood: other molecules named by their other name most like it (a rephrasing,
`methyl 4-hydroxybenzoate`), a style the labeled pairs never use. "noise": what RDKit makes of the denoiser's noise.
"""
import difflib
import importlib.util
import os
import random
import re

import common
import harness

TABLE = os.path.join("Identifiers", "chemical identifiers pubchem large.tsv")  # inside the chemicals package
SMILES, IUPAC_NAME, FIRST_OTHER_NAME = 4, 7, 8  # the table's columns: CID, CAS, formula, weight, SMILES, InChI, ...
# A synonym is another name of the molecule only if it reads as one: no registry number (CAS 50-00-0, NSC 1234,
# catalogue codes like stk366316), no inverted index form ("adenine, 9-ethyl-") or dotted stereo words (".beta.").
CODE = re.compile(r"[a-z]{2,}[ -]?\d{3,}|\d+-\d\d-\d\b|^[\d ()-]+$")
NAME = re.compile(r"[a-z0-9,()\[\]'+\- ]{3,80}")


def read_table(path: str | None) -> list[list[str]]:
    """The identifier table's rows: --table's, or the one the chemicals package ships."""
    if path is None:
        spec = importlib.util.find_spec("chemicals")  # (found without importing it: it would load scipy and pandas)
        if spec is None:
            raise common.UsageError("PubChem's table comes with the chemicals package: pip install chemicals==1.5.2 "
                                    "(or give --table FILE)")
        path = os.path.join(spec.submodule_search_locations[0], TABLE)
    rows = [line.split("\t") for line in common.read_lines(path)]
    if not rows or min(map(len, rows)) <= IUPAC_NAME:
        raise common.UsageError(f"{path} is not PubChem's identifier table (CID, CAS, formula, weight, SMILES, "
                                "InChI, InChIKey, IUPAC name, synonyms, tab-separated)")
    return rows


def usable_molecules(rows: list[list[str]]) -> list[tuple[str, str, list[str]]]:
    """(canonical SMILES, IUPAC name, other names) of each single molecule within the limits that RDKit reads."""
    molecules, seen = [], set()
    for row in rows:
        smiles, name = row[SMILES], row[IUPAC_NAME]
        if not smiles or not name or "." in smiles or len(smiles) > 60 or len(name) > 80:
            continue
        canonical = common.canonical_smiles(smiles)
        if canonical and canonical not in seen and len(canonical) <= 60:  # once: isomers meet (no stereochemistry)
            seen.add(canonical)
            molecules.append((canonical, name, row[FIRST_OTHER_NAME:]))
    return molecules


def rephrased_name(name: str, others: list[str]) -> str | None:
    """The other name most like `name` (at least half alike: a rephrasing, not a trade name), or None."""
    def alike(other):
        return difflib.SequenceMatcher(None, name, other).ratio()
    candidates = [other for other in others if NAME.fullmatch(other) and re.search("[a-z]{3}", other)
                  and not CODE.search(other) and ", " not in other and "." not in other
                  and other.replace("-", "").replace(" ", "") != name.replace("-", "").replace(" ", "")]
    best = max(candidates, key=alike, default=None)
    return best if best is not None and alike(best) >= 0.5 else None


def measure_noise(smiles: list[str], seed: int) -> dict:
    """How the denoiser's noise leaves these SMILES: the shares RDKit rejects, that are another molecule, the same."""
    rng, counts = random.Random(f"molecules-{seed}-noise"), {"rejected": 0, "another_molecule": 0, "same": 0}
    for clean in smiles:
        noisy = common.canonical_smiles(common.corrupt_smiles(clean, rng))
        counts["rejected" if noisy is None else "same" if noisy == clean else "another_molecule"] += 1
    return {kind: round(n / len(smiles), 4) for kind, n in counts.items()}


def parse_args(argv):
    parser = harness.ArgumentParser(prog="make_molecules.py", description=__doc__)
    add = parser.add_argument
    add("--table", help="PubChem's identifier table (default: the one the chemicals package ships)")
    add("--out", default="data/molecules", help="output directory")
    add("--overwrite", action="store_true", help="replace --out's data (runs trained on it will no longer match it)")
    add("--labeled", type=int, default=1000, help="name-SMILES pairs in train")
    add("--num-eval", type=int, default=500, help="molecules in each of val, test, ood")
    add("--unlabeled", type=int, default=0, help="SMILES for the denoiser (0: every other molecule)")
    add("--seed", type=int, default=0, help="same seed, same bytes")
    add("--vocab-size", type=int, default=800, help="joined sentencepiece BPE vocabulary")
    args = parser.parse_args(argv)
    harness.check_ranges(parser, args, at_least_1="labeled num_eval vocab_size", not_negative="unlabeled")
    return args


def main(argv=None):
    harness.run_main("make_molecules.py", make_molecules, parse_args(argv))


def make_molecules(args):
    harness.claim_data_folder(args.out, args.overwrite)
    common.canonical_smiles("C")  # RDKit is there, or one line saying how to install it
    rows = read_table(args.table)
    molecules = usable_molecules(rows)
    random.Random(f"molecules-{args.seed}").shuffle(molecules)
    print(f"{len(rows)} rows, {len(molecules)} single molecules within the limits")
    # ood first: the first molecules (in shuffled order) with a rephrased name; then val, test, train from the rest
    ood, rest = [], []
    for smiles, name, others in molecules:
        rephrased = rephrased_name(name, others) if len(ood) < args.num_eval else None
        (ood if rephrased else rest).append((smiles, rephrased or name))
    n_eval, needed = args.num_eval, args.labeled + 2 * args.num_eval
    if len(ood) < n_eval or len(rest) < needed:
        raise common.UsageError(f"the table holds {len(molecules)} usable molecules ({len(ood)} with a rephrased "
                                f"name): too few for --labeled {args.labeled} and --num-eval {n_eval}")
    splits = {"ood": ood, "val": rest[:n_eval], "test": rest[n_eval:2 * n_eval], "train": rest[2 * n_eval:needed]}
    unlabeled = [smiles for smiles, _ in rest[needed:]][:args.unlabeled or None]
    print("names: " + ", ".join(f"{split} {len(pairs)}" for split, pairs in splits.items()) +
          f"; unlabeled SMILES {len(unlabeled)}")
    spm_model = common.train_tokenizer([name for _, name in splits["train"]] +
                                       [smiles for smiles, _ in splits["train"]] + unlabeled, args.vocab_size)
    noise = measure_noise(unlabeled[:2000], args.seed)
    print(f"the denoiser's SMILES noise on {min(2000, len(unlabeled))} unlabeled molecules: "
          + ", ".join(f"{100 * share:.1f}% {kind.replace('_', ' ')}" for kind, share in noise.items()))
    os.makedirs(args.out, exist_ok=True)
    for split, pairs in splits.items():
        common.write_lines(os.path.join(args.out, f"{split}.src"), [name for _, name in pairs])
        common.write_lines(os.path.join(args.out, f"{split}.tgt"), [smiles for smiles, _ in pairs])
    common.write_lines(os.path.join(args.out, "unlabeled.tgt"), unlabeled)
    with open(os.path.join(args.out, "spm.model"), "wb") as f:
        f.write(spm_model)
    harness.write_manifest(args.out, "molecules", corruption="smiles", seed=args.seed, noise=noise,
                           table=args.table or "chemicals 1.5.2: " + TABLE)
    print(f"wrote {args.out}/{{train,val,test,ood}}.{{src,tgt}}, unlabeled.tgt, spm.model, dataset.json")


if __name__ == "__main__":
    main()
