"""Generate SansType, the synthetic pseudocode-to-code dataset of the paper (Appendix C).

    python make_sanstype.py                     # data/sanstype: 1000 labeled, 20000 unlabeled, 500 per eval split
    python make_sanstype.py --out /tmp/tiny --num-labeled 30 --num-unlabeled 100 --num-eval 20 --vocab-size 200
    python make_sanstype.py --judge-unlabeled   # also prove all 20000 unlabeled programs compile (+5 min)

Each program declares 1-4 variables (int, string or bool; named var_0..var_9), either read from stdin or set
to a value (ints 0..99, strings "str_0".."str_9"), then runs 1-5 random lines (20% declare a new variable,
80% a type-preserving operation) and prints every variable. The pseudocode never names a type and uses the
same words for declaring and updating ("set var_0 to 5"), so the predictor has to infer types from context.

Writes, one program per line and the same line number across a split's files:
    {train,val,test,ood}.src   pseudocode   ' $ set var_0 to 5;  $ print var_0;  $ '
    {train,val,test,ood}.tgt   code         'int main () { $ int var_0 = 5 ; $ cout << var_0 ; $ return 0; }'
    {train,val,test,ood}.inp   the stdin values, tab-separated (empty line: the program reads nothing)
    {train,val,test,ood}.out   what the gold program prints: found by compiling and running it with the judge
    unlabeled.tgt              code only, to pre-train the denoiser
    spm.model                  sentencepiece BPE, one vocabulary for train pseudocode + all training code
train, val and test use the in-distribution pseudocode templates; ood uses the disjoint OOD set below.
The same --seed gives the same bytes; each split has its own random stream, so changing the size of one
split does not change the others.
"""
import argparse
import os
import random
import sys

import common

# ----------------------------------------------------------------------------------------------------
# Pseudocode templates, one list per statement kind: {v}, {w} are variables, {x} a value, {f} min or max.
# The OOD templates are the in-distribution words mixed and matched (the paper's example is the print
# statement), so a model that only memorised the training phrasings fails on them.
#
#   kind      in distribution (train/val/test)           out of distribution (ood)
#   declare   instantiate V / create variable V            instantiate variable V / create V
#   read      read V from stdin / input V                  read V / input V from stdin / stdin V
#   set       set V to X / let V be X                      set V to be X / let V be set to X
#   prepend   add S to the beginning of V / prepend S to V prepend S to the beginning of V
#   append    add S to the end of V / append S to V        append S to the end of V / add S to V
#   add       set V to N plus V / increase V by N          set V to V plus N / increase V to N plus V
#   subtract  set V to N minus V / decrease V by N         set V to V minus N / decrease V to N minus V
#   and       set V to the and with B / set V to V and B   set V to V and with B / set V to the and of V and B
#   minmax    set V to min applied to V and W /            set V to min of V and W /
#             set V to the min of V and W                  set V to the min applied to V and W
#   swap      swap the values of V and W /                 swap V and W /
#             set V to the value of W and W to the value of V      set V to W and W to V
#   print     print V / output V to stdout                 print V to stdout / output V / stdout V
#
# The first in-distribution template of each kind is the one of the released SansType files.
# A conditional swap reads "if C is true, <swap>"; with block-scoped variables
# "if C is true, TAB <set>; TAB <set>; <swap>".
# ----------------------------------------------------------------------------------------------------
IN_DISTRIBUTION = {
    "declare": ["instantiate {v}", "create variable {v}"],
    "read": ["read {v} from stdin", "input {v}"],
    "set": ["set {v} to {x}", "let {v} be {x}"],
    "prepend": ["add {x} to the beginning of {v}", "prepend {x} to {v}"],
    "append": ["add {x} to the end of {v}", "append {x} to {v}"],
    "add": ["set {v} to {x} plus {v}", "increase {v} by {x}"],
    "subtract": ["set {v} to {x} minus {v}", "decrease {v} by {x}"],
    "and": ["set {v} to the and with {x}", "set {v} to {v} and {x}"],
    "minmax": ["set {v} to {f} applied to {v} and {w}", "set {v} to the {f} of {v} and {w}"],
    "swap": ["swap the values of {v} and {w}", "set {v} to the value of {w} and {w} to the value of {v}"],
    "print": ["print {v}", "output {v} to stdout"],
}
OUT_OF_DISTRIBUTION = {
    "declare": ["instantiate variable {v}", "create {v}"],
    "read": ["read {v}", "input {v} from stdin", "stdin {v}"],
    "set": ["set {v} to be {x}", "let {v} be set to {x}"],
    "prepend": ["prepend {x} to the beginning of {v}"],
    "append": ["append {x} to the end of {v}", "add {x} to {v}"],
    "add": ["set {v} to {v} plus {x}", "increase {v} to {x} plus {v}"],
    "subtract": ["set {v} to {v} minus {x}", "decrease {v} to {x} minus {v}"],
    "and": ["set {v} to {v} and with {x}", "set {v} to the and of {v} and {x}"],
    "minmax": ["set {v} to {f} of {v} and {w}", "set {v} to the {f} applied to {v} and {w}"],
    "swap": ["swap {v} and {w}", "set {v} to {w} and {w} to {v}"],
    "print": ["print {v} to stdout", "output {v}", "stdout {v}"],
}

