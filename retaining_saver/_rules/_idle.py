"""Which whole threads an `IdleThreadPolicy` expires, and which it keeps. No I/O.

A thread is judged by its root namespace's newest and oldest checkpoint ids,
which LangGraph makes time-ordered (uuid6): the time is read from the id, so
a store can find idle threads from an index of ids without reading a row.
An id that is not a uuid6 has no time: such a thread is never expired.

A thread waits on a resume when its newest checkpoint owns pending writes
(an interrupt, or the finished tasks of a super-step that did not end), or
holds a value in a trigger channel (`__start__`, `branch:to:NODE`): a task
that has not run (a run not started, a static `interrupt_before`, a run
stopped between super-steps). A task's trigger is consumed when it runs, so
a finished run's head holds none; this is what the graph's `next` reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from retaining_saver._rules._idle_policy import IdleThreadPolicy, ThreadInfo

# 100-ns ticks between the Gregorian epoch of uuid times (1582-10-15) and 1970-01-01.
_GREGORIAN_TO_UNIX_TICKS = 0x01B21DD213814000
_UUID_HEX_LENGTH = 32
_START_CHANNEL = "__start__"
_TRIGGER_PREFIX = "branch:to:"
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class IdleVerdict(StrEnum):
    """What a pass does with one thread, and why."""

    EXPIRED = "expired"
    YOUNG = "young"
    UNKNOWN_AGE = "unknown-age"
    INTERRUPTED = "interrupted"
    VETOED = "vetoed"


@dataclass(frozen=True, slots=True)
class ThreadHead:
    """A thread as the idle-thread scan finds it: its root namespace's newest and
    oldest checkpoint ids."""

    thread_id: str
    newest_id: str
    oldest_id: str


def _uuid_ticks(checkpoint_id: str) -> int | None:
    """A uuid6 checkpoint id's time in 100-ns ticks since the Gregorian epoch; None for an
    id of another kind."""
    digits = checkpoint_id.replace("-", "")
    if len(digits) != _UUID_HEX_LENGTH or digits[12] != "6":
        return None
    try:
        return (int(digits[:12], 16) << 12) | int(digits[13:16], 16)
    except ValueError:
        return None


def checkpoint_time(checkpoint_id: str) -> datetime | None:
    """When a uuid6 checkpoint id was made; None for an id of another kind."""
    ticks = _uuid_ticks(checkpoint_id)
    if ticks is None:
        return None
    micros = (ticks - _GREGORIAN_TO_UNIX_TICKS) // 10
    try:
        return _UNIX_EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        return None


def _ticks_after(moment: datetime, age: timedelta) -> int:
    """The least uuid time (in ticks) whose `checkpoint_time` is later than `moment - age`:
    an id is at least `age` old at `moment` exactly when its time is below this."""
    try:
        micros = (moment - age - _UNIX_EPOCH) // timedelta(microseconds=1)
    except OverflowError:  # before the year 1: no id is that old
        return 0
    return _GREGORIAN_TO_UNIX_TICKS + 10 * (micros + 1)


@dataclass(frozen=True, slots=True)
class AgeBounds:
    """`age_verdict` at one moment, for many threads: each age bound as the uuid time an
    id must be below, so a thread is judged by comparing integers (a pass judges every
    thread it scans).

    Attributes:
        idle_below: A newest id below this time is idle (`idle_for`).
        born_below: An oldest id below this time is past `max_age` (None: no maximum).
    """

    idle_below: int
    born_below: int | None

    @classmethod
    def at(cls, policy: IdleThreadPolicy, now: datetime) -> AgeBounds:
        """The bounds of `policy` at `now`."""
        born = None if policy.max_age is None else _ticks_after(now, policy.max_age)
        return cls(_ticks_after(now, policy.idle_for), born)

    def verdict(self, head: ThreadHead) -> IdleVerdict:
        """`age_verdict` of `head` at these bounds' moment."""
        newest, oldest = _uuid_ticks(head.newest_id), _uuid_ticks(head.oldest_id)
        if newest is None or oldest is None:
            return IdleVerdict.UNKNOWN_AGE
        if newest < self.idle_below:
            return IdleVerdict.EXPIRED
        if self.born_below is not None and oldest < self.born_below:
            return IdleVerdict.EXPIRED
        return IdleVerdict.YOUNG


def age_verdict(head: ThreadHead, policy: IdleThreadPolicy, now: datetime) -> IdleVerdict:
    """EXPIRED if the thread is idle (or past `max_age`) at `now`, by its ids alone."""
    return AgeBounds.at(policy, now).verdict(head)


@dataclass(frozen=True, slots=True)
class HeadFacts:
    """What a pass reads of a thread's newest root checkpoint before judging it.

    Attributes:
        checkpoint_id: Its id.
        metadata: Its metadata.
        pending_writes: How many pending writes it owns.
        channels: The channels that hold a value at it.
    """

    checkpoint_id: str
    metadata: Mapping[str, Any]
    pending_writes: int
    channels: frozenset[str]


def waits_on_resume(head: HeadFacts) -> bool:
    """Whether the checkpoint owns pending writes or holds a trigger for a task not yet run."""
    if head.pending_writes:
        return True
    return any(c == _START_CHANNEL or c.startswith(_TRIGGER_PREFIX) for c in head.channels)


def thread_info(scan: ThreadHead, head: HeadFacts) -> ThreadInfo:
    """What a veto is told of the thread, from its scan and its newest checkpoint."""
    never = datetime.min.replace(tzinfo=UTC)
    return ThreadInfo(
        thread_id=scan.thread_id,
        checkpoint_id=head.checkpoint_id,
        updated_at=checkpoint_time(head.checkpoint_id) or never,
        created_at=checkpoint_time(scan.oldest_id) or never,
        metadata=dict(head.metadata),
        interrupted=waits_on_resume(head),
    )


def thread_verdict(
    scan: ThreadHead,
    head: HeadFacts | None,
    policy: IdleThreadPolicy,
    now: datetime,
    *,
    ask_veto: bool,
) -> IdleVerdict:
    """The verdict on a thread whose newest root checkpoint is `head` (None: it is gone).

    `scan` is what the scan found; the thread is judged on `head`, read
    since, so a checkpoint written meanwhile makes it younger, never older.
    The veto is asked only with `ask_veto`, after every other reason to keep it.
    """
    if head is None:
        return IdleVerdict.YOUNG  # nothing left to expire
    verdict = age_verdict(
        ThreadHead(scan.thread_id, head.checkpoint_id, scan.oldest_id), policy, now
    )
    if verdict is not IdleVerdict.EXPIRED:
        return verdict
    if not policy.delete_interrupted and waits_on_resume(head):
        return IdleVerdict.INTERRUPTED
    if ask_veto and policy.keep_thread is not None and policy.keep_thread(thread_info(scan, head)):
        return IdleVerdict.VETOED
    return IdleVerdict.EXPIRED
