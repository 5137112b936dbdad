"""`RetentionSweeper` on every backend, threads at chosen ages (the settable clock).

Exactly the idle threads go, by strategy; vetoed, interrupted and young threads
stay as they were; a second pass does nothing; a pass resumes where the last
stopped; a failing thread is counted and the pass goes on.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from savers import KINDS, open_async, open_sync
from sweep_kit import (
    IDLE_FOR,
    INTERRUPTED,
    OLD,
    VETOED,
    YOUNG,
    SweepClock,
    awrite_scene,
    resume,
    set_clock,
    write_scene,
)

from retaining_saver import (
    IdleThreadPolicy,
    RetainingSaver,
    RetentionPolicy,
    RetentionSweeper,
    SweepOutcome,
    ThreadInfo,
)
from retaining_saver._effects import run
from retaining_saver.backends._base import Mode
from retaining_saver.testing.checks import integrity, walk
from retaining_saver.testing.graphs import thread

ALL = (*OLD, VETOED, INTERRUPTED, YOUNG)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SweepClock:
    return set_clock(monkeypatch)


def _veto(info: ThreadInfo) -> bool:
    return info.thread_id == VETOED


def _policy(strategy: Any = "delete", **extra: Any) -> IdleThreadPolicy:
    return IdleThreadPolicy(IDLE_FOR, strategy, keep_thread=_veto, **extra)


def _rows(saver: RetainingSaver, thread_id: str) -> list[tuple[str, str]]:
    """Every checkpoint of the thread, every namespace: (ns, id)."""
    backend = saver._require_backend()
    lineage = run(backend, backend.load_lineage(thread_id), Mode.READ)
    return sorted(lineage.nodes)


def _states(saver: RetainingSaver) -> dict[str, Any]:
    return {t: saver.get_tuple(thread(t)) for t in ALL}


def _same_tuple(a: Any, b: Any) -> bool:
    return (a is None and b is None) or (
        a is not None
        and b is not None
        and a.config == b.config
        and a.checkpoint["channel_values"] == b.checkpoint["channel_values"]
        and a.pending_writes == b.pending_writes
    )


@contextmanager
def _scene(kind: str, request: pytest.FixtureRequest, clock: SweepClock) -> Iterator[Any]:
    """A saver on a fresh store holding the scene; with each thread's rows and head."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        write_scene(saver, clock)
        yield saver, {t: _rows(saver, t) for t in ALL}, _states(saver)


