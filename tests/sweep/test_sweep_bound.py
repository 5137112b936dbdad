"""On Postgres a batch of expired threads is deleted in one round trip, each thread in its
own transaction: a run that meets one of them waits for that thread's work only.

Each test holds a row of the batch's middle thread (`OLD[1]`) from another connection,
so that the sweep's deletion waits on it, and looks at the store while it waits
(`pg_stat_activity` says when: no timing is asserted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from savers import open_async, open_sync
from sweep_kit import IDLE_FOR, OLD, SweepClock, awrite_scene, set_clock, write_scene

from retaining_saver import IdleThreadPolicy, RetainingSaver, RetentionSweeper, SweepOutcome
from retaining_saver.backends import _postgres_sweep
from retaining_saver.backends._sweep import advisory_key

FIRST, HELD, LAST = OLD


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SweepClock:
    return set_clock(monkeypatch)


@asynccontextmanager
async def _sweeping(
    how: str, request: pytest.FixtureRequest, clock: SweepClock
) -> AsyncIterator[tuple[Callable[[], Awaitable[Any]], int]]:
    """A store with the sweep scene, and a pass to start on it (the sync saver's in a
    worker thread), with the pid of the sweep's connection."""
    if how == "async":
        async with open_async("postgres", request) as inner:
            await awrite_scene(inner, clock)
            sweeper = RetentionSweeper(
                RetainingSaver(inner), IdleThreadPolicy(IDLE_FOR), clock=clock
            )
            yield sweeper.arun_pass, inner.conn.info.backend_pid  # type: ignore[attr-defined]
    else:
        with open_sync("postgres", request) as inner:
            write_scene(inner, clock)
            sweeper = RetentionSweeper(
                RetainingSaver(inner), IdleThreadPolicy(IDLE_FOR), clock=clock
            )
            pid = inner.conn.info.backend_pid  # type: ignore[attr-defined]
            yield (lambda: asyncio.to_thread(sweeper.run_pass)), pid


async def _waits_on_a_lock(probe: psycopg.AsyncConnection[Any], pid: int) -> None:
    """Return once the backend `pid` waits on a lock (polled: a state, not a time)."""
    for _ in range(3000):
        cur = await probe.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        )
        if (await cur.fetchone()) == ("Lock",):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the sweep never waited on the held row")


async def _rows(probe: psycopg.AsyncConnection[Any], thread_id: str) -> int:
    cur = await probe.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread_id,))
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _free(probe: psycopg.AsyncConnection[Any], thread_id: str) -> bool:
    """Whether the thread's advisory lock is free (taken and, autocommit, let go at once)."""
    cur = await probe.execute(
        "SELECT pg_try_advisory_xact_lock(%s::bigint)", (advisory_key(thread_id),)
    )
    return (await cur.fetchone()) == (True,)


