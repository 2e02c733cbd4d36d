"""What the training and evaluation stages use of SPoC (Section 6.2, Appendix E) beside SansType's pieces: the
denoiser's noise and each program's hidden test cases, from the data make_spoc.py writes."""
import itertools
import json
import os
import re

import common
import judge

# The denoiser's noise, after Yasunaga & Liang (2020); literals, indentation (`~`) and preprocessor lines stay.
CPP_KEYWORDS = ("int", "long", "double", "float", "char", "bool", "string", "void", "const", "unsigned", "auto",
                "if", "else", "for", "while", "do", "return", "break", "continue", "struct")
CPP_SYMBOLS = (";", ",", "(", ")", "{", "}", "[", "]", "=", "==", "!=", "<", ">", "<=", ">=", "<<", ">>", "+",
               "-", "*", "/", "%", "&&", "||", "!", "++", "--", "+=", "-=", ":", "&", ".")
CORRUPTED_PROGRAMS = 0.75


def token_kind(token: str) -> str | None:
    if token in CPP_KEYWORDS:
        return "keyword"
    if token in CPP_SYMBOLS:
        return "symbol"
    return "identifier" if re.fullmatch(r"[A-Za-z_]\w*", token) else None  # literals and `~`: None


def noisy_code_line(tokens: list[str], identifiers: list[str], rng) -> list[str]:
    """One random edit of a line's tokens: insert, delete or replace a keyword, identifier or symbol
    (a replacement keeps the kind: another keyword, another of the program's identifiers, another symbol)."""
    choices = {"keyword": CPP_KEYWORDS, "identifier": identifiers, "symbol": CPP_SYMBOLS}
    sites = [i for i, token in enumerate(tokens) if token_kind(token)]
    edit = rng.choice(("insert", "delete", "replace")) if sites else "insert"
    if edit == "insert":
        indent = len(tokens) - len(list(itertools.dropwhile(lambda t: t == "~", tokens)))
        where = rng.randint(indent, len(tokens))
        kind = rng.choice([kind for kind, options in choices.items() if options])
        return tokens[:where] + [rng.choice(choices[kind])] + tokens[where:]
    i = rng.choice(sites)
    others = [t for t in choices[token_kind(tokens[i])] if t != tokens[i]]
    if edit == "delete" or not others:
        return tokens[:i] + tokens[i + 1:]
    return tokens[:i] + [rng.choice(others)] + tokens[i + 1:]


def corrupt_one_line(code: str, rng) -> str:
    """Appendix E's noise for SPoC: with probability 0.75 one line (not a preprocessor line) gets one
    noisy_code_line edit; else the program unchanged. `$` separates lines, as make_spoc.py writes them."""
    lines = code.split(" $ ")
    editable = [i for i, line in enumerate(lines) if not line.lstrip("~ ").startswith("#")]
    if rng.random() >= CORRUPTED_PROGRAMS or not editable:
        return code
    tokens = [judge.SPOC_TOKEN.findall(line) for line in lines]
    identifiers = sorted({t for line in tokens for t in line if token_kind(t) == "identifier"})  # sorted: seedable
    i = rng.choice(editable)
    lines[i] = " ".join(noisy_code_line(tokens[i], identifiers, rng))
    return " $ ".join(line for line in lines if line)  # a deleted `}` leaves no empty line


# ----------------------------------------------------------------------------------------------------
# Test cases
# ----------------------------------------------------------------------------------------------------
def read_cases(data_dir: str, split: str) -> list[list[tuple[str, str]]]:
    """The (stdin, expected stdout) test cases of each program of a SPoC split (make_spoc.py):
    {split}.ids names each program's problem; {split}.cases.jsonl holds each problem's cases once."""
    path = os.path.join(data_dir, f"{split}.cases.jsonl")
    cases_of = {}
    for number, line in enumerate(common.read_lines(path), start=1):
        try:
            row = json.loads(line)
            cases_of[row["probid"]] = [(stdin, stdout) for stdin, stdout in row["cases"]]
        except (ValueError, KeyError, TypeError):
            raise common.UsageError(f"{path}:{number}: not a line written by make_spoc.py") from None
    problems = [line.split("\t")[0] for line in common.read_lines(os.path.join(data_dir, f"{split}.ids"))]
    missing = sorted(set(problems) - set(cases_of))
    if missing:
        raise common.UsageError(f"{path} has no test cases for problem {missing[0]}")
    return [cases_of[probid] for probid in problems]

