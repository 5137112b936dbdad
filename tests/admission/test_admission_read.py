"""The admission read that reclaims nothing answers exactly what the bare saver answers.

Over `AsyncPostgresSaver` and `AsyncSqliteSaver` the async admission read runs
the saver's own statements through the backend and builds the tuple as the
saver does. `AsyncPostgresSaver` deserializes pending writes in a worker
thread: so does this read, but only when there are any. `AsyncSqliteSaver`
hops to aiosqlite's thread for every cursor call: this read hops once. A
pre-v4 Postgres head, which only the saver can migrate, is read through it,
and so is every sync read.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from savers import KINDS, open_async, open_sync
from spies import Recorder

from retaining_saver import RetainingSaver
from retaining_saver._effects import run
from retaining_saver.backends._base import Mode
from retaining_saver.testing import awrite_duration_leaf, leaf_of
from retaining_saver.testing.graphs import (
    SHAPES,
    arun_shape,
    build_chat_graph,
    build_interrupt_graph,
    chat_turn,
    run_read,
    run_shape,
    thread_config,
)


def _root(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _threads_loading_writes(saver: Any) -> list[threading.Thread]:
    """The threads `saver._load_writes` runs on from now, in call order."""
    threads: list[threading.Thread] = []
    load_writes = saver._load_writes

    def recorded(writes: Any) -> Any:
        threads.append(threading.current_thread())
        return load_writes(writes)

    saver._load_writes = recorded
    return threads


def _same(answer: CheckpointTuple | None, bare: CheckpointTuple | None) -> None:
    assert answer is not None and bare is not None
    assert (answer.config, answer.checkpoint, answer.metadata) == (
        bare.config,
        bare.checkpoint,
        bare.metadata,
    )
    assert answer.parent_config == bare.parent_config
    assert answer.pending_writes == bare.pending_writes


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("kind", KINDS)
def test_admission_read_answers_the_bare_read(
    kind: str, shape: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        run_shape(saver, shape, "plain")
        bare = inner.get_tuple(_root("plain"))
        assert bare is not None
        if shape == "interrupt":
            assert bare.pending_writes, "the head must own writes for this case"
        before = saver.counters.attempted
        _same(saver.get_tuple(run_read("plain")), bare)
        assert saver.get_tuple(run_read("empty")) is None
        assert (saver.counters.attempted - before, saver.counters.reclaimed) == (2, 0)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("kind", KINDS)
async def test_admission_read_answers_the_bare_read_async(
    kind: str, shape: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        await arun_shape(saver, shape, "plain")
        bare = await inner.aget_tuple(_root("plain"))
        assert bare is not None
        if shape == "interrupt":
            assert bare.pending_writes, "the head must own writes for this case"
        before = saver.counters.attempted
        _same(await saver.aget_tuple(run_read("plain")), bare)
        assert await saver.aget_tuple(run_read("empty")) is None
        assert (saver.counters.attempted - before, saver.counters.reclaimed) == (2, 0)


async def test_async_read_deserializes_writes_in_a_worker_thread(
    request: pytest.FixtureRequest,
) -> None:
    """As the async saver does, but only for a head that owns writes."""
    async with open_async("postgres", request) as inner:
        saver = RetainingSaver(inner)
        loaded_on = _threads_loading_writes(inner)
        await build_interrupt_graph(inner).ainvoke({"topic": "retention"}, thread_config("paused"))
        await build_chat_graph(inner).ainvoke(chat_turn(0), thread_config("done"))
        loaded_on.clear()
        answer = await saver.aget_tuple(run_read("paused"))
        assert answer is not None and answer.pending_writes
        assert len(loaded_on) == 1 and loaded_on[0] is not threading.current_thread()
        answer = await saver.aget_tuple(run_read("done"))
        assert answer is not None and not answer.pending_writes
        assert len(loaded_on) == 1  # nothing to deserialize, no hop


@pytest.mark.parametrize("shape", ["chat", "interrupt"])
async def test_async_sqlite_read_makes_one_hop(shape: str, request: pytest.FixtureRequest) -> None:
    """`AsyncSqliteSaver` reads the head in several hops to aiosqlite's thread; the
    admission read runs the same statements, and no others (no transaction), in one."""
    async with open_async("sqlite", request) as inner:
        saver = RetainingSaver(inner)
        await arun_shape(saver, shape, "hops")
        statements: list[str] = []
        await inner.conn.set_trace_callback(statements.append)
        hops = Recorder(inner.conn, ["_execute"])
        bare = await inner.aget_tuple(_root("hops"))
        bare_hops, bare_statements = len(hops.calls), list(statements)
        hops.calls[:], statements[:] = [], []
        answer = await saver.aget_tuple(run_read("hops"))
        wrapped_hops, wrapped_statements = len(hops.calls), list(statements)
        await inner.conn.set_trace_callback(None)
        _same(answer, bare)
        assert (wrapped_hops, bare_hops > 1) == (1, True)
        assert wrapped_statements == bare_statements


def test_sqlite_head_read_runs_outside_a_transaction(request: pytest.FixtureRequest) -> None:
    """The backend's read of the head, as the saver's own: no `BEGIN IMMEDIATE`."""
    with open_sync("sqlite", request) as inner:
        saver = RetainingSaver(inner)
        build_interrupt_graph(inner).invoke({"topic": "retention"}, thread_config("paused"))
        backend = saver._backend
        assert backend is not None
        statements: list[str] = []
        inner.conn.set_trace_callback(statements.append)
        row = run(backend, backend.head_row("paused", ""), Mode.READ)  # type: ignore[attr-defined]
        inner.conn.set_trace_callback(None)
        assert not any("BEGIN" in statement for statement in statements)
        _same(backend.read_tuple(row), inner.get_tuple(_root("paused")))  # type: ignore[attr-defined]


def test_sync_postgres_reads_in_one_statement_too(request: pytest.FixtureRequest) -> None:
    """The sync saver's admission read is the one statement that takes a trailing leaf
    as it reads the head: the saver itself does not read, and the answer is its own."""
    with open_sync("postgres", request) as inner:
        saver = RetainingSaver(inner)
        build_interrupt_graph(inner).invoke({"topic": "retention"}, thread_config("paused"))
        reads = Recorder(inner, ["get_tuple"])
        rounds = Recorder(saver._backend, ["admit_and_read", "head_row"])
        _same(saver.get_tuple(run_read("paused")), inner.get_tuple(_root("paused")))
        assert reads.count("get_tuple") == 1  # the test's own
        assert (rounds.count("admit_and_read"), rounds.count("head_row")) == (1, 0)


async def test_a_pre_v4_head_is_read_through_the_saver(request: pytest.FixtureRequest) -> None:
    """Only the saver migrates a pre-v4 checkpoint's pending sends."""
    async with open_async("postgres", request) as inner:
        saver = RetainingSaver(inner)
        config: RunnableConfig = _root("old")
        for step in range(2):
            checkpoint = {**empty_checkpoint(), "v": 1}
            config = await inner.aput(config, checkpoint, {"source": "loop", "step": step}, {})
        rows = Recorder(saver._backend, ["admit_and_read"])
        reads = Recorder(inner, ["aget_tuple"])
        answer = await saver.aget_tuple(run_read("old"))
        assert (rows.count("admit_and_read"), reads.count("aget_tuple")) == (1, 1)
        _same(answer, await inner.aget_tuple(_root("old")))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_sync_saver_still_has_no_async_read(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """A sync saver has no `aget_tuple`: neither has the wrapper's admission read."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        with pytest.raises(NotImplementedError):
            await inner.aget_tuple(_root("sync"))
        with pytest.raises(NotImplementedError):
            await saver.aget_tuple(run_read("sync"))


async def test_a_failed_build_falls_back_to_the_bare_read(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing was taken, so there is no leaf to account for: the saver's own read
    answers, and the fast path's failure is counted."""
    async with open_async("postgres", request) as inner:
        saver = RetainingSaver(inner)
        await arun_shape(saver, "chat", "broken")

        def broken(*args: Any) -> Any:
            raise ValueError("cannot build this row")

        saver._backend.read_tuple = broken  # type: ignore[method-assign, union-attr]
        answer = await saver.aget_tuple(run_read("broken"))
        assert answer == await inner.aget_tuple(thread_config("broken"))
        assert saver.counters.fallbacks == {"the admission read's fast path": 1}
        assert not any("could not build" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("stamped", [True, False])
async def test_a_take_builds_the_head_in_place(
    stamped: bool, request: pytest.FixtureRequest
) -> None:
    """After a committed take, nothing suspends the admission before it records the
    reclaim: the head's writes are deserialized in place, not in a worker thread. With
    nothing taken, they are deserialized where the saver does it, in a worker thread."""
    async with open_async("postgres", request) as inner:
        events: list[Any] = []
        saver = RetainingSaver(inner, on_reclaim=events.append)
        await build_interrupt_graph(saver).ainvoke({"topic": "retention"}, thread_config("p"))
        parent = await inner.aget_tuple(_root("p"))
        assert parent is not None and parent.pending_writes
        checkpoint, metadata = leaf_of(parent, "run", 1.0)
        if stamped:
            await inner.aput(parent.config, checkpoint, metadata, {})
        loaded_on = _threads_loading_writes(inner)
        answer = await saver.aget_tuple(run_read("p"))
        assert answer is not None and answer.checkpoint["id"] == parent.checkpoint["id"]
        if stamped:
            assert loaded_on == [threading.current_thread()]
            assert [event.checkpoint_id for event in events] == [checkpoint["id"]]
        else:
            assert len(loaded_on) == 1 and loaded_on != [threading.current_thread()]
            assert events == []


@pytest.mark.parametrize("mode", ["pool", "pipeline"])
async def test_admission_read_over_a_pool_and_a_pipeline(
    mode: str, pg_dsn: str, request: pytest.FixtureRequest
) -> None:
    """The backend reads through the saver's own `_cursor()`: its lock, its pooled
    connection, its pipeline synced first."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    async with open_async("postgres", request):
        pass  # runs the migrations: their CREATE INDEX CONCURRENTLY cannot run in a pipeline
    async with contextlib.AsyncExitStack() as stack:
        if mode == "pool":
            pool = AsyncConnectionPool(pg_dsn, min_size=1, max_size=2, kwargs=kwargs, open=False)
            await stack.enter_async_context(pool)
            inner = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        else:
            conn = await AsyncConnection.connect(pg_dsn, **kwargs)
            await stack.enter_async_context(conn)
            pipe = await stack.enter_async_context(conn.pipeline())
            inner = AsyncPostgresSaver(conn, pipe=pipe)
        await inner.setup()
        saver = RetainingSaver(inner)
        await arun_shape(saver, "interrupt", "paused")
        _same(
            await saver.aget_tuple(run_read("paused")),
            await inner.aget_tuple(_root("paused")),
        )
        await arun_shape(saver, "chat", "chat")
        leaf = await awrite_duration_leaf(inner, "chat")
        answer = await saver.aget_tuple(run_read("chat"))
        assert saver.counters.reclaimed == 1
        assert answer is not None and answer.checkpoint["id"] != leaf
        _same(answer, await inner.aget_tuple(_root("chat")))
