"""The denoiser's noise (common.py section 4) on the released SansType programs.

tests/fixtures/released/ holds the released SansType train and val splits (MIT License,
Copyright (c) 2020 Michael Xie: see tests/fixtures/released/LICENSE).
"""
import os
import random
import re

import common
import judge

DATA = os.path.join(os.path.dirname(__file__), "fixtures", "released")
TYPES = ("int", "string", "bool")


def read_lines(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


PROGRAMS = read_lines("train.tgt")


def renderings(statement, types):
    """Every noisy rendering the reference allows for one statement (written apart from common.py's code,
    as the oracle it is checked against); '' is a deleted print, and several leave the statement as it was."""
    if m := re.fullmatch(r"(int|string|bool) (\S+) (?:= |; \2 = )(\S+) ;", statement):  # declared with a value
        type_, v, x = m.groups()
        return {f"{v} = {x} ;"} | {f"{t} {v} = {x} ;" for t in TYPES if t != type_} | \
               {f"{t} {v} ; {v} = {x} ;" for t in TYPES if t != type_}
    if m := re.fullmatch(r"(int|string|bool) (\S+) ;", statement):
        return {f"{t} {m[2]} ;" for t in TYPES if t != m[1]}
    if m := re.fullmatch(r"cin >> (\S+) ;", statement):
        return {f"cin {m[1]} ;", statement, f"cin << {m[1]} ;"}
    if statement.startswith("cout << "):
        return {""}
    if statement.startswith("if "):  # noised whole: temp with no type or another, and every block declaration
        temp = re.search(r"(int|string|bool) temp", statement)
        out = {statement.replace(temp[0], t + " temp") for t in TYPES if t != temp[1]} | \
              {statement.replace(temp[0], "temp")}
        for declaration in re.findall(r"~ ([^~]*? ;)(?= ~| \w+ temp)", statement):
            out = {s.replace(declaration, noisy) for s in out for noisy in renderings(declaration, {})}
        return out
    v = statement.split(" ")[0]
    if v in types and re.fullmatch(r"\S+ = \S+ ;", statement):  # a plain assignment: "its own type" is empty
        return {statement} | {f"{t} {statement}" for t in TYPES}
    return {f"{t} {statement}" for t in TYPES} if v in types else set()


def noised_statements(program, noisy):
    """How many statements of `program` the noise changed, asserting each change is one the reference names
    (a deleted print leaves an empty statement, so the statements stay in place)."""
    _, statements, _ = common.split_program(program)
    _, left, _ = common.split_program(noisy)
    assert len(left) == len(statements)
    types = {m[2]: m[1] for s in statements if (m := re.match(r"(int|string|bool) (\S+) ", s))}
    for statement, after in zip(statements, left):
        assert after == statement or after in renderings(statement, types), f"{statement!r} became {after!r}"
    return sum(after != statement for statement, after in zip(statements, left))


def test_the_code_noise_lands_on_the_released_denoiser_datas_statistics():
    """The released denoiser data: 10-14% of its inputs unchanged, ~1.5 statements changed and ~37% with a
    print deleted (counted over every noised program, unchanged ones included: see the README)."""
    rng = random.Random(0)
    noisy = [(p, common.corrupt_code(p, rng)) for p in PROGRAMS for _ in range(2)]
    counts = [noised_statements(p, n) for p, n in noisy]
    assert 0.11 < counts.count(0) / len(counts) < 0.16  # 10% left clean, and renderings that change nothing
    assert {1, 2, 3} <= set(counts) and max(counts) == 3
    assert 1.4 < sum(counts) / len(counts) < 1.6
    deleted_print = sum(" $  $ " in n for _, n in noisy) / len(noisy)
    assert 0.32 < deleted_print < 0.42


def test_the_code_noise_reaches_every_kind_of_statement():
    rng = random.Random(1)
    text = " ".join(common.corrupt_code(p, rng) for p in PROGRAMS)
    for rendering in (r"cin << var_", r"cin var_", r"[{;] temp = ", r"~ var_\d = ", r"\$  \$",
                      r"\$ (int|string|bool) var_\d (\+=|-=)", r"\$ (int|string|bool) var_\d = (min|max)",
                      r"\$ (int|string|bool) var_\d = \S+ ; \$"):
        assert re.search(rendering, text), rendering


def test_most_code_noised_programs_no_longer_compile():
    """The paper's point: the noise produces invalid code the denoiser must learn to repair."""
    rng = random.Random(2)
    stdins, outputs = read_lines("train.inp")[:100], read_lines("train.out")[:100]
    noisy = [common.corrupt_code(p, rng) for p in PROGRAMS[:100]]
    results = judge.run_programs(PROGRAMS[:100] + noisy, stdins + stdins, cache=False)
    assert [r.stdout.strip() for r in results[:100]] == outputs  # the released programs print their .out
    changed = [(r, out) for r, out, n, p in zip(results[100:], outputs, noisy, PROGRAMS) if n != p]
    failed = sum(r.status == "compile_error" for r, _ in changed) / len(changed)
    wrong = sum(r.status == "ok" and r.stdout.strip() != out for r, out in changed) / len(changed)
    print(f"code noise: {failed:.0%} do not compile, {wrong:.0%} compile but print something else")
    assert 0.4 < failed < 0.95 and wrong > 0.05  # (a deleted print or `bool x = 5 ;` still compiles)


def test_the_code_noise_is_a_pure_function_of_the_rng():
    program = PROGRAMS[0]
    assert common.corrupt_code(program, random.Random(7)) == common.corrupt_code(program, random.Random(7))
    assert len({common.corrupt_code(program, random.Random(seed)) for seed in range(20)}) > 5


def test_random_deletion_drops_words_within_statements_only():
    rng = random.Random(3)
    for p in (0.15, 0.5):
        kept = total = unchanged = 0
        for program in PROGRAMS[:500]:
            noisy = common.delete_random_words(program, rng, p)
            unchanged += noisy == program
            head, statements, tail = common.split_program(program)
            noisy_head, noisy_statements, noisy_tail = common.split_program(noisy)
            # `int main () {`, `return 0; }` and every `$` stay; a statement keeps some of its words, in order
            assert (noisy_head, noisy_tail, len(noisy_statements)) == (head, tail, len(statements))
            for statement, left in zip(statements, noisy_statements):
                words = iter(statement.split(" "))
                assert all(word in words for word in left.split(" ") if word)
            if noisy != program:
                kept += sum(len(s.split(" ")) for s in noisy_statements if s)
                total += sum(len(s.split(" ")) for s in statements)
        assert 0.05 < unchanged / 500 < 0.16  # 10% left clean
        assert abs((1 - kept / total) - p) < 0.02
