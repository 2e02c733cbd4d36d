"""The denoiser's noise (common.py section 4) on real SansType programs.

tests/fixtures/released_train_head.* are the first 50 programs of the released SansType train split
(MIT License, Copyright (c) 2020 Michael Xie: see tests/fixtures/LICENSE).
"""
import difflib
import os
import random

import pytest

import common

DATA = os.path.join(os.path.dirname(__file__), "fixtures")


def read_lines(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


PROGRAMS = read_lines("released_train_head.tgt")
STDINS = read_lines("released_train_head.inp")
OUTPUTS = read_lines("released_train_head.out")


def word_edit_distance(a, b):
    """Levenshtein distance between two programs, counted in space-separated words."""
    a, b = a.split(" "), b.split(" ")
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def changed_words(a, b):
    """The words removed from a or added in b."""
    a, b = a.split(" "), b.split(" ")
    words = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op != "equal":
            words += a[i1:i2] + b[j1:j2]
    return words


def test_test_data_is_the_released_format():
    assert len(PROGRAMS) == len(STDINS) == len(OUTPUTS) == 50
    assert all(p.startswith("int main () { $ ") and p.endswith(" $ return 0; }") for p in PROGRAMS)


@pytest.mark.parametrize("num_corruptions", [1, 2, 3])
def test_code_corruption_changes_every_program_by_that_many_edits(num_corruptions):
    rng = random.Random(0)
    distances = []
    for program in PROGRAMS:
        for _ in range(6):
            corrupted = common.corrupt_code(program, rng, num_corruptions)
            assert corrupted != program
            distances.append(word_edit_distance(program, corrupted))
    # Every edit replaces, deletes or inserts one word at its own place, so k edits are k words apart
    # (rarely fewer, when two edits can be explained more cheaply, e.g. two neighbouring deletions).
    assert max(distances) == num_corruptions
    assert sum(d == num_corruptions for d in distances) >= 0.9 * len(distances)


def test_code_corruption_only_touches_types_and_io():
    rng = random.Random(1)
    touched = set()
    for program in PROGRAMS:
        for _ in range(10):
            touched.update(changed_words(program, common.corrupt_code(program, rng, 2)))
    # all three kinds of edit happen, and nothing else is touched
    assert touched == {"int", "string", "bool", "<<", ">>", "cin", "cout"}


def test_code_corruption_is_a_pure_function_of_the_rng():
    program = PROGRAMS[0]
    assert common.corrupt_code(program, random.Random(7), 2) == common.corrupt_code(program, random.Random(7), 2)
    assert len({common.corrupt_code(program, random.Random(seed)) for seed in range(20)}) > 5


def test_most_code_corrupted_programs_no_longer_compile():
    """The paper's point: the noise produces invalid code the denoiser must learn to repair."""
    rng = random.Random(2)
    corrupted = [common.corrupt_code(p, rng) for p in PROGRAMS for _ in range(2)]  # 100 programs
    results = common.run_programs(PROGRAMS + corrupted, STDINS + STDINS + STDINS, cache=False)
    originals, noisy = results[:len(PROGRAMS)], results[len(PROGRAMS):]
    # the released programs themselves compile and print their .out
    assert [r.stdout.strip() for r in originals] == OUTPUTS
    failed = sum(r.status == "compile_error" for r in noisy) / len(noisy)
    wrong = sum(r.status == "ok" and r.stdout.strip() != OUTPUTS[i // 2] for i, r in enumerate(noisy)) / len(noisy)
    print(f"code corruptions: {failed:.0%} do not compile, {wrong:.0%} compile but print something else")
    assert failed > 0.5
    assert failed < 1.0  # some are semantic errors only (e.g. `bool x = 5 ;`), as in Appendix C


def test_random_deletion_drops_about_p_of_the_words():
    rng = random.Random(3)
    for p in (0.15, 0.5):
        kept = total = 0
        for program in PROGRAMS:
            noisy = common.delete_random_words(program, rng, p)
            # what is left is the program with some words taken out, in order: only deletions
            assert word_edit_distance(program, noisy) == len(program.split(" ")) - len(noisy.split(" "))
            kept += len(noisy.split(" "))
            total += len(program.split(" "))
        assert abs((1 - kept / total) - p) < 0.02  # about 3600 words: the std is ~0.006 at p=0.15
    assert common.delete_random_words(PROGRAMS[0], rng, 0.0) == PROGRAMS[0]
