"""Generate SansType, the synthetic pseudocode-to-code dataset of the paper (Appendix C), as the authors ran it.

    python make_sanstype.py                     # data/sanstype: 1000 labeled, 20000 unlabeled, 500 per eval split
    python make_sanstype.py --out /tmp/tiny --labeled 30 --unlabeled 100 --num-eval 20 --vocab-size 200
    python make_sanstype.py --judge-unlabeled   # also prove all 20000 unlabeled programs compile
    python make_sanstype.py --released tests/fixtures/released --out data/released   # the authors' train and val

A program (random_program), as the authors' released generator builds it: 1-3 variables, each touched by an
operation that keeps its type (which the pseudocode never names), 1-4 random lines, then a print of each variable.
Where Appendix C says otherwise (1-4 initial variables, no second phase, ints 0 to 100) we follow the generator, which
made the paper's numbers, down to "set V to X minus V" computing `V - X`.

Writes, one program per line and the same line number across a split's files:
    {train,val,test,ood}.src   pseudocode   ' $ set var_0 to 5;  $ print var_0;  $ '
    {train,val,test,ood}.tgt   code         'int main () { $ int var_0 = 5 ; $ cout << var_0 ; $ return 0; }'
    {train,val,test,ood}.inp   the stdin values, tab-separated (empty line: the program reads nothing)
    {train,val,test,ood}.out   what the gold program prints: found by compiling and running it with the judge
    unlabeled.tgt              code only, to pre-train the denoiser
    unlabeled.src              their pseudocode: inputs with no gold output (finetune.py --unlabeled-inputs)
    spm.model                  sentencepiece BPE, one vocabulary for train pseudocode + all training code
ood uses the OOD templates below. --released DIR takes the splits DIR holds byte for byte (the unlabeled programs avoid
theirs): the authors' release, https://worksheets.codalab.org/worksheets/0x9187b7eee9d2453389bb63dfb45c4a89, has
train and val (tests/fixtures/released/ is a copy).
"""
import os
import random
import shutil
import sys

import common
import harness
import judge

# Pseudocode templates by statement kind: {v}, {w} are variables, {x} a value, {f} min or max. ood rephrases every
# kind but declare, set and min/max. An if-swap is one statement:
# "if V is true, [TAB set V to X; TAB set W to Y;] swap the values of V and W".
IN_DISTRIBUTION = {
    "set": ["set {v} to {x}"], "declare": ["instantiate {v}"], "minmax": ["set {v} to {f} applied to {v} and {w}"],
    "read": ["read {v} from stdin"], "print": ["print {v}", "output {v} to stdout"],
    "add": ["set {v} to {x} plus {v}"], "subtract": ["set {v} to {x} minus {v}"],
    "append": ["add {x} to the end of {v}"], "prepend": ["add {x} to the beginning of {v}"],
    "and": ["set {v} to the and with {x}"], "if": ["if {v} is true,"],
    "swap": ["set {v} to the value of {w} and {w} to the value of {v}", "swap the values of {v} and {w}"],
}
OUT_OF_DISTRIBUTION = {
    **{kind: IN_DISTRIBUTION[kind] for kind in ("set", "declare", "minmax")},
    "read": ["read {v}", "{v} from stdin"], "print": ["print {v} to stdout", "output {v}", "stdout {v}"],
    "add": ["set {v} to {v} plus {x}", "{v} to {x} plus {v}", "set {v} to {x} plus the value of {v}"],
    "subtract": ["{v} to {x} minus {v}", "set {v} to {x} minus the value of {v}"],
    "append": ["add {x} to {v} end", "add {x} to end of {v}"],
    "prepend": ["add {x} to {v} beginning", "add {x} to beginning of {v}"],
    "and": ["set {v} to {v} and {x}", "and {v} with {x}", "{v} and {x}"], "if": ["if {v} true,", "if {v},"],
    "swap": ["set {v} to {w} and set {w} to {v}", "set {v} to the value of {w} and {w} to {v}", "swap {v} and {w}"],
}
TYPES, NAMES = ("int", "bool", "string"), [f"var_{i}" for i in range(10)]
# The operations that keep a variable's type, 1/3 each; a bool's swap is `if ( v ) { ... swap ... }`.
OPERATIONS = {"int": ("add", "subtract", "set"), "string": ("append", "prepend", "set"), "bool": ("and", "set", "if")}
SPLITS, FILES = ("train", "val", "test", "ood"), ("src", "tgt", "inp", "out")


