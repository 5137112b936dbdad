"""`benchmarks/_bounding_runs.pass_split`: the wrapped runs whose admission ran a pass, and
the others, each over the bare runs' median, matched to the runs that were kept (the
warmup's runs are checked but not kept)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def runs(bench_module: Callable[[str], ModuleType]) -> ModuleType:
    return bench_module("_bounding_runs")


def test_the_split_pairs_each_kept_run_with_its_own_mark(runs: ModuleType) -> None:
    # Two warmup runs (the first ran a pass), then four kept: the second and fourth passed.
    passed = [True, False, False, True, False, True]
    times = {"wrapped": [10.0, 30.0, 10.0, 50.0], "bare": [10.0, 10.0, 10.0, 10.0]}
    split = runs.pass_split(times, passed)
    assert split == (
        "runs whose admission ran a pass: 2, median 4.000x the bare median; the others: 2, 1.000x"
    )


def test_a_side_with_no_run_is_shown_as_a_dash(runs: ModuleType) -> None:
    times = {"wrapped": [12.0, 12.0], "bare": [10.0, 10.0]}
    split = runs.pass_split(times, [False, False])
    assert split.startswith("runs whose admission ran a pass: 0, median - the bare median")
    assert split.endswith("the others: 2, 1.200x")
