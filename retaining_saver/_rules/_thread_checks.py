"""What a whole thread's deletion re-checks in its transaction (the idle-thread sweep),
stated once, as data. No I/O.

A sweep judges a thread expired on its newest root checkpoint and that
checkpoint's pending writes (`_idle`). Its transaction then takes the thread, so
that no other sweeper deletes it at once (`locked`); finds that head and its writes
as they were judged (`head-as-judged`, `writes-as-judged`), so that a run since is
never lost; deletes every row of the thread; and finds none left at the end
(`nothing-left`): a row a writer committed meanwhile rolls the deletion back. The
table is `_checks.PRECONDITIONS[DeletionKind.THREAD]`; the sweep's Python verdicts run
these predicates, and each statement that guards a whole thread's deletion names
them in `-- check:` comments.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from retaining_saver._rules._check import Check, first_failed


class Held(StrEnum):
    """Why a thread's transaction deleted nothing."""

    BUSY = "busy"
    CHANGED = "changed"


@dataclass(frozen=True, slots=True)
class JudgedThread:
    """A thread a sweep judged expired: its newest root checkpoint and that one's pending
    writes, as the verdict read them."""

    thread_id: str
    head_id: str
    head_writes: int


@dataclass(frozen=True, slots=True)
class ThreadFacts:
    """What the deleting transaction reads of the thread.

    Attributes:
        locked: Whether the transaction took the thread (no other sweeper holds it).
        head_id: Its newest root checkpoint now; None if it has none.
        head_writes: That checkpoint's pending writes now.
        rows_left: After its deletes, whether a row of the thread is there; False
            before they run.
    """

    locked: bool
    head_id: str | None = None
    head_writes: int = 0
    rows_left: bool = False


def _locked(judged: JudgedThread, facts: ThreadFacts) -> bool:
    return facts.locked


def _head_as_judged(judged: JudgedThread, facts: ThreadFacts) -> bool:
    return facts.head_id == judged.head_id


def _writes_as_judged(judged: JudgedThread, facts: ThreadFacts) -> bool:
    return facts.head_writes == judged.head_writes


def _nothing_left(judged: JudgedThread, facts: ThreadFacts) -> bool:
    return not facts.rows_left


LOCKED = Check("locked", "no other sweeper holds the thread", _locked)
HEAD_AS_JUDGED = Check(
    "head-as-judged", "its newest root checkpoint is the one judged", _head_as_judged
)
WRITES_AS_JUDGED = Check(
    "writes-as-judged", "that checkpoint owns the pending writes judged", _writes_as_judged
)
NOTHING_LEFT = Check("nothing-left", "no row of it is there after its deletes", _nothing_left)

THREAD_CHECKS = (LOCKED, HEAD_AS_JUDGED, WRITES_AS_JUDGED, NOTHING_LEFT)
"""A whole thread's checks, in the order its transaction runs them."""

BEFORE_DELETES = THREAD_CHECKS[:3]
"""The checks that hold before the deletes run; `NOTHING_LEFT` is read after them."""


@dataclass(frozen=True, slots=True)
class ThreadRecheck:
    """The rules' side of deleting one judged thread: a backend reads the facts its
    transaction finds and carries out what this answers (`THREAD_CHECKS`)."""

    judged: JudgedThread

    def held(self, facts: ThreadFacts) -> Held | None:
        """Why the deletes may not run on `facts` (`BEFORE_DELETES`, in order): busy where
        another sweeper holds the thread, changed where it is not as judged; None where
        they may."""
        failed = first_failed(BEFORE_DELETES, self.judged, facts)
        if failed is None:
            return None
        return Held.BUSY if failed is LOCKED else Held.CHANGED

    def left_nothing(self, facts: ThreadFacts) -> bool:
        """Whether the deletes, done, left no row of the thread (else they roll back)."""
        return NOTHING_LEFT.predicate(self.judged, facts)
