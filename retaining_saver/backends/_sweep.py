"""What the idle-thread sweep needs of a store beyond `Backend`, and the transaction it
runs per thread.

Each store module (`_postgres_sweep`, `_sqlite_sweep`, `_memory_sweep`) implements
`SweepStore`, the SQL ones over statements named in their store's SQL module: the scan that finds
threads by key with their newest and oldest root checkpoint ids (index-backed
on the SQL stores, one page at a time), the lock that keeps two sweepers off
one thread (Postgres: a transaction-scoped advisory lock, taken with try),
and the deletion of a whole thread. `locked_act` is the per-thread
transaction: the lock, the re-check of what the verdict was made on, then
the act.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from retaining_saver._rules._idle import HeadFacts, ThreadHead
from retaining_saver._rules._thread_checks import Held as Held
from retaining_saver._rules._thread_checks import JudgedThread, ThreadFacts, ThreadRecheck
from retaining_saver.backends._base import Backend, Op, T
from retaining_saver.backends._sql import Statement


class ThreadChanged(Exception):
    """The thread got a row while it was being deleted: the transaction rolls back."""


Judged = tuple[str, str, int]
"""A thread judged expired: its id, its newest root checkpoint's id and that one's pending
writes (what a verdict was made on, and its transaction re-checks)."""


class BatchDeletes(Protocol):
    """A store that deletes a batch of expired threads in one round trip (`SweepStore.batches`)."""

    def delete_batch_unchanged(
        self, judged: Sequence[Judged]
    ) -> Op[dict[str, int | Held | Exception]]:
        """`SweepStore.delete_unchanged` of each of `judged`, each in a transaction of its
        own (run in `Mode.APART`), by thread id: the checkpoints deleted, why none were,
        or what made its transaction fail (and roll back). A thread that got a row while
        it was being deleted is rolled back, `Held.CHANGED`."""
        ...


class SweepStore(ABC):
    """The idle-thread scan, the per-thread lock and whole-thread deletion of one store."""

    batch_size: ClassVar[int] = 1
    """The most expired threads handled together (`batches`): above 1 where the store
    reads their heads in one statement and sends their transactions, one a thread, in one
    round trip."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.batches: BatchDeletes | None = None
        """The store itself where its `batch_size` is above 1; None otherwise."""

    def prepare(self) -> Op[None]:
        """Create what the scan's index needs, in a write transaction (SQLite: on first use)."""
        yield from ()

    @abstractmethod
    def scan(self, after: str | None, limit: int) -> Op[list[ThreadHead]]:
        """Up to `limit` threads with a root checkpoint, by thread id after `after`, each
        with its newest and oldest root checkpoint ids. Runs as a read."""

    def head_facts(self, thread_id: str) -> Op[HeadFacts | None] | None:
        """An operation reading what a verdict needs of the thread's newest root
        checkpoint (None: it has none), where the store can read it in fewer round trips
        than the saver's own read; None where the sweep must use the saver's read."""
        return None

    def batch_head_facts(self, thread_ids: Sequence[str]) -> Op[dict[str, HeadFacts]] | None:
        """`head_facts` of each of `thread_ids` that has a root checkpoint, by thread id, in
        one operation; None where the sweep must use the saver's read of each."""
        return None

    def lock_thread(self, thread_id: str) -> Op[bool]:
        """Try to take the thread for this transaction; False if another sweeper has it.

        By default the transaction itself excludes every other writer.
        """
        yield from ()
        return True

    def delete_unchanged(self, thread_id: str, head_id: str, head_writes: int) -> Op[int | Held]:
        """Take the thread and delete it whole if it is as judged (see `locked_act`): the
        checkpoints deleted, or why nothing was. A store may do it in fewer statements."""
        return delete_unchanged(self, thread_id, head_id, head_writes)

    @abstractmethod
    def delete_thread(self, thread_id: str) -> Op[int]:
        """Delete every row of the thread (every namespace, writes, blobs, reclaim
        records); the checkpoints deleted.

        Raises:
            ThreadChanged: If a row of the thread is still there at the end (another
                writer committed one meanwhile); the transaction must roll back.
        """


