"""Make the molecules dataset: chemical names to SMILES, from PubChem's identifier table, with RDKit as the judge.

    python make_molecules.py                          # data/molecules: 1000 labeled pairs, 500 per eval split
    python make_molecules.py --labeled 250 --out data/molecules_250
    python make_molecules.py --table tests/fixtures/molecules/identifiers.tsv --out /tmp/tiny --num-eval 20

The paper's introduction names molecule generation beside code as a task whose outputs must be valid; this is such a
task on real data nobody here wrote. The table is PubChem's (public domain), as the `chemicals` package ships it
(MIT; `pip install chemicals==1.5.2` is needed only here, or --table FILE): a row per compound with its SMILES,
PubChem's computed IUPAC name and other names (synonyms). Kept: single molecules (no salts or mixtures) with a
SMILES of at most 60 characters and a name of at most 80, each SMILES in RDKit's canonical form, each molecule once.

Writes, one molecule per line and the same line number across a split's files:
    {train,val,test,ood}.src   a name       'methyl 4-oxidanylbenzoate'
    {train,val,test,ood}.tgt   its SMILES   'COC(=O)c1ccc(O)cc1'
    unlabeled.tgt              the SMILES of every other molecule, to pre-train the denoiser
    spm.model                  sentencepiece BPE, one vocabulary for train names + all training SMILES
train, val and test name each molecule by PubChem's IUPAC name, in PubChem's systematic style (`oxidanyl`,
`ethanoate`). ood holds other molecules of the same table, each named by the synonym closest to its IUPAC name
among those that differ from it (a rephrasing at least half alike, `methyl 4-hydroxybenzoate`, not a trade name): the
same kind of molecules in a naming style the labeled pairs never use, as SansType's ood rephrases its pseudocode.
Its manifest records how often the denoiser's SMILES noise (common.corrupt_smiles) gives a string RDKit rejects,
another molecule, or the same one.
"""
import difflib
import importlib.util
import os
import random
import re

import common

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
    """(canonical SMILES, IUPAC name, other names) of every single molecule within the length limits that RDKit
    reads, each molecule once (the table's SMILES carry no stereochemistry, so isomers meet)."""
    molecules, seen = [], set()
    for row in rows:
        smiles, name = row[SMILES], row[IUPAC_NAME]
        if not smiles or not name or "." in smiles or len(smiles) > 60 or len(name) > 80:
            continue
        canonical = common.canonical_smiles(smiles)
        if canonical and canonical not in seen and len(canonical) <= 60:
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
    parser = common.ArgumentParser(prog="make_molecules.py", description=__doc__)
    parser.add_argument("--table", help="PubChem's identifier table (default: the one the chemicals package ships)")
    parser.add_argument("--out", default="data/molecules", help="output directory")
    parser.add_argument("--overwrite", action="store_true", help="replace the data --out holds (runs trained on it "
                        "will no longer match it)")
    parser.add_argument("--labeled", type=int, default=1000, help="name-SMILES pairs in train")
    parser.add_argument("--num-eval", type=int, default=500, help="molecules in each of val, test, ood")
    parser.add_argument("--unlabeled", type=int, default=0, help="SMILES for the denoiser (0: every other molecule)")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same bytes")
    parser.add_argument("--vocab-size", type=int, default=800, help="joined sentencepiece BPE vocabulary")
    args = parser.parse_args(argv)
    common.check_ranges(parser, args, at_least_1="labeled num_eval vocab_size", not_negative="unlabeled")
    return args


def main(argv=None):
    common.run_main("make_molecules.py", make_molecules, parse_args(argv))


def make_molecules(args):
    common.claim_data_folder(args.out, args.overwrite)
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
    unlabeled = [smiles for smiles, _ in rest[needed:]]
    unlabeled = unlabeled[:args.unlabeled] if args.unlabeled else unlabeled
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
    common.write_manifest(args.out, "molecules", seed=args.seed, table=args.table or "chemicals 1.5.2: " + TABLE,
                          noise=noise)
    print(f"wrote {args.out}/{{train,val,test,ood}}.{{src,tgt}}, unlabeled.tgt, spm.model, dataset.json")


if __name__ == "__main__":
    main()
