"""Per thread, whether an admission's history pass may be skipped without a read: the
amortised pass of `retention=` (see `_bounding`).

A thread at the horizon of N runs may grow `slack_runs(N)` runs more before a pass
deletes them together; a pass that kept young runs waits for the first of them to
age (`_rules._ages.next_age_crossing`). `Rooms` counts, per thread, the admissions
of this process since its last pass; `room_left` says, from that pass's plan, how
many more may skip it.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from dataclasses import dataclass
from datetime import datetime

from retaining_saver._lru import BoundedLru
from retaining_saver._rules import (
    CheckpointNode,
    Lineage,
    Plan,
    Protection,
    RetentionPolicy,
    split_runs,
)
from retaining_saver._rules._recheck import Applied

SLACK_DIVISOR = 2
"""A thread at the horizon of `N` runs may grow `N // SLACK_DIVISOR` runs more before an
admission runs the pass again (`slack_runs`), which then deletes them all in one
transaction: most admissions at the horizon skip it, without a read."""

ROOMS_TRACKED = 10_000
"""Threads whose room under the horizon this process remembers (least recent go)."""

UNSETTLED = -1
"""A room after a pass that left work for later: every admission is due."""

UNTIL_AGED = sys.maxsize
"""A room after a pass that kept young runs beyond the horizon: a new run pushes out only
younger ones, so only time (the room's `due_at`) makes the next pass due."""

_WAITING = frozenset({Protection.TOO_YOUNG, Protection.YOUNG_PARENT})
"""What a later pass may delete with no new run: the same checkpoints, once older."""


@dataclass(frozen=True)
class _Room:
    left: int
    head_id: str | None
    due_at: datetime | None = None
    reserved: bool = True
    """The run last admitted has not yet put its input: that put takes no room."""


class Rooms:
    """Per thread, whether an admission may skip the history pass, without a read.

    After a pass that left the root head line `k` runs under a horizon of `N`,
    `N + slack_runs(N) - k` more admissions may (`slack_runs(N)` where more than `N`
    runs stay, protected): each adds at most one run (a run without new input adds
    none). An admission that finds the head it found last time (nothing written
    since) may too. A pass that kept checkpoints for their age is due again once
    the first of them is old (`due_at`, `next_age_crossing`), and not before when
    it kept young runs beyond the horizon (`UNTIL_AGED`). A thread it does not
    know (first seen, or forgotten) is due, and so is every admission after a pass
    that left work for later (`UNSETTLED`). Runs another process adds are not
    counted here; that process's own admissions bound them.

    A run no admission reserved, one that `update_state(...,
    as_node="__input__")` writes, takes a room when its input is put (`grew`): the
    first root input put after an admission is that admission's run's, and any other
    takes one more. So a thread holds at most `N + slack_runs(N)` runs and the one
    just admitted; when such runs use up the room, the next admission is due.
    """

    def __init__(self) -> None:
        self._rooms: BoundedLru[str, _Room] = BoundedLru(ROOMS_TRACKED)
        self._lock = threading.Lock()

    def due(self, thread_id: str, head_id: str | None, now: datetime) -> bool:
        """Whether this admission, at `head_id` and `now`, runs the pass; if not, the room
        it used is taken."""
        with self._lock:
            room = self._rooms.get(thread_id)
            if room is None or not _skips(room, head_id, now):
                return True
            if room.head_id != head_id:
                taken = dataclasses.replace(
                    room, left=room.left - 1, head_id=head_id, reserved=True
                )
                self._rooms.put(thread_id, taken)
            return False

    def grew(self, thread_id: str) -> None:
        """This process put a root input checkpoint on the thread: a run began. The run
        the last admission reserved takes no more room; any other takes one."""
        with self._lock:
            room = self._rooms.get(thread_id)
            if room is None:
                return
            if room.reserved:
                self._rooms.put(thread_id, dataclasses.replace(room, reserved=False))
            else:
                self._rooms.put(thread_id, dataclasses.replace(room, left=room.left - 1))

    def would_skip(self, thread_id: str, head_id: str | None, now: datetime) -> bool:
        """`not due(...)`, without counting the admission."""
        with self._lock:
            room = self._rooms.get(thread_id)
        return room is not None and _skips(room, head_id, now)

    def left(
        self, thread_id: str, left: int, head_id: str | None, due_at: datetime | None = None
    ) -> None:
        with self._lock:
            self._rooms.put(thread_id, _Room(left, head_id, due_at))

    def forget(self, thread_id: str) -> None:
        with self._lock:
            self._rooms.pop(thread_id)


def _skips(room: _Room, head_id: str | None, now: datetime) -> bool:
    """Whether `room` lets an admission at `head_id` and `now` skip the pass."""
    if room.left < 0 or (room.due_at is not None and now >= room.due_at):
        return False
    return room.head_id == head_id or room.left > 0


def slack_runs(horizon: int) -> int:
    """How many runs beyond a horizon of `horizon` runs a thread may hold before the next
    pass: half of it, rounded down (none under a horizon of 0 or 1 run)."""
    return horizon // SLACK_DIVISOR


def head_line_runs(lineage: Lineage, head_id: str | None) -> list[list[CheckpointNode]]:
    """The runs of the root namespace's line ending at `head_id`, oldest first."""
    line = []
    node = lineage.nodes.get(("", head_id)) if head_id is not None else None
    while node is not None:
        line.append(node)
        node = lineage.parent(node)
    return split_runs(line[::-1])


def room_left(
    lineage: Lineage,
    plan: Plan,
    applied: Applied,
    policy: RetentionPolicy,
    due_at: datetime | None = None,
    run_kept: bool = False,
) -> int:
    """How many admissions that add a run may skip the pass after this one, the slack
    included (see `Rooms`); `UNSETTLED` if the pass left work for later (deferred or
    dropped deletions, or it read a window of the thread); `UNTIL_AGED` if it kept
    young runs beyond the horizon and one of its checkpoints grows old at `due_at`
    (`next_age_crossing`), which then makes the next pass due. `run_kept`: the pass
    kept the ids its run addresses, which the next run's pass no longer keeps."""
    horizon = policy.history_keep_runs
    if plan.deferred or applied.dropped or lineage.window_start is not None:
        return UNSETTLED  # a pass in a window did what it could see: more may lie below
    if horizon is None:
        return 0
    gone = {(d.checkpoint_ns, d.checkpoint_id) for d in applied.deleted}
    runs = head_line_runs(lineage, plan.heads.get(""))
    kept = sum(1 for run in runs if any(("", n.checkpoint_id) not in gone for n in run))
    if kept <= horizon:
        return horizon + slack_runs(horizon) - kept
    # More runs than the horizon stay, protected. Young ones are the newest past it, so
    # every run a new one pushes out is younger still: nothing goes until one is old.
    # Runs kept for good (pending writes, fork memory, explicit ids) leave the slack.
    # (A checkpoint of unknown age is young for ever, and proves nothing of the others.)
    if _WAITING.intersection(plan.kept.values()) and due_at is not None:
        return UNTIL_AGED
    return UNSETTLED if run_kept else slack_runs(horizon)
