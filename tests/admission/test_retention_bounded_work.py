"""Under every policy `retention=` accepts, a thread held by its passes stays held, and so
does what each pass reads: neither grows with the runs a thread has had.

A pass that never carries out its plan, or one that finds too little in its window and
reads on down the thread, shows here as a lineage that grows with every run (both
happened: async passes under a reshaping policy, `compact_steps` alone). No timing: the
nodes each lineage load hands the rules are counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from bounding_kit import RETENTION_SHAPES
from savers import KINDS, open_async

from retaining_saver import RetainingSaver
from retaining_saver._rules import Lineage
from retaining_saver.testing.graphs import chat_graph, thread, turn

EARLY, LATE = range(10, 20), range(40, 50)


def _spy_on_loads(saver: RetainingSaver, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The node count of every lineage the saver's passes load, in order."""
    backend: Any = saver._backend
    loaded: list[int] = []
    load = backend.load_lineage

    def counted(thread_id: str, newest: int | None = None) -> Iterator[Any]:
        lineage: Lineage = yield from load(thread_id, newest)
        loaded.append(len(lineage.nodes))
        return lineage

    monkeypatch.setattr(backend, "load_lineage", counted)
    return loaded


@pytest.mark.parametrize("name", RETENTION_SHAPES)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_held_thread_and_its_passes_stay_the_same_size(
    kind: str, name: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner, retention=RETENTION_SHAPES[name])
        loaded = _spy_on_loads(saver, monkeypatch)
        graph = chat_graph(saver)
        read: dict[int, list[int]] = {}
        held: dict[int, int] = {}
        for i in range(LATE.stop):
            before = len(loaded)
            await graph.ainvoke(turn(i), thread("t"))
            await saver.asettle_history()
            read[i] = loaded[before:]
            held[i] = len([s async for s in graph.aget_state_history(thread("t"))])
        counters = saver.counters
    assert counters.history_failed == 0 and counters.history_reclaimed > 0
    assert max(held[i] for i in LATE) <= max(held[i] for i in EARLY)
    late = [n for i in LATE for n in read[i]]
    assert late and max(late) <= max(n for i in EARLY for n in read[i])
