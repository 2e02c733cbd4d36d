"""SansType's fidelity statistics: a split's files described, to compare ours with the authors' released ones
(EXPERIMENTS.md, "SansType's generator and corruptions"); tests/test_sanstype.py holds our generator to them.

    python tests/sanstype_fidelity.py tests/fixtures/released/train data/sanstype/train data/sanstype/test
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402
import harness  # noqa: E402

VALUE = r'"str_\d"|\b\d+\b|\btrue\b|\bfalse\b'  # a literal; (the 0 of var_0 is no word of its own)


def statement_parts(src):
    """Each pseudocode statement of a line as a list of parts: an if-swap is its condition, its block's
    declarations and its swap ('if V is true,', 'TAB set V to X', ..., 'swap the values of V and W')."""
    for statement in src.split(" $ "):
        statement = statement.strip().rstrip(";").strip()
        if statement.startswith("if "):
            condition, rest = statement.split(",", 1)
            yield [condition + ","] + [part.strip() for part in rest.split(";")]
        elif statement:
            yield [statement]


def pseudocode_templates(src):
    """The template of every statement part of a pseudocode line: variables -> V, values -> X, min/max -> F."""
    return [re.sub(r"\b(min|max)\b", "F", re.sub(VALUE, "X", re.sub(r"var_\d", "V", part)))
            for parts in statement_parts(src) for part in parts]


def undetermined_variables(src):
    """The outer variables of a pseudocode line whose type nothing in the pseudocode determines.

    A value gives its variable's type away (`set V to 5`, `add "str_1" to the end of V`), and so do a
    condition (bool) and min/max (int); a swap of two variables ties their types together. A block's
    variables are declared and swapped inside it (`TAB set V to X`): they say nothing of the outer ones.
    """
    variables, known, ties = set(), set(), []
    for parts in statement_parts(src):
        if any(part.startswith("TAB ") for part in parts):
            parts = parts[:1]
        for part in parts:
            names = set(re.findall(r"var_\d", part))
            variables |= names
            if part.startswith("if ") or re.search(VALUE + r"|\b(min|max)\b", part):
                known |= names
            elif len(names) == 2:  # a swap
                ties.append(names)
    for _ in ties:  # enough rounds for a type to pass along any chain of swaps
        for names in ties:
            if names & known:
                known |= names
    return sorted(variables - known)


def describe(src, tgt, inp):
    """Statistics of one split's lines, those the released files are compared on (README, tests)."""
    n = len(tgt)
    code = [line.split(" $ ")[1:-1] for line in tgt]
    return {
        "programs with a variable of undetermined type": sum(bool(undetermined_variables(s)) for s in src) / n,
        "operations per program": sum(not re.match(r"(int|string|bool) |cin |cout ", s)
                                      for statements in code for s in statements) / n,
        "variables declared outside blocks": sum(bool(re.match(r"(int|string|bool) ", s))
                                                 for statements in code for s in statements) / n,
        "code tokens per program": sum(len(line.split(" ")) for line in tgt) / n,
        "programs with an if-block": sum("if (" in line for line in tgt) / n,
        "programs that read stdin": sum(bool(line) for line in inp) / n,
        "pseudocode templates": len({t for s in src for t in pseudocode_templates(s)}),
    }


def unseen_template_share(train_src, src):
    """The share of a split's pseudocode template parts (counting every occurrence) never seen in train."""
    seen = {t for s in train_src for t in pseudocode_templates(s)}
    parts = [t for s in src for t in pseudocode_templates(s)]
    return sum(t not in seen for t in parts) / len(parts)


def print_description(prefixes):
    """One column of statistics per split, given as path prefixes (data/sanstype/train)."""
    columns = {}
    for prefix in prefixes:
        src, tgt, inp = (common.read_lines(f"{prefix}.{ext}") for ext in ("src", "tgt", "inp"))
        train_src = common.read_lines(os.path.join(os.path.dirname(prefix), "train.src"))
        columns[prefix] = {**describe(src, tgt, inp),
                           "template parts not seen in train": unseen_template_share(train_src, src)}
    print("| | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    for row in next(iter(columns.values())):
        cells = [str(c[row]) if isinstance(c[row], int) else f"{c[row]:.0%}" if c[row] < 1 else f"{c[row]:.1f}"
                 for c in columns.values()]
        print(f"| {row} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    harness.run_main("sanstype_fidelity.py", print_description, sys.argv[1:])