TYPES = ("int", "string", "bool")
NAMES = [f"var_{i}" for i in range(10)]


# ----------------------------------------------------------------------------------------------------
# Values and statements. A statement is a (pseudocode, code) pair; where C++ allows several renderings
# (`int x = 5 ;` or `int x ; x = 5 ;`, `x += 3 ;` or `x = x + 3 ;`) one is drawn at random.
# ----------------------------------------------------------------------------------------------------
def random_value(type_, rng):
    """A literal as it appears in the code and the pseudocode."""
    if type_ == "int":
        return str(rng.randrange(100))
    if type_ == "string":
        return f'"str_{rng.randrange(10)}"'
    return rng.choice(["true", "false"])


def random_stdin_value(type_, rng):
    """A value as typed on stdin: cin reads bools as 1/0 and strings without quotes."""
    if type_ == "int":
        return str(rng.randrange(100))
    if type_ == "string":
        return f"str_{rng.randrange(10)}"
    return rng.choice(["0", "1"])


def say(templates, kind, rng, **slots):
    """The pseudocode of one statement, from a random template of its kind."""
    return rng.choice(templates[kind]).format(**slots)


def declare_with_value(type_, v, rng, templates):
    """'set v to x' for a new variable: the same pseudocode as an update, the code adds the type."""
    x = random_value(type_, rng)
    code = rng.choice([f"{type_} {v} = {x} ;", f"{type_} {v} ; {v} = {x} ;"])
    return say(templates, "set", rng, v=v, x=x), code


def update(v, type_, variables, rng, templates):
    """A type-preserving operation on the existing variable v (3 per type, plus min/max on two ints)."""
    other_ints = [w for w, t in variables.items() if t == "int" and w != v]
    if type_ == "int" and other_ints and rng.random() < 0.1:
        w, f = rng.choice(other_ints), rng.choice(["min", "max"])
        return say(templates, "minmax", rng, v=v, w=w, f=f), f"{v} = {f} ( {v} , {w} ) ;"
    op = rng.choice({"int": ["set", "add", "subtract"],
                     "string": ["set", "prepend", "append"],
                     "bool": ["set", "and", "swap"]}[type_])
    if op == "swap":
        return conditional_swap(v, variables, rng, templates)
    x = random_value(type_, rng)
    pseudo = say(templates, op, rng, v=v, x=x)
    if op == "set":
        return pseudo, f"{v} = {x} ;"
    if op == "prepend":
        return pseudo, f"{v} = {x} + {v} ;"
    if op == "append":
        return pseudo, rng.choice([f"{v} += {x} ;", f"{v} = {v} + {x} ;"])
    if op == "add":
        return pseudo, rng.choice([f"{v} += {x} ;", f"{v} = {v} + {x} ;"])
    if op == "subtract":
        return pseudo, rng.choice([f"{v} -= {x} ;", f"{v} = {v} - {x} ;"])
    return pseudo, f"{v} = {v} && {x} ;"  # op == "and"


