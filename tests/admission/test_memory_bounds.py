"""What the library keeps per thread in memory is bounded in bytes, not only in entries.

Apps stamp large run-history metadata, and heads hold whole states: neither
may be kept alive by the wrapper between reads.
"""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from retaining_saver import RetainingSaver
from retaining_saver._lru import BoundedLru
from retaining_saver._rules import RetentionPolicy
from retaining_saver._run_reads import RUNS_TRACKED
from retaining_saver._stamps import MAX_STAMPS_BYTES, OwnStamps
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import thread_config

MB = 1024 * 1024


def _stamp_config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": "p"}}


def _stamp(thread_id: str, metadata_bytes: int) -> tuple[Any, Any]:
    checkpoint = {"id": f"{thread_id}-leaf", "ts": "", "channel_versions": {}, "versions_seen": {}}
    metadata = {"source": "update", "run_durations": {"r": 1.0}, "blob": "x" * metadata_bytes}
    return checkpoint, metadata


def test_stamps_hold_a_bounded_number_of_bytes() -> None:
    stamps = OwnStamps(RetentionPolicy())
    for i in range(120):
        stamps.remember(_stamp_config(f"big-{i}"), *_stamp(f"big-{i}", 2 * MB))
    assert len(stamps) == 0, "a 2 MB stamp is looked up when needed, never remembered"
    for i in range(400):
        stamps.remember(_stamp_config(f"t-{i}"), *_stamp(f"t-{i}", 60 * 1024))
    assert 0 < stamps.bytes <= MAX_STAMPS_BYTES
    assert stamps.peek("t-399") is not None and stamps.peek("t-0") is None


def test_the_lru_keeps_its_bounds() -> None:
    lru: BoundedLru[int, str] = BoundedLru(3, size_of=len, max_bytes=10, max_entry_bytes=6)
    for i in range(5):
        lru.put(i, "abc")
    assert len(lru) == 3 and lru.get(0) is None and lru.get(4) == "abc"
    assert lru.put(4, "x" * 7) == "abc", "too large: not kept, and the old value is gone"
    assert lru.get(4) is None and lru.bytes == 6
    lru.get(2)
    lru.put(9, "abcdef")  # over 10 bytes in all: the least recently used goes
    assert (lru.get(3), lru.get(2), lru.bytes) == (None, "abc", 9)
    lru.drop_where(lambda key: key == 9)
    assert len(lru) == 1 and lru.bytes == 3


class Big(TypedDict):
    payload: str


def test_reads_of_leaf_shaped_heads_keep_no_state_alive() -> None:
    inner = InMemorySaver()
    builder: Any = StateGraph(Big)
    builder.add_node("grow", lambda state: {"payload": state["payload"] + "!"})
    builder.add_edge(START, "grow")
    builder.add_edge("grow", END)
    graph = builder.compile(checkpointer=inner)
    threads = [f"big-{i}" for i in range(40)]
    for thread_id in threads:
        graph.invoke({"payload": "y" * MB}, thread_config(thread_id))
        write_duration_leaf(inner, thread_id)
    saver = RetainingSaver(inner, admission="explicit")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for thread_id in threads:
            assert saver.get_tuple(thread_config(thread_id)) is not None
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert saver._retry is not None
    assert len(saver._retry) == len(threads), "each read remembered its target"
    assert kept < MB, f"the wrapper kept {kept} bytes alive after {len(threads)} reads of 1 MB"


@dataclass
class Context:
    """A run's `context`, which a test can watch being freed (a weak reference)."""

    user: str


def test_a_runs_context_lives_until_runs_tracked_newer_runs_have_read() -> None:
    """What the README says the wrapper keeps alive per run, and no more: a run's
    `Runtime` (so its `context`), until `RUNS_TRACKED` newer runs have read through it.
    The bare saver keeps none."""
    builder: Any = StateGraph(Big, context_schema=Context)
    builder.add_node("grow", lambda state: {"payload": state["payload"] + "!"})
    builder.add_edge(START, "grow")
    builder.add_edge("grow", END)

    def watched_run(graph: Any, thread_id: str) -> weakref.ref[Context]:
        context = Context(thread_id)
        graph.invoke({"payload": ""}, thread_config(thread_id), context=context)
        return weakref.ref(context)

    watched = watched_run(builder.compile(checkpointer=InMemorySaver()), "bare")
    gc.collect()
    assert watched() is None, "the bare saver keeps no run's context"
    graph = builder.compile(checkpointer=RetainingSaver(InMemorySaver()))
    watched = watched_run(graph, "wrapped")
    for i in range(RUNS_TRACKED - 1):
        graph.invoke({"payload": ""}, thread_config(f"wrapped-{i % 8}"), context=Context("x"))
    gc.collect()
    assert watched() is not None, "kept while fewer than RUNS_TRACKED newer runs have read"
    graph.invoke({"payload": ""}, thread_config("wrapped-last"), context=Context("x"))
    gc.collect()
    assert watched() is None, "freed once RUNS_TRACKED newer runs have read"