@dataclass(frozen=True, slots=True)
class SweepTexts:
    """A SQL store's sweep statements. The scan binds `after` and `limit` by name; every
    other statement binds `thread_id` by name.

    Attributes:
        scan_first: The scan from the first thread.
        scan_after: The scan from the first thread after `after`.
        delete_rows: The deletes of the thread's rows in the tables beside `checkpoints`
            (reclaim records included) that `delete_checkpoints` does not make itself.
        delete_checkpoints: The delete of its checkpoints, answering a row for each.
        select_left: Whether any row of the thread is left (`found`).
    """

    scan_first: str
    scan_after: str
    delete_rows: tuple[str, ...]
    delete_checkpoints: str
    select_left: str


class SqlSweep(SweepStore):
    """`SweepStore` over a SQL store's `SweepTexts`."""

    texts: ClassVar[SweepTexts]

    def scan(self, after: str | None, limit: int) -> Op[list[ThreadHead]]:
        if after is None:
            rows = yield Statement(self.texts.scan_first, {"limit": limit}, fetch=True)
        else:
            params = {"after": after, "limit": limit}
            rows = yield Statement(self.texts.scan_after, params, fetch=True)
        return [ThreadHead(r["thread_id"], r["newest_id"], r["oldest_id"]) for r in rows]

    def delete_thread(self, thread_id: str) -> Op[int]:
        key = {"thread_id": str(thread_id)}
        for text in self.texts.delete_rows:
            yield Statement(text, key)
        deleted = yield Statement(self.texts.delete_checkpoints, key, fetch=True)
        yield from self._nothing_left(thread_id)
        return len(deleted)

    def _nothing_left(self, thread_id: str) -> Op[None]:
        """Raise `ThreadChanged` if a row of the thread is there (committed meanwhile)."""
        key = {"thread_id": str(thread_id)}
        left = yield Statement(self.texts.select_left, key, fetch=True)
        facts = ThreadFacts(locked=True, rows_left=bool(left[0]["found"]))
        recheck = ThreadRecheck(JudgedThread(thread_id, "", 0))  # its deletes judged already
        if not recheck.left_nothing(facts):  # check: nothing-left
            raise ThreadChanged(thread_id)


def delete_unchanged(
    store: SweepStore, thread_id: str, judged_id: str, judged_writes: int
) -> Op[int | Held]:
    """`locked_act` deleting the whole thread: the checkpoints deleted, or why none."""
    return locked_act(
        store, thread_id, judged_id, judged_writes, lambda: store.delete_thread(thread_id)
    )


def advisory_key(thread_id: str) -> int:
    """A stable signed 64-bit key for the thread, the same in every process and version."""
    digest = hashlib.blake2b(f"retaining-saver:sweep:{thread_id}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def locked_act(
    store: SweepStore,
    thread_id: str,
    judged_id: str,
    judged_writes: int,
    act: Callable[[], Op[T]],
) -> Op[T | Held]:
    """Take the thread, re-check that its newest root checkpoint is still `judged_id`
    with `judged_writes` pending writes (the facts its verdict was made on), then `act`.

    Run as one write transaction: nothing of the thread is changed unless all of it holds.
    """
    recheck = ThreadRecheck(JudgedThread(thread_id, judged_id, judged_writes))
    locked = yield from store.lock_thread(thread_id)  # check: locked
    head: Any = (yield from store.backend.head_node(thread_id, "")) if locked else None
    facts = ThreadFacts(
        locked=locked,
        head_id=None if head is None else head.checkpoint_id,
        head_writes=0 if head is None else head.write_count,
    )
    # check: head-as-judged
    # check: writes-as-judged
    if (held := recheck.held(facts)) is not None:
        return held
    return (yield from act())
