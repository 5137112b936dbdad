"""`benchmarks/bench_call_cost.py`: each saver's calls counted on its own runs' thread
only, and the table's arithmetic (each call's excess over the bare saver's, per run)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from types import ModuleType

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from retaining_saver.testing.graphs import chat_graph, thread, turn


@pytest.fixture
def calls(bench_module: Callable[[str], ModuleType]) -> ModuleType:
    return bench_module("bench_call_cost")


def test_a_saver_counts_only_the_calls_its_own_runs_make(calls: ModuleType) -> None:
    saver = InMemorySaver()
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for name in calls.CALLS:
        calls.timed(saver, name, "bare", totals)
    graph = chat_graph(saver)
    graph.invoke(turn(0), thread(calls.run_thread("bare")))
    counted = dict(totals)
    assert set(counted) == {("bare", name) for name in calls.CALLS}
    # A wrapper's run calls the same saver on its own thread: not the bare run's cost.
    graph.invoke(turn(0), thread(calls.run_thread("dropin")))
    assert dict(totals) == counted


def test_each_call_is_set_against_the_bare_saver_s_same_call(calls: ModuleType) -> None:
    totals = {
        ("bare", "put"): 0.004,
        ("bare", "put_writes"): 0.002,
        ("bare", "get_tuple"): 0.001,
        ("dropin", "put"): 0.005,
        ("dropin", "put_writes"): 0.003,
        ("dropin", "get_tuple"): 0.001,
        ("retention", "put"): 0.006,
        ("retention", "put_writes"): 0.002,
        ("retention", "get_tuple"): 0.002,
    }
    cpu = {"bare": 0.0001, "dropin": 0.00012, "retention": 0.00015}
    rows = calls.per_call_rows(totals, 10, cpu)
    assert rows[0] == ["dropin", "put", "400 us", "500 us", "100 us", ""]
    assert rows[3] == [
        "dropin",
        "all",
        "",
        "",
        "200 us",
        "2.000 of a bare run's CPU; run CPU 1.200x the bare run's",
    ]
    assert rows[7][4:] == ["300 us", "3.000 of a bare run's CPU; run CPU 1.500x the bare run's"]
