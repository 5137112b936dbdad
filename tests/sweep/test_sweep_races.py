"""The sweep against other writers: a thread that changed between its verdict and its
transaction stays; one another sweeper holds (Postgres advisory lock) is skipped; a
cancelled pass leaves no thread half done."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from savers import KINDS, open_async, open_sync
from sweep_kit import IDLE_FOR, OLD, VETOED, SweepClock, awrite_scene, set_clock, write_scene

from retaining_saver import IdleThreadPolicy, RetainingSaver, RetentionSweeper, SweepOutcome
from retaining_saver._effects import arun, run
from retaining_saver.backends._base import Mode
from retaining_saver.backends._postgres_sql_sweep import DELETE_BATCH_IF_UNCHANGED_SQL
from retaining_saver.backends._postgres_sweep import PostgresSweep
from retaining_saver.backends._sweep import advisory_key
from retaining_saver.testing.checks import aintegrity
from retaining_saver.testing.graphs import chat_graph, thread, turn


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SweepClock:
    return set_clock(monkeypatch)


def _count(saver: RetainingSaver, thread_id: str) -> int:
    backend = saver._require_backend()
    return len(run(backend, backend.load_lineage(thread_id), Mode.READ).nodes)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
def test_a_thread_written_after_its_verdict_stays(
    kind: str, strategy: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        write_scene(saver, clock)
        # Another writer (the bare saver, as another process would) runs a turn on the
        # thread while the veto is asked: after the verdict, before the transaction.
        revived = OLD[0]

        def veto(info: Any) -> bool:
            if info.thread_id == revived:
                chat_graph(inner).invoke(turn(9), thread(revived))
            return False

        policy = IdleThreadPolicy(IDLE_FOR, strategy, keep_thread=veto)  # type: ignore[arg-type]
        before = _count(saver, revived)
        done = RetentionSweeper(saver, policy, clock=clock).run_pass()
        outcomes = {r.thread_id: r.outcome for r in done.results}
        assert outcomes[revived] == SweepOutcome.CHANGED
        handled = SweepOutcome.DELETED if strategy == "delete" else SweepOutcome.PRUNED
        assert outcomes[OLD[1]] == outcomes[OLD[2]] == handled  # its batch's others go
        assert _count(saver, revived) > before
        state = chat_graph(saver).get_state(thread(revived)).values
        assert state["said"][-2:] == ["user 9", "echo user 9"]


async def test_a_thread_another_sweeper_holds_is_skipped(
    request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    async with open_async("postgres", request) as inner:
        saver = RetainingSaver(inner)
        await awrite_scene(saver, clock)
        dsn = str(request.getfixturevalue("pg_dsn"))
        async with await psycopg.AsyncConnection.connect(dsn) as other, other.transaction():
            held = await other.execute(
                "SELECT pg_try_advisory_xact_lock(%s::bigint)", (advisory_key(OLD[1]),)
            )
            assert (await held.fetchone()) == (True,)
            policy = IdleThreadPolicy(IDLE_FOR)
            done = await RetentionSweeper(saver, policy, clock=clock).arun_pass()
        outcomes = {r.thread_id: r.outcome for r in done.results}
        assert outcomes[OLD[1]] == SweepOutcome.BUSY
        assert outcomes[OLD[0]] == outcomes[OLD[2]] == SweepOutcome.DELETED
        assert await saver.aget_tuple(thread(OLD[1])) is not None


# A new root checkpoint for the thread: a copy of its head under a newer id.
_REVIVE = """
INSERT INTO checkpoints
    (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata)
