"""Admission detection, bounded work, cache-first deletion, failures and read retry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from savers import KINDS, open_sync
from spies import Recorder

from retaining_saver import (
    CheckpointNotFoundError,
    DeltaHistoryCache,
    ReclaimEvent,
    RetainingSaver,
    Skip,
)
from retaining_saver._effects import run
from retaining_saver.backends import postgres as postgres_backend
from retaining_saver.backends._base import Backend
from retaining_saver.testing import RUNTIME_KEY, write_duration_leaf
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, run_read, thread_config


def _pinned(thread_id: str, checkpoint_id: str | None) -> dict[str, Any]:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id,
        }
    }


def test_runtime_key_is_langgraphs() -> None:
    from langgraph._internal._constants import CONFIG_KEY_RUNTIME

    assert RUNTIME_KEY == CONFIG_KEY_RUNTIME


def test_installed_langgraph_marks_only_run_reads() -> None:
    inner = InMemorySaver()
    reads = Recorder(inner, ["get_tuple"])
    graph = build_chat_graph(inner)
    config = thread_config("detect")
    graph.invoke(chat_turn(0), config)
    run_reads = [c for _, c in reads.calls]
    assert RUNTIME_KEY in run_reads[0]["configurable"]
    assert not run_reads[0]["configurable"].get("checkpoint_id")
    reads.calls.clear()
    graph.get_state(config)
    list(graph.get_state_history(config))
    assert all(RUNTIME_KEY not in c["configurable"] for _, c in reads.calls)


# What one admission may do, by the backend primitive that does it. A round is
# the parent's lookup with the leaf's write probe, then the guarded delete:
# `leaf_facts` and `take_leaf` on one transaction, or one statement on Postgres.
LOOKUPS = ("get_tuple", "head_row", "head_node")
ROUND = ("reclaim_leaf", "leaf_facts", "take_leaf", "admit_and_read")
SCANS = ("list", "load_lineage", "stats", "integrity", "thread_ids", "delete_unreferenced_blobs")


def _admission_calls(
    saver: RetainingSaver, inner: Any, admit: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> dict[str, int]:
    """Run `admit`, counting the saver's reads, backend primitives and Postgres statements."""
    reads = Recorder(inner, ["get_tuple", "list"])
    backend: Backend = saver._backend  # type: ignore[assignment]
    ops = Recorder(backend, [n for n in LOOKUPS + ROUND + SCANS if hasattr(backend, n)])
    statements: list[Any] = []
    original = postgres_backend._execute

    def counted(cur: Any, statement: Any) -> Any:
        statements.append(statement)
        return original(cur, statement)

    monkeypatch.setattr(postgres_backend, "_execute", counted)
    admit()
    counts = {name: reads.count(name) + ops.count(name) for name in LOOKUPS + ROUND + SCANS}
    counts["postgres statements"] = len(statements)
    return counts


