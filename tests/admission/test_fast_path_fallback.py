"""A fast path built on upstream internals never fails a run the bare saver serves.

The async admission read over the SQL savers runs the saver's statements and
builds the tuple itself. If an upstream release changes what that relies on,
the read falls back to the saver's own `aget_tuple`, logs once and counts.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from savers import open_async

from retaining_saver import RetainingSaver
from retaining_saver.testing import awrite_duration_leaf
from retaining_saver.testing.graphs import chat_graph, run_read, thread, turn

THREAD = "fallback"


def _drifted(*args: Any, **kwargs: Any) -> Any:
    raise KeyError("channel_values")  # as a renamed column or helper would fail


# Postgres reads the head in the statement that takes a leaf (`admit_and_read`): a failed
# statement is a failed cleanup; what rests on upstream internals is building its row.
@pytest.mark.parametrize(
    ("kind", "broken"),
    [("sqlite", "head_row"), ("sqlite", "read_tuple"), ("postgres", "read_tuple")],
)
async def test_a_broken_fast_path_falls_back_to_the_saver(
    kind: str, broken: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = chat_graph(saver)
        await graph.ainvoke(turn(0), thread(THREAD))
        assert saver._backend is not None
        setattr(saver._backend, broken, _drifted)
        with caplog.at_level(logging.WARNING, logger="retaining_saver"):
            for i in (1, 2):
                await graph.ainvoke(turn(i), thread(THREAD))
            answer = await saver.aget_tuple(run_read(THREAD))
        bare = await inner.aget_tuple(thread(THREAD))
    assert answer == bare
    assert saver.counters.fallbacks == {"the admission read's fast path": 3}
    assert sum("fell back" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_stamped_thread_still_reclaims_after_a_fallback(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = chat_graph(saver)
        await graph.ainvoke(turn(0), thread(THREAD))
        await awrite_duration_leaf(inner, THREAD)  # from another process
        assert saver._backend is not None
        broken = "head_row" if kind == "sqlite" else "read_tuple"
        setattr(saver._backend, broken, _drifted)
        await graph.ainvoke(turn(1), thread(THREAD))
        state = await graph.aget_state(thread(THREAD))
    assert saver.counters.reclaimed == 1
    assert state.values["said"][-1] == "echo user 1"