@asynccontextmanager
async def _holding(dsn: str, thread_id: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A transaction holding a checkpoint row of `thread_id` (`FOR UPDATE`) while the block
    runs, then rolled back; yields its connection."""
    async with await psycopg.AsyncConnection.connect(dsn) as holder:
        await holder.execute(
            "SELECT 1 FROM checkpoints WHERE thread_id = %s LIMIT 1 FOR UPDATE", (thread_id,)
        )
        try:
            yield holder
        finally:
            await holder.rollback()


@pytest.mark.parametrize("how", ["sync", "async"])
async def test_a_thread_s_locks_end_with_its_own_transaction(
    how: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    """While the batch's second thread waits on a row another transaction holds, the first
    thread's deletion is committed and its advisory lock free, and the third's not taken:
    one thread's transaction holds only that thread. (One transaction for the batch held
    all three locks and the first thread's deleted rows until the end.)"""
    dsn = str(request.getfixturevalue("pg_dsn"))
    async with (
        _sweeping(how, request, clock) as (run_pass, pid),
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as probe,
    ):
        before = await _rows(probe, LAST)
        async with _holding(dsn, HELD):
            sweep = asyncio.ensure_future(run_pass())
            await _waits_on_a_lock(probe, pid)
            assert await _rows(probe, FIRST) == 0  # committed, alone
            assert await _free(probe, FIRST)
            assert not await _free(probe, HELD)  # its own transaction, waiting
            assert await _rows(probe, LAST) == before and await _free(probe, LAST)
        done = await sweep
        outcomes = {r.thread_id: r.outcome for r in done.results}
        assert [outcomes[t] for t in OLD] == [SweepOutcome.DELETED] * 3
        assert [await _rows(probe, t) for t in OLD] == [0, 0, 0]


_REVIVE = """
INSERT INTO checkpoints
    (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata)
SELECT thread_id, checkpoint_ns, %s, checkpoint_id, type, checkpoint, metadata
FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''
ORDER BY checkpoint_id DESC LIMIT 1
"""


async def test_a_row_written_during_a_thread_s_deletion_rolls_back_that_thread_alone(
    request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    """A writer commits a checkpoint to the held thread while its deletion waits (after the
    deletion's snapshot, so the deletion misses it): that thread's transaction finds the
    row and rolls back whole; the threads before and after it in the batch go."""
    from langgraph.checkpoint.base.id import uuid6

    dsn = str(request.getfixturevalue("pg_dsn"))
    async with (
        _sweeping("async", request, clock) as (run_pass, pid),
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as probe,
    ):
        before = await _rows(probe, HELD)
        async with _holding(dsn, HELD) as holder:
            sweep = asyncio.ensure_future(run_pass())
            await _waits_on_a_lock(probe, pid)
            await holder.execute(_REVIVE, (str(uuid6(clock_seq=7)), HELD))
            await holder.commit()  # the revival lands; the held row goes free
        done = await sweep
        outcomes = {r.thread_id: r.outcome for r in done.results}
        assert outcomes[HELD] == SweepOutcome.CHANGED
        assert outcomes[FIRST] == outcomes[LAST] == SweepOutcome.DELETED
        assert await _rows(probe, HELD) == before + 1  # rolled back: all of it is there
        assert await _rows(probe, FIRST) == await _rows(probe, LAST) == 0


async def test_a_thread_whose_transaction_fails_fails_alone(
    request: pytest.FixtureRequest,
    clock: SweepClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One thread's statement fails (a parameter the database refuses): its transaction
    rolls back, it is counted failed and logged, and the rest of the batch goes, in the
    round trip that follows."""
    judged = _postgres_sweep._judged

    def breaking(thread_id: str, head_id: str, head_writes: int) -> dict[str, object]:
        params = judged(thread_id, head_id, head_writes)
        return params | {"write_count": "not a number"} if thread_id == HELD else params

    monkeypatch.setattr(_postgres_sweep, "_judged", breaking)
    caplog.set_level(logging.ERROR, "retaining_saver")
    dsn = str(request.getfixturevalue("pg_dsn"))
    async with (
        _sweeping("async", request, clock) as (run_pass, _),
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as probe,
    ):
        before = await _rows(probe, HELD)
        done = await run_pass()
        outcomes = {r.thread_id: r.outcome for r in done.results}
        assert outcomes[HELD] == SweepOutcome.FAILED
        assert outcomes[FIRST] == outcomes[LAST] == SweepOutcome.DELETED
        assert await _rows(probe, HELD) == before
        assert f"sweeping thread {HELD!r} failed" in caplog.text


def test_a_thread_s_transaction_commits_without_waiting_for_the_flush(
    request: pytest.FixtureRequest,
) -> None:
    """The deletion statement sets `synchronous_commit` off for its own transaction only."""
    from retaining_saver.backends._postgres_sql_sweep import DELETE_THREAD_IF_UNCHANGED_SQL

    with open_sync("postgres", request) as inner:
        RetainingSaver(inner).create_retention_indexes()  # the reclaim records' table too
        conn = inner.conn  # type: ignore[attr-defined]
        params = {"thread_id": "none", "key": 1, "checkpoint_id": "x", "write_count": 0}
        with conn.transaction():
            conn.execute(DELETE_THREAD_IF_UNCHANGED_SQL, params)
            assert conn.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == "off"
        assert conn.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == "on"


def test_a_connection_that_does_not_autocommit_deletes_thread_by_thread(
    request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    """On a connection that does not autocommit (psycopg begins a transaction itself), each
    thread is still committed alone, and the connection is left in no transaction."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.pq import TransactionStatus
    from psycopg.rows import dict_row

    dsn = str(request.getfixturevalue("pg_dsn"))
    with open_sync("postgres", request) as inner:
        write_scene(inner, clock)
        RetainingSaver(inner).create_retention_indexes()
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        saver = RetainingSaver(PostgresSaver(conn))
        done = RetentionSweeper(saver, IdleThreadPolicy(IDLE_FOR), clock=clock).run_pass()
        outcomes = {r.thread_id: r.outcome for r in done.results}
        assert [outcomes[t] for t in OLD] == [SweepOutcome.DELETED] * 3
        assert conn.info.transaction_status is TransactionStatus.IDLE
    with psycopg.connect(dsn) as probe:
        for thread_id in OLD:
            row = probe.execute(
                "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread_id,)
            )
            assert row.fetchone() == (0,)


async def test_a_batch_whose_round_trip_fails_goes_one_thread_at_a_time(
    request: pytest.FixtureRequest,
    clock: SweepClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If the batch's round trip fails as a whole, each thread is deleted in a transaction
    of its own, one at a time."""

    def broken(self: Any, judged: Any) -> Any:
        raise RuntimeError("the round trip broke")
        yield

    monkeypatch.setattr(_postgres_sweep.PostgresSweep, "delete_batch_unchanged", broken)
    async with _sweeping("async", request, clock) as (run_pass, _):
        done = await run_pass()
    outcomes = {r.thread_id: r.outcome for r in done.results}
    assert [outcomes[t] for t in OLD] == [SweepOutcome.DELETED] * 3
    assert "the round trip broke" in caplog.text
