"""SPoC's pieces for training and evaluation (Section 6.2, Appendix E): the denoiser's noise and each program's
hidden test cases, from the data make_spoc.py writes."""
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
    return ("keyword" if token in CPP_KEYWORDS else "symbol" if token in CPP_SYMBOLS else
            "identifier" if re.fullmatch(r"[A-Za-z_]\w*", token) else None)  # literals and `~`: None


def noisy_code_line(tokens: list[str], identifiers: list[str], rng) -> list[str]:
    """Insert, delete or replace one keyword, identifier or symbol (a replacement is another of its kind)."""
    choices = {"keyword": CPP_KEYWORDS, "identifier": identifiers, "symbol": CPP_SYMBOLS}
    sites = [i for i, token in enumerate(tokens) if token_kind(token)]
    edit = rng.choice(("insert", "delete", "replace")) if sites else "insert"
    if edit == "insert":
        indent = next((k for k, token in enumerate(tokens) if token != "~"), len(tokens))
        where = rng.randint(indent, len(tokens))
        kind = rng.choice([kind for kind, options in choices.items() if options])
        return tokens[:where] + [rng.choice(choices[kind])] + tokens[where:]
    i = rng.choice(sites)
    others = [t for t in choices[token_kind(tokens[i])] if t != tokens[i]]
    return tokens[:i] + ([] if edit == "delete" or not others else [rng.choice(others)]) + tokens[i + 1:]


def corrupt_one_line(code: str, rng) -> str:
    """With probability CORRUPTED_PROGRAMS, one noisy_code_line edit of one `$`-separated line (not a preprocessor
    line); else the program unchanged."""
    lines = code.split(" $ ")
    editable = [i for i, line in enumerate(lines) if not line.lstrip("~ ").startswith("#")]
    if rng.random() >= CORRUPTED_PROGRAMS or not editable:
        return code
    tokens = [judge.SPOC_TOKEN.findall(line) for line in lines]
    identifiers = sorted({t for line in tokens for t in line if token_kind(t) == "identifier"})  # sorted: seedable
    i = rng.choice(editable)
    lines[i] = " ".join(noisy_code_line(tokens[i], identifiers, rng))
    return " $ ".join(line for line in lines if line)  # a deleted `}` leaves no empty line


def read_cases(data_dir: str, split: str) -> list[list[tuple[str, str]]]:
    """Each program's (stdin, expected stdout) cases: {split}.ids names its problem, {split}.cases.jsonl their cases."""
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