SELECT thread_id, checkpoint_ns, %s, checkpoint_id, type, checkpoint, metadata
FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''
ORDER BY checkpoint_id DESC LIMIT 1
"""


@pytest.mark.parametrize("race", ["a writer", "an error"])
async def test_a_batch_rolled_back_goes_one_thread_at_a_time(
    race: str,
    request: pytest.FixtureRequest,
    clock: SweepClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Postgres deletes the old threads as one batch. A writer commits a checkpoint to one
    of them after the batch's delete read its snapshot (so the delete missed it), or the
    batch's statement fails: the batch rolls back whole, then each thread goes alone, and
    only the revived one stays."""
    from langgraph.checkpoint.base.id import uuid6

    async with open_async("postgres", request) as inner:
        saver = RetainingSaver(inner)
        await awrite_scene(saver, clock)
        dsn = str(request.getfixturevalue("pg_dsn"))
        revived, batches = OLD[1], []
        batch = PostgresSweep.delete_batch_unchanged

        def racing(self: PostgresSweep, judged: Any) -> Any:
            batches.append([t for t, _, _ in judged])
            op = batch(self, judged)
            statement = next(op)
            while True:
                answer = yield statement
                if statement.sql is DELETE_BATCH_IF_UNCHANGED_SQL and len(judged) > 1:
                    if race == "an error":
                        raise RuntimeError("the batch broke")
                    with psycopg.connect(dsn, autocommit=True) as other:
                        other.execute(_REVIVE, (str(uuid6(clock_seq=7)), revived))
                try:
                    statement = op.send(answer)
                except StopIteration as done:
                    return done.value

        monkeypatch.setattr(PostgresSweep, "delete_batch_unchanged", racing)
        backend = saver._require_backend()
        before = await arun(backend, backend.load_lineage(revived), Mode.READ)
        policy = IdleThreadPolicy(IDLE_FOR, keep_thread=lambda info: info.thread_id == VETOED)
        done = await RetentionSweeper(saver, policy, clock=clock).arun_pass()
        assert batches[0] == list(OLD)  # one batch, then each thread alone
        assert batches[1:] == [[t] for t in OLD]
        outcomes = {r.thread_id: r.outcome for r in done.results}
        assert outcomes[OLD[0]] == outcomes[OLD[2]] == SweepOutcome.DELETED
        for thread_id in (OLD[0], OLD[2]):
            assert not (await arun(backend, backend.load_lineage(thread_id), Mode.READ)).nodes
        if race == "a writer":
            assert outcomes[revived] == SweepOutcome.CHANGED
            after = await arun(backend, backend.load_lineage(revived), Mode.READ)
            assert len(after.nodes) == len(before.nodes) + 1  # the batch rolled back
        else:
            assert outcomes[revived] == SweepOutcome.DELETED
            assert "the batch broke" in caplog.text


@pytest.mark.parametrize("kind", KINDS)
async def test_a_cancelled_pass_leaves_no_thread_half_done(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        await awrite_scene(saver, clock)
        backend = saver._require_backend()
        before = {t: await arun(backend, backend.load_lineage(t), Mode.READ) for t in OLD}
        task: asyncio.Task[Any] | None = None

        def veto(info: Any) -> bool:
            if info.thread_id == OLD[1] and task is not None:
                task.cancel()  # lands in the thread's transaction, or just before it
            return False

        sweeper = RetentionSweeper(saver, IdleThreadPolicy(IDLE_FOR, keep_thread=veto), clock=clock)
        task = asyncio.ensure_future(sweeper.arun_pass())
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sweeper.last_pass is not None and sweeper.last_pass.cancelled
        # Cancelled at the second thread's veto: in its transaction, or (a store whose
        # calls never suspend) at the next thread; the third is untouched. On Postgres the
        # old threads are one batch: cancelled in its transaction, none of them is done.
        handled = [r.thread_id for r in sweeper.last_pass.results]
        assert handled in (([],) if kind == "postgres" else ([OLD[0]], list(OLD[:2])))
        third = await arun(backend, backend.load_lineage(OLD[2]), Mode.READ)
        assert sorted(third.nodes) == sorted(before[OLD[2]].nodes)
        for thread_id in OLD:
            now = await arun(backend, backend.load_lineage(thread_id), Mode.READ)
            assert sorted(now.nodes) in ([], sorted(before[thread_id].nodes))
            assert (await aintegrity(saver, thread_id)).clean
        task = None
        again = await sweeper.arun_pass()  # the next pass finishes the job
        assert not again.cancelled
        for thread_id in OLD:
            assert not (await arun(backend, backend.load_lineage(thread_id), Mode.READ)).nodes
