"""The pure idle-thread rules and `IdleThreadPolicy`'s validation."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6

from retaining_saver import IdleThreadPolicy, RetentionPolicy
from retaining_saver._rules._idle import (
    HeadFacts,
    IdleVerdict,
    ThreadHead,
    age_verdict,
    checkpoint_time,
    thread_verdict,
    waits_on_resume,
)

DAY = timedelta(days=1)


def test_checkpoint_time_reads_a_uuid6_and_nothing_else() -> None:
    before = datetime.now(UTC)
    made = checkpoint_time(str(uuid6(clock_seq=3)))
    assert made is not None and abs(made - before) < timedelta(seconds=5)
    assert checkpoint_time(str(uuid.uuid4())) is None
    assert checkpoint_time("1") is None
    assert checkpoint_time("zzzzzzzz-zzzz-6zzz-zzzz-zzzzzzzzzzzz") is None


def _id_at(moment: datetime, sub_micro: int = 0) -> str:
    """A uuid6 id made at `moment`, `sub_micro` ticks (of 100 ns, below 10) past it."""
    ticks = (moment - datetime(1582, 10, 15, tzinfo=UTC)) // timedelta(microseconds=1) * 10
    ticks += sub_micro
    digits = f"{ticks >> 12:012x}6{ticks & 0xFFF:03x}8000000000000000"
    return str(uuid.UUID(digits))


@pytest.mark.parametrize("max_age", [None, 30 * DAY])
def test_age_bounds_are_the_datetime_reading_to_the_tick(max_age: timedelta | None) -> None:
    """The integer bounds a pass judges by agree with ages read as datetimes, at and
    around each bound, sub-microsecond ticks included."""
    now = datetime(2026, 12, 5, 10, 0, 0, 123456, tzinfo=UTC)
    policy = IdleThreadPolicy(7 * DAY, max_age=max_age)
    near = [timedelta(microseconds=m) for m in (-2, -1, 0, 1, 2)]
    young = _id_at(now - DAY)
    for edge in (policy.idle_for, max_age or policy.idle_for):
        for delta in near:
            for sub in (0, 9):
                checkpoint_id = _id_at(now - edge + delta, sub)
                made = checkpoint_time(checkpoint_id)
                assert made is not None and made == now - edge + delta
                for scan in (
                    ThreadHead("t", checkpoint_id, checkpoint_id),
                    ThreadHead("t", young, checkpoint_id),
                ):
                    newest, oldest = (
                        checkpoint_time(scan.newest_id),
                        checkpoint_time(scan.oldest_id),
                    )
                    assert newest is not None and oldest is not None
                    old = max_age is not None and now - oldest >= max_age
                    expected = now - newest >= policy.idle_for or old
                    verdict = age_verdict(scan, policy, now)
                    assert (verdict is IdleVerdict.EXPIRED) is expected, (edge, delta, sub, scan)


def _head(channels: frozenset[str] = frozenset(), writes: int = 0) -> HeadFacts:
    return HeadFacts(str(uuid6(clock_seq=1)), {"source": "loop"}, writes, channels)


@pytest.mark.parametrize(
    ("channels", "writes", "waiting"),
    [
        (frozenset({"messages"}), 0, False),
        (frozenset({"messages"}), 1, True),  # an interrupt, a partly done step
        (frozenset({"messages", "branch:to:review"}), 0, True),  # interrupt_before
        (frozenset({"__start__"}), 0, True),  # a run not started
    ],
)
def test_waits_on_resume(channels: frozenset[str], writes: int, waiting: bool) -> None:
    assert waits_on_resume(_head(channels, writes)) is waiting


def test_verdicts_in_order_age_interrupt_veto() -> None:
    head = _head()
    scan = ThreadHead("t", head.checkpoint_id, head.checkpoint_id)
    now = datetime.now(UTC) + 8 * DAY
    asked: list[Any] = []

    def veto(info: Any) -> bool:
        asked.append(info)
        return True

    policy = IdleThreadPolicy(7 * DAY, keep_thread=veto)
    assert age_verdict(scan, policy, now - 2 * DAY) is IdleVerdict.YOUNG
    assert thread_verdict(scan, head, policy, now, ask_veto=False) is IdleVerdict.EXPIRED
    assert thread_verdict(scan, head, policy, now, ask_veto=True) is IdleVerdict.VETOED
    assert asked[0].thread_id == "t" and not asked[0].interrupted
    waiting = _head(writes=1)
    scan = ThreadHead("t", waiting.checkpoint_id, waiting.checkpoint_id)
    assert thread_verdict(scan, waiting, policy, now, ask_veto=True) is IdleVerdict.INTERRUPTED
    assert len(asked) == 1  # never asked about a thread kept anyway
    bold = IdleThreadPolicy(7 * DAY, delete_interrupted=True)
    assert thread_verdict(scan, waiting, bold, now, ask_veto=True) is IdleVerdict.EXPIRED
    unknown = ThreadHead("t", "1", "1")
    assert age_verdict(unknown, policy, now) is IdleVerdict.UNKNOWN_AGE


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"idle_for": 7}, TypeError, "idle_for"),
        ({"idle_for": timedelta(0)}, ValueError, "idle_for"),
        ({"idle_for": DAY, "strategy": "purge"}, ValueError, "strategy"),
        ({"idle_for": DAY, "strategy": 3}, TypeError, "strategy"),
        ({"idle_for": DAY, "max_age": -DAY}, ValueError, "max_age"),
        ({"idle_for": DAY, "keep_thread": "yes"}, TypeError, "keep_thread"),
        ({"idle_for": DAY, "delete_interrupted": 1}, TypeError, "delete_interrupted"),
        ({"idle_for": DAY, "delta_graph": object()}, ValueError, "delta_graph"),
    ],
)
def test_policy_names_the_bad_input(kwargs: dict[str, Any], error: type, names: str) -> None:
    with pytest.raises(error, match=names):
        IdleThreadPolicy(**kwargs)


def test_policy_takes_a_retention_policy() -> None:
    horizon = RetentionPolicy(history_keep_runs=2, history_min_age=DAY)
    assert IdleThreadPolicy(DAY, horizon).strategy is horizon