def conditional_swap(c, variables, rng, templates):
    """'if c is true' swap two variables of one type through a temp declared inside the block.

    Half the time (or when no two outer variables share a type) the block first declares the two
    variables it swaps: they shadow outer variables or are new and vanish at the closing brace, which
    is exactly the scoping the predictor has to get right.
    """
    same_type_pairs = [(a, b) for a in variables for b in variables if a < b and variables[a] == variables[b]]
    if same_type_pairs and rng.random() < 0.5:
        a, b = rng.choice(same_type_pairs)
        type_, block_pseudo, block_code = variables[a], "", ""
    else:
        type_, (a, b) = rng.choice(TYPES), rng.sample(NAMES, 2)
        decl_a, decl_b = (declare_with_value(type_, name, rng, templates) for name in (a, b))
        block_pseudo = f"TAB {decl_a[0]}; TAB {decl_b[0]}; "
        block_code = f"~ {decl_a[1]} ~ {decl_b[1]} "
    if rng.random() < 0.5:  # the pairs above are in name order; either variable may come first
        a, b = b, a
    pseudo = f"if {c} is true, {block_pseudo}{say(templates, 'swap', rng, v=a, w=b)}"
    code = f"if ( {c} ) {{ {block_code}{type_} temp = {a} ; {a} = {b} ; {b} = temp ; }}"
    return pseudo, code


def random_program(rng, templates):
    """One program as (pseudocode line, code line, stdin line) in the released files' format."""
    variables = {}  # outer-scope variables in declaration order -> type
    statements = []  # (pseudocode, code) pairs
    stdin = []

    # Phase 1: declare 1-4 variables, each read from stdin or set to a value.
    for _ in range(rng.randint(1, 4)):
        v = rng.choice([name for name in NAMES if name not in variables])
        variables[v] = type_ = rng.choice(TYPES)
        if rng.random() < 0.5:
            statements.append((say(templates, "declare", rng, v=v), f"{type_} {v} ;"))
            statements.append((say(templates, "read", rng, v=v), f"cin >> {v} ;"))
            stdin.append(random_stdin_value(type_, rng))
        else:
            statements.append(declare_with_value(type_, v, rng, templates))

    # Phase 2: 1-5 lines, 20% a new variable, 80% a type-preserving operation on an existing one.
    for _ in range(rng.randint(1, 5)):
        if rng.random() < 0.2 and len(variables) < len(NAMES):
            v = rng.choice([name for name in NAMES if name not in variables])
            variables[v] = rng.choice(TYPES)
            statements.append(declare_with_value(variables[v], v, rng, templates))
        else:
            v = rng.choice(list(variables))
            statements.append(update(v, variables[v], variables, rng, templates))

    # Print every outer-scope variable: cout with no separator, bools print as 1/0.
    for v in variables:
        statements.append((say(templates, "print", rng, v=v), f"cout << {v} ;"))

    src = " $ " + " $ ".join(f"{pseudo}; " for pseudo, _ in statements) + " $ "
    tgt = "int main () { $ " + " $ ".join(code for _, code in statements) + " $ return 0; }"
    return src, tgt, "\t".join(stdin)


def make_split(name, size, seed, templates):
    """`size` programs as three parallel lists (src, tgt, inp), from a random stream of their own."""
    rng = random.Random(f"sanstype-{seed}-{name}")  # str seeds are hashed with sha512: stable across runs
    programs = [random_program(rng, templates) for _ in range(size)]
    return [list(column) for column in zip(*programs)]


