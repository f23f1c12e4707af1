"""The benchmarks' round orders (bench/common.py `interleave`): a machine that slows down during a run must
favour no variant, so over 2·n rounds every variant runs in every position equally often and before each
other variant as often as after it."""

from __future__ import annotations

from collections import Counter
from itertools import permutations

import pytest

from bench.common import interleave


def orders(names: str, rounds: int) -> list[str]:
    ran: list[str] = []
    interleave({name: (lambda name=name: ran.append(name) or 0.0) for name in names}, rounds)
    return ["".join(ran[i : i + len(names)]) for i in range(0, len(ran), len(names))]


@pytest.mark.parametrize("names", ["AB", "ABC", "ABCD"])
def test_positions_and_precedence_are_balanced_over_two_n_rounds(names):
    rounds = orders(names, 2 * len(names))
    positions = Counter((name, order.index(name)) for order in rounds for name in names)
    assert set(positions.values()) == {2}, positions
    before = Counter((a, b) for order in rounds for a, b in permutations(names, 2) if order.index(a) < order.index(b))
    assert all(before[(a, b)] == before[(b, a)] for a, b in permutations(names, 2)), before


def test_three_variants_over_six_rounds_run_every_order_once():
    assert sorted(orders("ABC", 6)) == sorted("".join(p) for p in permutations("ABC"))


def test_every_measurement_is_returned_in_round_order():
    calls = iter(range(100))
    out = interleave({"a": lambda: float(next(calls)), "b": lambda: float(next(calls))}, 3)
    assert out == {"a": [0.0, 3.0, 5.0], "b": [1.0, 2.0, 4.0]}