# A statement is a (pseudocode, code) pair; where C++ allows several renderings (`int x = 5 ;` or `int x ; x = 5 ;`,
# `x += 3 ;` or `x = x + 3 ;`) one is drawn at random.
def random_value(type_, rng, stdin=False):
    """A literal as the code and the pseudocode write it, or as typed on stdin (bools as 1/0, strings unquoted)."""
    if type_ == "int":
        return str(rng.randrange(100))
    if type_ == "string":
        return f"str_{rng.randrange(10)}" if stdin else f'"str_{rng.randrange(10)}"'
    return rng.choice(["0", "1"] if stdin else ["true", "false"])


def say(templates, kind, rng, **slots):
    """The pseudocode of one statement, from a random template of its kind."""
    return rng.choice(templates[kind]).format(**slots)


def declare_with_value(type_, v, rng, templates):
    """'set v to x' for a new variable: the same pseudocode as an update, the code adds the type."""
    x = random_value(type_, rng)
    code = rng.choice([f"{type_} {v} = {x} ;", f"{type_} {v} ; {v} = {x} ;"])
    return say(templates, "set", rng, v=v, x=x), code


def operation(v, variables, rng, templates):
    """One of the three type-preserving operations of v's type, on the existing variable v."""
    op = rng.choice(OPERATIONS[variables[v]])
    if op == "if":
        return conditional_swap(v, variables, rng, templates)
    x = random_value(variables[v], rng)
    pseudo = say(templates, op, rng, v=v, x=x)
    plus = [f"{v} += {x} ;", f"{v} = {v} + {x} ;"]
    code = {"set": [f"{v} = {x} ;"], "add": plus, "subtract": [f"{v} -= {x} ;", f"{v} = {v} - {x} ;"],
            "append": plus, "prepend": [f"{v} = {x} + {v} ;"], "and": [f"{v} = {v} && {x} ;"]}[op]
    return pseudo, rng.choice(code)


def conditional_swap(c, variables, rng, templates):
    """'if c is true,' swap the first two variables of a shared type (c may be one) through a `temp`; if none share
    one, two of a random type declared in the block: they shadow or vanish, the scoping the predictor must learn."""
    first_shared = [v for v in variables if list(variables.values()).count(variables[v]) > 1]
    if first_shared:
        type_ = variables[first_shared[0]]
        a, b = [v for v in variables if variables[v] == type_][:2]
        block_pseudo = block_code = ""
    else:
        type_, (a, b) = rng.choice(TYPES), rng.sample(NAMES, 2)
        decl_a, decl_b = (declare_with_value(type_, name, rng, templates) for name in (a, b))
        block_pseudo, block_code = f"TAB {decl_a[0]}; TAB {decl_b[0]}; ", f"~ {decl_a[1]} ~ {decl_b[1]} "
    pseudo = f"{say(templates, 'if', rng, v=c)} {block_pseudo}{say(templates, 'swap', rng, v=a, w=b)}"
    return pseudo, f"if ( {c} ) {{ {block_code}{type_} temp = {a} ; {a} = {b} ; {b} = temp ; }}"