# ----------------------------------------------------------------------------------------------------
# Gold outputs: every gold program must compile and run; one that does not is a generator bug.
# ----------------------------------------------------------------------------------------------------
def run_gold_programs(splits, names):
    """Judge all programs of the named splits in one batch; return {split: list of stdout lines}."""
    programs = [(name, i) for name in names for i in range(len(splits[name][1]))]
    results = common.run_programs([splits[n][1][i] for n, i in programs],
                                  [splits[n][2][i] for n, i in programs], progress="gold programs")
    for (name, i), result in zip(programs, results):
        if result.status != "ok":
            sys.exit(f"error: generator bug: gold program {name}.tgt line {i + 1} gave {result.status}: "
                     f"{result.error}\n  program: {splits[name][1][i]}\n  stdin: {splits[name][2][i]!r}")
    outputs = iter(result.stdout.strip() for result in results)
    return {name: [next(outputs) for _ in splits[name][1]] for name in names}


def parse_args(argv):
    parser = common.ArgumentParser(prog="make_sanstype.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", default="data/sanstype", help="output directory")
    parser.add_argument("--num-labeled", type=int, default=1000, help="pseudocode-code pairs in train")
    parser.add_argument("--num-unlabeled", type=int, default=20000, help="code-only programs (denoiser)")
    parser.add_argument("--num-eval", type=int, default=500, help="programs in each of val, test, ood")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same bytes")
    parser.add_argument("--vocab-size", type=int, default=600, help="joined sentencepiece BPE vocabulary")
    parser.add_argument("--judge-unlabeled", action="store_true",
                        help="also compile and run the unlabeled programs (slow; the generator is tested)")
    args = parser.parse_args(argv)
    for flag in ("num_labeled", "num_unlabeled", "num_eval", "vocab_size"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be a positive integer, got {getattr(args, flag)}")
    return parser, args


def main(argv=None):
    parser, args = parse_args(argv)
    sizes = {"train": args.num_labeled, "val": args.num_eval, "test": args.num_eval,
             "ood": args.num_eval, "unlabeled": args.num_unlabeled}
    splits = {name: make_split(name, size, args.seed, OUT_OF_DISTRIBUTION if name == "ood" else IN_DISTRIBUTION)
              for name, size in sizes.items()}
    print(f"generated {sum(sizes.values())} programs: " + ", ".join(f"{n} {s}" for n, s in sizes.items()))

    # The tokenizer sees what training may use: train pseudocode and all training code (never eval data).
    # Trained before the slow judging so a bad --vocab-size fails fast.
    try:
        spm_model = common.train_tokenizer(splits["train"][0] + splits["train"][1] + splits["unlabeled"][1],
                                           args.vocab_size)
    except RuntimeError as e:  # sentencepiece's message follows its "file(line) [check]" prefix
        parser.error(f"cannot train a {args.vocab_size}-piece tokenizer on this data: {str(e).split('] ')[-1]}")
    print(f"trained a {args.vocab_size}-piece sentencepiece BPE tokenizer")

    labeled = ["train", "val", "test", "ood"]
    outputs = run_gold_programs(splits, labeled + (["unlabeled"] if args.judge_unlabeled else []))

    os.makedirs(args.out, exist_ok=True)
    for name in labeled:
        src, tgt, inp = splits[name]
        for ext, lines in [("src", src), ("tgt", tgt), ("inp", inp), ("out", outputs[name])]:
            common.write_lines(os.path.join(args.out, f"{name}.{ext}"), lines)
    common.write_lines(os.path.join(args.out, "unlabeled.tgt"), splits["unlabeled"][1])
    with open(os.path.join(args.out, "spm.model"), "wb") as f:
        f.write(spm_model)
    print(f"wrote {args.out}/{{train,val,test,ood}}.{{src,tgt,inp,out}}, unlabeled.tgt, spm.model")


if __name__ == "__main__":
    main()