@pytest.mark.parametrize("kind", KINDS)
def test_delete_takes_exactly_the_idle_threads(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    with _scene(kind, request, clock) as (saver, before, heads):
        seen: list[Any] = []
        sweeper = RetentionSweeper(
            saver, _policy(), sweep_limit=100, page_size=2, clock=clock, on_pass=seen.append
        )
        done = sweeper.run_pass()
        assert {r.thread_id: r.outcome for r in done.results} == {
            **dict.fromkeys(OLD, SweepOutcome.DELETED),
            VETOED: SweepOutcome.VETOED,
            INTERRUPTED: SweepOutcome.INTERRUPTED,
        }
        assert done.outcomes[SweepOutcome.YOUNG] == 1 and done.scanned == len(ALL)
        assert done.checkpoints_deleted == sum(len(before[t]) for t in OLD)
        assert done.stopped_after is None and seen == [done]
        for thread_id in OLD:
            assert _rows(saver, thread_id) == []
            assert integrity(saver, thread_id).clean
        for thread_id in (VETOED, INTERRUPTED, YOUNG):
            assert _rows(saver, thread_id) == before[thread_id]
            assert _same_tuple(saver.get_tuple(thread(thread_id)), heads[thread_id])
        again = sweeper.run_pass()
        assert not any(r.outcome == SweepOutcome.DELETED for r in again.results)
        assert sweeper.counters.outcomes[SweepOutcome.DELETED] == len(OLD)
        assert resume(saver)["published"]  # the interrupted thread still answers


@pytest.mark.parametrize("kind", KINDS)
def test_keep_latest_keeps_each_head_as_it_was(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    with _scene(kind, request, clock) as (saver, before, heads):
        sweeper = RetentionSweeper(saver, _policy("keep_latest"), sweep_limit=100, clock=clock)
        done = sweeper.run_pass()
        pruned = {r.thread_id for r in done.results if r.outcome == SweepOutcome.PRUNED}
        assert pruned == set(OLD)
        for thread_id in OLD:
            assert len(_rows(saver, thread_id)) == 1 < len(before[thread_id])
            assert _same_tuple(saver.get_tuple(thread(thread_id)), heads[thread_id])
            assert [t.config for t in walk(saver, thread(thread_id))] == [heads[thread_id].config]
        for thread_id in (VETOED, INTERRUPTED, YOUNG):
            assert _rows(saver, thread_id) == before[thread_id]
        again = sweeper.run_pass()
        assert {r.outcome for r in again.results} <= {
            SweepOutcome.NOTHING_TO_PRUNE,
            SweepOutcome.VETOED,
            SweepOutcome.INTERRUPTED,
        }


@pytest.mark.parametrize("kind", KINDS)
def test_dry_run_changes_nothing_and_says_what_would_go(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    with _scene(kind, request, clock) as (saver, before, _):
        done = RetentionSweeper(saver, _policy(), dry_run=True, clock=clock).run_pass()
        would = {r.thread_id for r in done.results if r.outcome == SweepOutcome.WOULD_DELETE}
        assert would == set(OLD)
        assert done.checkpoints_deleted == sum(len(before[t]) for t in OLD)
        assert {t: _rows(saver, t) for t in ALL} == before


@pytest.mark.parametrize("kind", KINDS)
def test_a_pass_stops_at_its_limit_and_the_next_resumes(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    with _scene(kind, request, clock) as (saver, _, _):
        sweeper = RetentionSweeper(saver, _policy(), sweep_limit=2, page_size=1, clock=clock)
        first = sweeper.run_pass()
        assert [r.thread_id for r in first.results] == list(OLD[:2])
        assert first.stopped_after == OLD[1]
        second = sweeper.run_pass()
        assert second.started_after == OLD[1]
        assert [r.thread_id for r in second.results] == [OLD[2], INTERRUPTED]
        handled = [r.thread_id for p in (first, second) for r in p.results]
        assert len(handled) == len(set(handled))


def test_max_age_expires_a_thread_still_in_use(
    request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    with _scene("memory", request, clock) as (saver, _, _):
        policy = IdleThreadPolicy(IDLE_FOR * 100, "delete", max_age=IDLE_FOR)
        done = RetentionSweeper(saver, policy, clock=clock).run_pass()
        deleted = {r.thread_id for r in done.results if r.outcome == SweepOutcome.DELETED}
        assert deleted == {*OLD, VETOED}  # no veto here; the young one is younger than max_age


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])  # a thread at a time; a batch
def test_a_failing_thread_is_counted_and_the_pass_goes_on(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock, caplog: pytest.LogCaptureFixture
) -> None:
    with _scene(kind, request, clock) as (saver, _, _):

        def veto(info: ThreadInfo) -> bool:
            if info.thread_id == OLD[1]:
                raise RuntimeError("veto service down")
            return False

        policy = IdleThreadPolicy(IDLE_FOR, "delete", keep_thread=veto)
        sweeper = RetentionSweeper(saver, policy, clock=clock)
        done = sweeper.run_pass()
        outcomes = {r.thread_id: r.outcome for r in done.results}
        assert outcomes[OLD[1]] == SweepOutcome.FAILED
        assert outcomes[OLD[0]] == outcomes[OLD[2]] == SweepOutcome.DELETED
        assert done.failed == sweeper.counters.failed == 1
        assert _rows(saver, OLD[1])  # nothing of it was deleted
        assert "veto service down" in caplog.text


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])  # a thread at a time; a batch
def test_a_thread_this_process_holds_is_skipped(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    with _scene(kind, request, clock) as (saver, _, _):
        sweeper = RetentionSweeper(saver, _policy(), clock=clock)
        with saver._locks.hold(OLD[1]):
            done = sweeper.run_pass()
        outcomes = {r.thread_id: r.outcome for r in done.results}
        assert outcomes[OLD[1]] == SweepOutcome.BUSY
        assert outcomes[OLD[0]] == outcomes[OLD[2]] == SweepOutcome.DELETED
        assert _rows(saver, OLD[1])


@pytest.mark.parametrize("kind", KINDS)
async def test_async_pass_and_service(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        await awrite_scene(saver, clock)
        sweeper = RetentionSweeper(saver, _policy(), clock=clock)
        done = await sweeper.arun_pass()
        deleted = {r.thread_id for r in done.results if r.outcome == SweepOutcome.DELETED}
        assert deleted == set(OLD)
        for thread_id in OLD:
            assert await saver.aget_tuple(thread(thread_id)) is None
        async with RetentionSweeper(saver, _policy(), clock=clock) as service:
            while service.last_pass is None:
                await asyncio.sleep(0.01)
        assert service.last_pass is not None and not any(
            r.outcome == SweepOutcome.DELETED for r in service.last_pass.results
        )


def test_run_until_serves_from_a_thread_of_its_own(
    request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    with _scene("sqlite", request, clock) as (saver, _, _):
        stop = threading.Event()
        passes: list[Any] = []

        def after(done: Any) -> None:
            passes.append(done)
            stop.set()  # one pass, then the thread ends

        sweeper = RetentionSweeper(saver, _policy(), clock=clock, on_pass=after)
        worker = threading.Thread(target=sweeper.run_until, args=(stop,))
        worker.start()
        worker.join(timeout=60)
        assert not worker.is_alive() and len(passes) == 1
        assert {r.thread_id for r in passes[0].results if r.outcome == "deleted"} == set(OLD)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_retention_policy_strategy_runs_the_engine_on_idle_threads(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    horizon = RetentionPolicy(history_keep_runs=0, history_min_age=timedelta(0))
    with _scene(kind, request, clock) as (saver, before, heads):
        done = RetentionSweeper(saver, _policy(horizon), clock=clock).run_pass()
        pruned = {r.thread_id for r in done.results if r.outcome == SweepOutcome.PRUNED}
        assert pruned == set(OLD)
        for thread_id in OLD:
            assert len(_rows(saver, thread_id)) < len(before[thread_id])
            assert _same_tuple(saver.get_tuple(thread(thread_id)), heads[thread_id])
        assert _rows(saver, YOUNG) == before[YOUNG]


def test_a_sweeper_rests_pace_times_its_work(
    request: pytest.FixtureRequest, clock: SweepClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pace` rests after a page that found nothing to do, in proportion to its time; the
    rest a page with idle threads earns comes before the next pass, so that a pass's
    idle threads are handled without a pause. A timer that ticks 1 a reading stands in
    for the clock."""
    from retaining_saver._effects import Rest

    rests: list[float] = []
    monkeypatch.setattr(Rest, "perform", lambda self, performer: rests.append(self.seconds))
    ticks = iter(range(1_000_000))
    with _scene("memory", request, clock) as (saver, _, _):
        for pace in (9, 0):
            sweeper = RetentionSweeper(
                saver, _policy(), page_size=1, pace=pace, dry_run=True, clock=clock
            )
            sweeper._timer = lambda: float(next(ticks))
            for _ in range(2):
                rests.clear()
                sweeper.run_pass()
                owed = [rests.pop(0)] if rests and len(rests) > len(ALL) + 1 else []
                # One page a thread, by key: the old ones and the vetoed and interrupted
                # ones (idle by their ids: handled), then the young one, then the end.
                assert rests == [0.0] * 5 + [pace * 1.0] * 2
                passes = sweeper.counters.passes
                # The second pass first rests for the five pages with work of the first,
                # less the tick between the two.
                assert owed == ([5 * pace * 1.0 - 1] if passes == 2 and pace else [])


@pytest.mark.parametrize(
    ("pace", "error"), [(-1, ValueError), (float("nan"), ValueError), ("9", TypeError)]
)
def test_pace_is_a_number_at_least_zero(
    pace: Any, error: type, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    with _scene("memory", request, clock) as (saver, _, _), pytest.raises(error, match="pace"):
        RetentionSweeper(saver, _policy(), pace=pace)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])  # a thread at a time; heads at once
def test_a_stopped_pass_ends_after_the_thread_it_is_on(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    """`run_until`'s stop, set while the first old thread is judged, ends the pass after
    that thread (the old threads' heads were read together on Postgres); the next pass
    resumes after it."""
    with _scene(kind, request, clock) as (saver, before, _):
        sweeper: RetentionSweeper | None = None

        def veto(info: ThreadInfo) -> bool:
            if info.thread_id == OLD[0] and sweeper is not None:
                sweeper._stopping.set()
            return False

        policy = IdleThreadPolicy(IDLE_FOR, "keep_latest", keep_thread=veto)
        sweeper = RetentionSweeper(saver, policy, clock=clock)
        done = sweeper.run_pass()
        assert done.cancelled and [r.thread_id for r in done.results] == [OLD[0]]
        assert done.stopped_after == OLD[0] == sweeper.resume_after
        assert _rows(saver, OLD[1]) == before[OLD[1]]