def random_program(rng, templates):
    """One program as (pseudocode line, code line, stdin line) in the released files' format."""
    variables, statements, stdin = {}, [], []  # variables: outer-scope ones in declaration order -> type
    initial = rng.sample(NAMES, rng.randint(1, 3))  # each set to a value or read from stdin
    for v in initial:
        variables[v] = type_ = rng.choice(TYPES)
        if rng.random() < 0.5:
            statements.append(declare_with_value(type_, v, rng, templates))
        else:
            statements.append((say(templates, "declare", rng, v=v), f"{type_} {v} ;"))
            statements.append((say(templates, "read", rng, v=v), f"cin >> {v} ;"))
            stdin.append(random_value(type_, rng, stdin=True))
    for v in rng.sample(initial, len(initial)):  # an operation on each, which pins down its type
        statements.append(operation(v, variables, rng, templates))
    ints = [v for v in initial if variables[v] == "int"]
    for _ in range(rng.randint(1, 4)):  # random lines: mostly operations, else a new variable
        if rng.random() < 0.8:
            if len(ints) >= 2 and rng.random() < 0.1:  # v = min|max ( v , w ) on two distinct initial ints
                (v, w), f = rng.sample(ints, 2), rng.choice(["min", "max"])
                statements.append((say(templates, "minmax", rng, v=v, w=w, f=f), f"{v} = {f} ( {v} , {w} ) ;"))
            statements.append(operation(rng.choice(list(variables)), variables, rng, templates))
        else:
            v = rng.choice([name for name in NAMES if name not in variables])  # (at most 7 in use here)
            variables[v] = rng.choice(TYPES)
            statements.append(declare_with_value(variables[v], v, rng, templates))
    statements += [(say(templates, "print", rng, v=v), f"cout << {v} ;") for v in variables]  # bools print as 1/0
    src = " $ " + " $ ".join(f"{pseudo}; " for pseudo, _ in statements) + " $ "
    tgt = "int main () { $ " + " $ ".join(code for _, code in statements) + " $ return 0; }"
    return src, tgt, "\t".join(stdin)


def make_split(name, size, seed, templates, avoid=frozenset()):
    """`size` programs as lists (src, tgt, inp) from the split's own random stream, none whose code is in `avoid`."""
    rng = random.Random(f"sanstype-{seed}-{name}")  # str seeds are hashed with sha512: stable across runs
    programs = []
    while len(programs) < size:
        program = random_program(rng, templates)
        if program[1] not in avoid:
            programs.append(program)
    return [list(column) for column in zip(*programs)]


def read_released(folder: str) -> dict:
    """{split: {extension: lines}} of the splits whose four files `folder` holds, one line per program in each."""
    found = {}
    for split in SPLITS:
        present = [ext for ext in FILES if os.path.isfile(os.path.join(folder, f"{split}.{ext}"))]
        if present and len(present) < len(FILES):
            missing = next(ext for ext in FILES if ext not in present)
            raise common.UsageError(f"--released {folder}: {split}.{present[0]} without {split}.{missing}")
        if present:
            found[split] = {ext: common.read_lines(os.path.join(folder, f"{split}.{ext}")) for ext in FILES}
            counts = {ext: len(lines) for ext, lines in found[split].items()}
            if len(set(counts.values())) > 1 or not counts["src"]:
                raise common.UsageError(f"--released {folder}: {split}'s files disagree on its programs (" +
                                        ", ".join(f"{n} lines in .{ext}" for ext, n in counts.items()) + ")")
    if not found:
        raise common.UsageError(f"--released {folder} holds no split files ({', '.join(s + '.src' for s in SPLITS)})")
    return found


def run_gold_programs(splits, names):
    """{split: stdout lines} of the named splits' programs, judged in one batch; one that fails is a generator bug."""
    programs = [(name, i) for name in names for i in range(len(splits[name][1]))]
    meter = harness.Progress(len(programs), "judging gold programs")
    results = judge.run_programs([splits[n][1][i] for n, i in programs],
                                 [splits[n][2][i] for n, i in programs], progress=meter.step)
    for (name, i), result in zip(programs, results):
        if result.status != "ok":
            sys.exit(f"error: generator bug: gold program {name}.tgt line {i + 1} gave {result.status}: "
                     f"{result.error}\n  program: {splits[name][1][i]}\n  stdin: {splits[name][2][i]!r}")
    outputs = iter(result.stdout.strip() for result in results)
    return {name: [next(outputs) for _ in splits[name][1]] for name in names}


