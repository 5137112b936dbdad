"""One expired thread, judged and handled: the flow a sweep runs per thread.

The thread is judged on its newest root checkpoint as read now (the veto
asked last), then handled in one write transaction that takes the thread
(`locked_act`: the advisory lock on Postgres), re-checks that its newest
root checkpoint and that checkpoint's pending writes are still what it was
judged on, and deletes it whole or carries out its plan. A thread that
changed meanwhile is left for a later pass; so is one another sweeper holds.

`sweep_batch` is the "delete" strategy on several threads at once, for a
store that deletes batches (Postgres): the same judging and re-checks, with
one read for all the heads and one round trip carrying every thread's own
transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from retaining_saver import _rules
from retaining_saver._effects import Flow, Invalidate, Lookup, Mode, Run
from retaining_saver._engine import _changed_ids, _values
from retaining_saver._rules import RetentionPolicy
from retaining_saver._rules._idle import HeadFacts, IdleVerdict, ThreadHead, thread_verdict
from retaining_saver._rules._idle_policy import IdleThreadPolicy
from retaining_saver._rules._recheck import Applied
from retaining_saver.backends._apply import PlanChanged
from retaining_saver.backends._sweep import (
    BatchDeletes,
    Held,
    SweepStore,
    ThreadChanged,
    locked_act,
)

logger = logging.getLogger("retaining_saver")


class SweepOutcome(StrEnum):
    """What a pass did with one thread it found idle by its ids."""

    DELETED = "deleted"
    PRUNED = "pruned"
    WOULD_DELETE = "would-delete"
    WOULD_PRUNE = "would-prune"
    NOTHING_TO_PRUNE = "nothing-to-prune"
    GONE = "gone"
    YOUNG = "young"
    UNKNOWN_AGE = "unknown-age"
    INTERRUPTED = "interrupted"
    VETOED = "vetoed"
    BUSY = "busy"
    CHANGED = "changed"
    FAILED = "failed"


_KEPT = {
    IdleVerdict.YOUNG: SweepOutcome.YOUNG,
    IdleVerdict.UNKNOWN_AGE: SweepOutcome.UNKNOWN_AGE,
    IdleVerdict.INTERRUPTED: SweepOutcome.INTERRUPTED,
    IdleVerdict.VETOED: SweepOutcome.VETOED,
}


@dataclass(frozen=True, slots=True)
class ThreadResult:
    """One thread a pass handled.

    Attributes:
        thread_id: The thread.
        outcome: What happened to it.
        checkpoints: Checkpoints deleted (or, in a dry run, that would be).
        clones: Each deleted duplicate's (ns, id) and the clone its id names
            (a `RetentionPolicy` strategy may reclaim duplicates).
    """

    thread_id: str
    outcome: SweepOutcome
    checkpoints: int = 0
    clones: Mapping[tuple[str, str], str] | None = None


def sweep_thread(
    store: SweepStore,
    scan: ThreadHead,
    policy: IdleThreadPolicy,
    engine_policy: RetentionPolicy | None,
    now: datetime,
    *,
    dry_run: bool,
    known: Mapping[str, HeadFacts] | None = None,
) -> Flow[ThreadResult]:
    """Judge the thread `scan` found idle and, unless `dry_run`, handle it.

    `engine_policy` is the pass a non-deleting strategy runs (None for "delete").
    `known`: head facts read already, for a batch of threads (one it lacks has no
    root checkpoint); else the thread's are read now.
    """
    thread_id = scan.thread_id
    if known is None:
        head = yield from _head_facts(store, thread_id)
    else:
        head = known.get(thread_id)
    verdict = thread_verdict(scan, head, policy, now, ask_veto=True)
    if head is None:  # deleted since the scan (by another sweeper, say)
        return ThreadResult(thread_id, SweepOutcome.GONE)
    if verdict is not IdleVerdict.EXPIRED:
        return ThreadResult(thread_id, _KEPT[verdict])
    if engine_policy is None:
        return (yield from _delete(store, thread_id, head, dry_run=dry_run))
    return (yield from _prune(store, thread_id, head, engine_policy, now, dry_run=dry_run))


def _head_facts(store: SweepStore, thread_id: str) -> Flow[HeadFacts | None]:
    """What a verdict reads of the thread's newest root checkpoint: its pending writes,
    and the channels that hold a value (None if the thread has none). From the store's
    one statement where it has one, else from the saver's own read of it."""
    read = store.head_facts(thread_id)
    if read is not None:
        facts: HeadFacts | None = yield Run(read, Mode.READ)
        return facts
    found = yield Lookup({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    if found is None:
        return None
    channels = frozenset(found.checkpoint.get("channel_values", {}))
    writes = len(found.pending_writes or ())
    return HeadFacts(str(found.checkpoint["id"]), found.metadata or {}, writes, channels)


def _delete(
    store: SweepStore, thread_id: str, head: HeadFacts, *, dry_run: bool
) -> Flow[ThreadResult]:
    if dry_run:
        lineage = yield Run(store.backend.load_lineage(thread_id), Mode.READ)
        return ThreadResult(thread_id, SweepOutcome.WOULD_DELETE, len(lineage.nodes))
    yield Invalidate(thread_id, "", None)
    act = store.delete_unchanged(thread_id, head.checkpoint_id, head.pending_writes)
    try:
        done = yield Run(act, Mode.WRITE)
    except ThreadChanged:  # rolled back whole: a writer committed a row meanwhile
        done = Held.CHANGED
    yield Invalidate(thread_id, "", None)  # a read between the purges may have cached rows
    return _deleted(thread_id, done)


def _deleted(thread_id: str, done: int | Held) -> ThreadResult:
    """The result of a thread's deletion that answered `done`."""
    if isinstance(done, Held):
        return ThreadResult(thread_id, SweepOutcome(done.value))
    if not done:  # another sweeper deleted it between our lock and our delete's snapshot
        return ThreadResult(thread_id, SweepOutcome.GONE)
    return ThreadResult(thread_id, SweepOutcome.DELETED, int(done))


def sweep_batch(
    store: SweepStore,
    batches: BatchDeletes,
    scans: Sequence[ThreadHead],
    policy: IdleThreadPolicy,
    now: datetime,
) -> Flow[list[ThreadResult]]:
    """The "delete" strategy on threads `scans` found idle, together: their heads read at
    once, each judged (its veto asked), and the expired ones deleted, each in its own
    transaction that takes and re-checks it, all in one round trip
    (`delete_batch_unchanged`, `Mode.APART`). A result per scan, in order: a thread a
    writer committed a row to meanwhile rolls back alone (changed), one whose transaction
    fails is logged and failed. If the batch's round trip itself fails before any
    transaction ends, each expired thread is deleted alone, as `sweep_thread` does.
    """
    facts = yield from _batch_facts(store, [scan.thread_id for scan in scans])
    results: dict[str, ThreadResult] = {}
    judged: list[tuple[str, HeadFacts]] = []
    for scan in scans:
        thread_id, head = scan.thread_id, facts.get(scan.thread_id)
        try:
            verdict = thread_verdict(scan, head, policy, now, ask_veto=True)
        except Exception:
            logger.exception("sweeping thread %r failed; the pass goes on", thread_id)
            results[thread_id] = ThreadResult(thread_id, SweepOutcome.FAILED)
            continue
        if head is None:
            results[thread_id] = ThreadResult(thread_id, SweepOutcome.GONE)
        elif verdict is not IdleVerdict.EXPIRED:
            results[thread_id] = ThreadResult(thread_id, _KEPT[verdict])
        else:
            judged.append((thread_id, head))
    if judged:
        results |= yield from _delete_batch(store, batches, judged)
    return [results[scan.thread_id] for scan in scans]


def _batch_facts(store: SweepStore, thread_ids: list[str]) -> Flow[dict[str, HeadFacts]]:
    """The head facts of each of `thread_ids` that has a root checkpoint: from the store's
    one statement where it has one, else a thread at a time."""
    read = store.batch_head_facts(thread_ids)
    if read is not None:
        facts: dict[str, HeadFacts] = yield Run(read, Mode.READ)
        return facts
    found = {}
    for thread_id in thread_ids:
        if (head := (yield from _head_facts(store, thread_id))) is not None:
            found[thread_id] = head
    return found


def _delete_batch(
    store: SweepStore, batches: BatchDeletes, judged: list[tuple[str, HeadFacts]]
) -> Flow[dict[str, ThreadResult]]:
    for thread_id, _ in judged:
        yield Invalidate(thread_id, "", None)
    act = batches.delete_batch_unchanged(
        [(t, h.checkpoint_id, h.pending_writes) for t, h in judged]
    )
    try:
        done = yield Run(act, Mode.APART)
    except Exception as error:  # none of them ended: each alone, then
        logger.warning("a sweep batch failed (%r); its threads go one by one", error)
        return (yield from _delete_each(store, judged))
    results: dict[str, ThreadResult] = {}
    for thread_id, _ in judged:
        yield Invalidate(thread_id, "", None)  # a read between the purges may have cached rows
        if isinstance(ended := done[thread_id], Exception):
            logger.error("sweeping thread %r failed; the pass goes on", thread_id, exc_info=ended)
            results[thread_id] = ThreadResult(thread_id, SweepOutcome.FAILED)
        else:
            results[thread_id] = _deleted(thread_id, ended)
    return results


def _delete_each(
    store: SweepStore, judged: list[tuple[str, HeadFacts]]
) -> Flow[dict[str, ThreadResult]]:
    """Each of `judged` deleted in its own transaction; one that fails is logged, and the
    others go on."""
    results: dict[str, ThreadResult] = {}
    for thread_id, head in judged:
        try:
            results[thread_id] = yield from _delete(store, thread_id, head, dry_run=False)
        except Exception:
            logger.exception("sweeping thread %r failed; the pass goes on", thread_id)
            results[thread_id] = ThreadResult(thread_id, SweepOutcome.FAILED)
    return results


def _prune(
    store: SweepStore,
    thread_id: str,
    head: HeadFacts,
    policy: RetentionPolicy,
    now: datetime,
    *,
    dry_run: bool,
) -> Flow[ThreadResult]:
    backend = store.backend
    lineage = yield Run(backend.load_lineage(thread_id), Mode.READ)
    plan = _rules.plan_retention(lineage, policy, now)
    if plan.empty:
        return ThreadResult(thread_id, SweepOutcome.NOTHING_TO_PRUNE)
    if dry_run:
        return ThreadResult(thread_id, SweepOutcome.WOULD_PRUNE, len(plan.deletions))
    values = yield from _values(thread_id, plan, policy)
    for ns, ids in _changed_ids(plan).items():
        yield Invalidate(thread_id, ns, ids)
    act = locked_act(
        store,
        thread_id,
        head.checkpoint_id,
        head.pending_writes,
        lambda: backend.apply_plan(thread_id, plan, values),
    )
    try:
        done = yield Run(act, Mode.WRITE)
    except PlanChanged:  # rolled back whole, as the engine's pass is
        done = Held.CHANGED
    if isinstance(done, Held):
        return ThreadResult(thread_id, SweepOutcome(done.value))
    applied: Applied = done
    clones = {(d.checkpoint_ns, d.checkpoint_id): d.clone_of for d in applied.deleted if d.clone_of}
    return ThreadResult(thread_id, SweepOutcome.PRUNED, len(applied.deleted), clones)
