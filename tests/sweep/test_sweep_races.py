"""The sweep against other writers: a thread that changed between its verdict and its
transaction stays; one another sweeper holds (Postgres advisory lock) is skipped; a
cancelled pass leaves no thread half done. (test_sweep_bound: a thread written during its
deletion, on Postgres.)"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from savers import KINDS, open_async, open_sync
from sweep_kit import IDLE_FOR, OLD, SweepClock, awrite_scene, set_clock, write_scene

from retaining_saver import IdleThreadPolicy, RetainingSaver, RetentionSweeper, SweepOutcome
from retaining_saver._effects import arun, run
from retaining_saver.backends._base import Mode
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
        # old threads are one batch, each its own transaction in one round trip: the cancel
        # lands in that round trip, the pass reports none of them, and each is whole or gone.
        handled = [r.thread_id for r in sweeper.last_pass.results]
        assert handled in (([],) if kind == "postgres" else ([OLD[0]], list(OLD[:2])))
        if kind != "postgres":
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