@pytest.mark.parametrize("way", ["admission-read", "admit", "read-after-own-stamp"])
@pytest.mark.parametrize("kind", KINDS)
def test_admission_work_is_bounded_and_flat(
    kind: str, way: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per admission: the head and the parent looked up once each, the leaf's writes
    probed inside the parent lookup, one delete, no scan; the same at 2 and 40 turns.
    On Postgres the admission read takes the leaf in the statement that reads the head,
    whoever stamped it."""
    explicit, own_stamp = way == "admit", way == "read-after-own-stamp"
    counts = []
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        saver.create_retention_indexes()  # as README says, once beside setup()
        stamper = saver if own_stamp else inner
        graph = build_chat_graph(stamper)
        for turns, thread_id in ((2, "short"), (40, "long")):
            for turn in range(turns):
                graph.invoke(chat_turn(turn), thread_config(thread_id))
                leaf = write_duration_leaf(stamper, thread_id)
            config = run_read(thread_id)

            def admit(
                thread_id: str = thread_id,
                config: Any = config,
                leaf: Any = leaf,
                before: int = saver.counters.reclaimed,
            ) -> None:
                if explicit:
                    assert saver.admit(thread_id).reclaimed == (leaf,)
                else:
                    saver.get_tuple(config)
                    assert saver.counters.reclaimed == before + 1

            counts.append(_admission_calls(saver, inner, admit, monkeypatch))
    assert counts[0] == counts[1]
    calls = counts[0]
    assert all(calls[name] == 0 for name in SCANS)
    if kind == "postgres" and not explicit:  # no read first: one statement takes and reads
        assert (calls["get_tuple"], calls["admit_and_read"], calls["reclaim_leaf"]) == (0, 1, 0)
        assert calls["postgres statements"] == 1
        return
    head_lookups = (calls["get_tuple"], calls["head_row"], calls["head_node"])
    assert head_lookups == ((0, 0, 1) if explicit else (1, 0, 0))  # or the run's own read
    assert (calls["reclaim_leaf"], calls["admit_and_read"]) == (1, 0)
    if kind == "postgres":  # one statement: parent lookup, leaf write probe, guarded delete
        assert calls["postgres statements"] == 1 + int(explicit)
    else:
        assert calls["leaf_facts"] == 1 and calls["take_leaf"] == 1


def test_stacked_leaves_reclaimed_within_bound() -> None:
    inner = InMemorySaver()
    saver = RetainingSaver(inner)
    graph = build_chat_graph(saver)
    graph.invoke(chat_turn(0), thread_config("stack"))
    run_head = saver.get_tuple(thread_config("stack"))
    leaves = [write_duration_leaf(inner, "stack", f"r{i}") for i in range(5)]
    result = saver.admit("stack")
    # At most MAX_STACKED_LEAVES (3) per admission, newest first; the rest next time.
    assert result.reclaimed == tuple(reversed(leaves[2:]))
    assert saver.admit("stack").reclaimed == tuple(reversed(leaves[:2]))
    assert run_head is not None
    assert saver.get_tuple(thread_config("stack")).checkpoint["id"] == run_head.checkpoint["id"]


class BrokenCache(DeltaHistoryCache):
    def invalidate(self, thread_id: str, checkpoint_ns: str, checkpoint_ids: Sequence[str]) -> None:
        raise RuntimeError("cache is down")


def test_failed_invalidation_keeps_checkpoint_and_run_succeeds() -> None:
    inner = InMemorySaver()
    saver = RetainingSaver(inner, history_caches=[BrokenCache()])
    graph = build_chat_graph(saver)
    graph.invoke(chat_turn(0), thread_config("c"))
    leaf = write_duration_leaf(saver, "c")
    assert graph.invoke(chat_turn(1), thread_config("c"))["turns"] == 2
    assert inner.get_tuple(_pinned("c", leaf)) is not None
    assert saver.counters.skipped.get(Skip.CACHE_INVALIDATION_FAILED.value) == 1


def test_cache_is_invalidated_before_deletion() -> None:
    inner = InMemorySaver()
    cache = DeltaHistoryCache()
    saver = RetainingSaver(inner, history_caches=[cache])
    graph = build_chat_graph(saver)
    graph.invoke(chat_turn(0), thread_config("c"))
    leaf = write_duration_leaf(saver, "c")
    assert leaf is not None
    saver.get_delta_channel_history(config=_pinned("c", leaf), channels=["messages"])
    assert len(cache) == 1
    saver.admit("c")
    assert len(cache) == 0


def test_cache_refilled_during_the_take_is_invalidated_again() -> None:
    """A reader may refill a cache between the first invalidation and the delete."""
    inner = InMemorySaver()
    cache = DeltaHistoryCache()
    saver = RetainingSaver(inner, history_caches=[cache])
    build_chat_graph(saver).invoke(chat_turn(0), thread_config("c"))
    leaf = write_duration_leaf(saver, "c")
    assert saver._backend is not None
    take = saver._backend.reclaim_leaf

    def refill_then_take(*args: Any, **kwargs: Any) -> Any:
        saver.get_delta_channel_history(config=_pinned("c", leaf), channels=["messages"])
        assert len(cache) == 1
        return (yield from take(*args, **kwargs))

    saver._backend.reclaim_leaf = refill_then_take  # type: ignore[method-assign]
    assert saver.admit("c").reclaimed == (leaf,)
    assert len(cache) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_stack_ends_at_a_leaf_with_writes(kind: str, request: pytest.FixtureRequest) -> None:
    """Under the leaf taken, a stacked leaf that owns writes ends the stack, named as such."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        build_chat_graph(inner).invoke(chat_turn(0), thread_config("w"))
        lower = write_duration_leaf(inner, "w", "r1")
        inner.put_writes(_pinned("w", lower), [("said", "late")], "late-task")
        upper = write_duration_leaf(inner, "w", "r2")
        result = saver.admit("w")
        assert (result.reclaimed, result.skipped, result.head_id) == ((upper,), None, lower)
        assert saver.counters.skipped == {}


def _next_turn_with_broken(
    saver: RetainingSaver, thread_id: str, method: str, stamper: Any = None
) -> str:
    """Run a turn, stamp a leaf, make `saver._backend.<method>` raise, run a turn; the leaf.

    By default the leaf is stamped by another process (straight to the store),
    so admission reads the head before taking it.
    """
    graph = build_chat_graph(saver)
    graph.invoke(chat_turn(0), thread_config(thread_id))
    leaf = write_duration_leaf(stamper or saver.inner, thread_id)
    assert leaf is not None

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise OSError(f"{method} is broken")

    setattr(saver._backend, method, explode)
    assert graph.invoke(chat_turn(1), thread_config(thread_id))["turns"] == 2
    return leaf


def test_cleanup_error_is_logged_and_read_proceeds(caplog: pytest.LogCaptureFixture) -> None:
    inner = InMemorySaver()
    saver = RetainingSaver(inner)
    leaf = _next_turn_with_broken(saver, "e", "reclaim_leaf")
    assert inner.get_tuple(_pinned("e", leaf)) is not None
    assert saver.counters.failed == 1
    assert any("thread e" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("stamped_by", ["another-process", "this-saver"])
@pytest.mark.parametrize("kind", KINDS)
def test_failed_parent_build_still_counts_the_reclaim(
    kind: str, stamped_by: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """The leaf is gone once the parent it hands the run is built: a failed build reads it instead.
    Postgres builds it from the head row the statement that took the leaf read."""
    with open_sync(kind, request) as inner:
        events: list[ReclaimEvent] = []
        saver = RetainingSaver(inner, on_reclaim=events.append)
        own = stamped_by == "this-saver"
        builder = "read_tuple" if saver._one_round is not None else "parent_tuple"
        leaf = _next_turn_with_broken(saver, "s", builder, saver if own else None)
        assert inner.get_tuple(_pinned("s", leaf)) is None
        assert (saver.counters.reclaimed, saver.counters.failed) == (1, 0)
        assert [event.checkpoint_id for event in events] == [leaf]
        if saver._one_round is not None:  # the admission read's own row: its fast path
            assert saver.counters.fallbacks == {"the admission read's fast path": 1}
        else:
            assert any("could not build the head" in r.getMessage() for r in caplog.records)


def test_on_reclaim_and_counters() -> None:
    events: list[ReclaimEvent] = []
    saver = RetainingSaver(InMemorySaver(), on_reclaim=events.append)
    graph = build_chat_graph(saver)
    graph.invoke(chat_turn(0), thread_config("o"))
    leaf = write_duration_leaf(saver, "o")
    graph.invoke(chat_turn(1), thread_config("o"))
    assert [e.checkpoint_id for e in events] == [leaf]
    assert events[0].head_id is not None
    assert saver.counters.reclaimed == 1 and saver.counters.attempted == 2


def _vanishing_inner(leaf_parent: str) -> tuple[InMemorySaver, list[int]]:
    """An InMemorySaver whose next unpinned read loses its target while hydrating."""
    inner = InMemorySaver()
    armed = [0]
    original = inner.get_tuple

    def racing(config: Any) -> Any:
        found = original(config)
        if armed[0] and found is not None and not config["configurable"].get("checkpoint_id"):
            armed[0] -= 1
            ns = inner.storage[config["configurable"]["thread_id"]][""]
            del ns[found.checkpoint["id"]]  # another worker reclaims it right now
        return found

    inner.get_tuple = racing  # type: ignore[method-assign]
    return inner, armed


def test_unpinned_read_racing_a_reclaim_is_retried_once() -> None:
    inner, armed = _vanishing_inner("")
    saver = RetainingSaver(inner, admission="off")
    graph = build_chat_graph(saver)
    graph.invoke(chat_turn(0), thread_config("r"))
    head = saver.get_tuple(thread_config("r"))
    leaf = write_duration_leaf(saver, "r")
    armed[0] = 1
    found = saver.get_tuple(thread_config("r"))
    assert found is not None and head is not None
    assert found.checkpoint["id"] == head.checkpoint["id"] != leaf
    assert found.checkpoint["channel_versions"] == head.checkpoint["channel_versions"]


def test_a_pinned_read_of_a_reclaimed_id_answers_its_clone() -> None:
    """A reclaimed duplicate's id names the clone that survives it, in every wrapper of
    the store; an id that was never reclaimed still finds nothing (or raises)."""
    inner = InMemorySaver()
    saver = RetainingSaver(inner)
    strict = RetainingSaver(inner, strict_pinned_reads=True)
    graph = build_chat_graph(saver)
    graph.invoke(chat_turn(0), thread_config("p"))
    leaf = write_duration_leaf(saver, "p")
    assert leaf is not None
    result = strict.admit("p")
    assert result.reclaimed == (leaf,) and result.head_id is not None
    clone = inner.get_tuple(_pinned("p", result.head_id))
    assert clone is not None
    assert saver.get_tuple(_pinned("p", leaf)) == clone
    assert strict.get_tuple(_pinned("p", leaf)) == clone
    never = "1f000000-0000-6000-8000-000000000000"
    assert saver.get_tuple(_pinned("p", never)) is None
    with pytest.raises(CheckpointNotFoundError) as raised:
        strict.get_tuple(_pinned("p", never))
    assert raised.value.checkpoint_id == never
    assert raised.value.clone_id is None


def test_lock_registry_does_not_grow() -> None:
    saver = RetainingSaver(InMemorySaver())
    for i in range(500):
        saver.admit(f"thread-{i}")
    assert len(saver._locks) == 0


async def test_async_locks_work_across_event_loops() -> None:
    import asyncio
    import threading

    saver = RetainingSaver(InMemorySaver())
    await saver.aadmit("x")
    errors: list[BaseException] = []

    def other_loop() -> None:
        try:
            asyncio.run(saver.aadmit("x"))
        except BaseException as error:
            errors.append(error)

    worker = threading.Thread(target=other_loop)
    worker.start()
    worker.join()
    assert errors == []


@pytest.mark.parametrize("kind", KINDS)
def test_delta_history_of_a_vanished_target_is_rebuilt(
    kind: str, request: pytest.FixtureRequest
) -> None:
    from retaining_saver.testing.graphs import chat_graph, thread, turn

    with open_sync(kind, request) as inner:
        graph = chat_graph(inner, "delta")
        for i in range(4):
            graph.invoke(turn(i), thread("d"))
        leaf = write_duration_leaf(inner, "d")
        assert leaf is not None
        expected = inner.get_delta_channel_history(config=thread("d", leaf), channels=["said"])
        assert expected["said"]["writes"] or "seed" in expected["said"]
        saver = RetainingSaver(inner, admission="off")
        resolved = saver.get_tuple(thread("d"))  # an unpinned read resolves the leaf
        assert resolved is not None and resolved.checkpoint["id"] == leaf
        backend = saver._backend
        assert backend is not None
        run(backend, backend.delete_checkpoint("d", "", leaf))  # another worker reclaims it
        got = saver.get_delta_channel_history(config=thread("d", leaf), channels=["said"])
        assert got == expected
        bare = inner.get_delta_channel_history(config=thread("d", leaf), channels=["said"])
        assert not bare["said"]["writes"] and "seed" not in bare["said"]