def parse_args(argv):
    parser = harness.ArgumentParser(prog="make_sanstype.py", description=__doc__)
    add = parser.add_argument
    add("--out", default="data/sanstype", help="output directory")
    add("--overwrite", action="store_true", help="replace --out's data (runs trained on it will no longer match it)")
    add("--labeled", type=int, help="pseudocode-code pairs in train (default: 1000)")
    add("--unlabeled", type=int, default=20000, help="code-only programs (denoiser)")
    add("--num-eval", type=int, help="programs in each of val, test, ood (default: 500)")
    add("--released", metavar="DIR", help="take the splits DIR holds (the authors' release) as they are")
    add("--seed", type=int, default=0, help="same seed, same bytes")
    add("--vocab-size", type=int, default=600, help="joined sentencepiece BPE vocabulary")
    add("--judge-unlabeled", action="store_true", help="also compile and run the unlabeled programs (slow)")
    args = parser.parse_args(argv)
    harness.check_ranges(parser, args, at_least_1="labeled unlabeled num_eval vocab_size")
    return args


def main(argv=None):
    harness.run_main("make_sanstype.py", make_sanstype, parse_args(argv))


def make_sanstype(args):
    harness.claim_data_folder(args.out, args.overwrite)
    released = read_released(args.released) if args.released else {}
    for flag, value, names in (("--labeled", args.labeled, ["train"]), ("--num-eval", args.num_eval, SPLITS[1:])):
        if value and set(names) <= set(released):
            raise common.UsageError(f"{flag} applies to generated splits: {args.released} holds {', '.join(names)}")
    sizes = {"train": args.labeled or 1000, **dict.fromkeys(SPLITS[1:], args.num_eval or 500),
             "unlabeled": args.unlabeled}
    generated = [name for name in SPLITS if name not in released]
    splits = {name: make_split(name, sizes[name], args.seed, OUT_OF_DISTRIBUTION if name == "ood" else
                               IN_DISTRIBUTION) for name in generated}
    splits.update({name: [files["src"], files["tgt"], files["inp"]] for name, files in released.items()})
    splits["unlabeled"] = make_split("unlabeled", args.unlabeled, args.seed, IN_DISTRIBUTION,
                                     avoid={code for files in released.values() for code in files["tgt"]})
    if released:
        print(f"took {', '.join(released)} from {args.released} as they are; generated "
              f"{', '.join(generated + ['unlabeled'])}, the unlabeled programs none of theirs")
    print(f"generated {sum(sizes[name] for name in generated + ['unlabeled'])} programs: " +
          ", ".join(f"{name} {sizes[name]}" for name in generated + ["unlabeled"]))
    # Train pseudocode and all training code (never eval data), before the slow judging: a bad --vocab-size fails fast.
    spm_model = common.train_tokenizer(splits["train"][0] + splits["train"][1] + splits["unlabeled"][1],
                                       args.vocab_size)
    outputs = run_gold_programs(splits, generated + (["unlabeled"] if args.judge_unlabeled else []))
    os.makedirs(args.out, exist_ok=True)
    for name in generated:
        for ext, lines in zip(FILES, [*splits[name], outputs[name]]):
            common.write_lines(os.path.join(args.out, f"{name}.{ext}"), lines)
    for path in (f"{name}.{ext}" for name in released for ext in FILES):  # byte for byte
        shutil.copyfile(os.path.join(args.released, path), os.path.join(args.out, f"{path}.tmp"))
        os.replace(os.path.join(args.out, f"{path}.tmp"), os.path.join(args.out, path))
    common.write_lines(os.path.join(args.out, "unlabeled.tgt"), splits["unlabeled"][1])
    common.write_lines(os.path.join(args.out, "unlabeled.src"), splits["unlabeled"][0])
    with open(os.path.join(args.out, "spm.model"), "wb") as f:
        f.write(spm_model)
    harness.write_manifest(args.out, "sanstype", corruption="code", seed=args.seed, authors_splits=list(released),
                           **({"released_from": os.path.abspath(args.released)} if released else {}))
    print(f"wrote {args.out}/{{train,val,test,ood}}.{{src,tgt,inp,out}}, unlabeled.{{tgt,src}}, spm.model, "
          "dataset.json")


if __name__ == "__main__":
    main()
