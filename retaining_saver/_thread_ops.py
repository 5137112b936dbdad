"""`delete_for_runs` and `copy_thread` of `RetainingSaver`, on every supported saver.

LangGraph's Agent Server calls them on a custom checkpointer whose class overrides
them: `adelete_for_runs` to roll a run back (`multitask_strategy="rollback"`, and
`DELETE /threads/{id}/runs/{run_id}`), `acopy_thread` to copy a thread. Upstream
leaves both unimplemented on memory and SQLite and has neither on Postgres.

Deleting runs is a plan of the rules (`_rules._runs_removal`) carried out as any
other (`backends._apply`): per thread, in one transaction that loads the lineage,
plans, and re-checks every step in the statement that carries it out, under the
thread's lock, between two purges of its history caches. A pass that finds the
thread changed under it is rolled back and made again; a pass that finds nothing
of the runs does nothing, so repeated and concurrent calls are harmless. In the
same transaction, a checkpoint the removal leaves childless gets back the writes
rows it had before the removed runs resumed it: as the wrapper's resume ledger
recorded them when each run first wrote there, or, for a resume the ledger never
saw, by what the store tells (`_rules._resumed`); checkpoints of the runs that
stay (what a kept checkpoint still reads) are named in a warning. A run that wrote
no checkpoint (it resumed a thread and stopped again) is found by its ledger entry.

A copy is one transaction too: every checkpoint, parent link, writes row, blob,
reclaim record and resume ledger entry of the source, under the target id, into a
target that has none.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver._effects import Flow, Invalidate, Locked, Mode, Run, adrive, answer, drive
from retaining_saver._maintenance import MaintenanceMixin
from retaining_saver._rules import (
    NodeKey,
    Protection,
    RetentionPolicy,
    later_writes,
    plan_run_removal,
    restorations,
    resumed_points,
)
from retaining_saver._rules import _validate as validate
from retaining_saver._rules._recheck import Applied
from retaining_saver._stamps import OwnStamps
from retaining_saver.backends._apply import PlanChanged
from retaining_saver.backends._base import Backend, Op

logger = logging.getLogger("retaining_saver")

ATTEMPTS = 3
"""How many times a run removal is planned again after the thread changed under it."""


class ThreadOpsMixin(MaintenanceMixin):
    """`delete_for_runs`, `copy_thread` and their async twins; an unsupported saver's
    own methods answer instead (see `CachePurgeMixin`)."""

    inner: BaseCheckpointSaver[Any]
    _stamps: OwnStamps | None
    _inner_delete_for_runs: Callable[[Sequence[str]], Any]
    _inner_adelete_for_runs: Callable[[Sequence[str]], Coroutine[Any, Any, Any]]

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints the given runs wrote, their writes, and the blobs only
        they referenced, from every thread.

        A run's checkpoints are those whose metadata names its `run_id`, and the
        subgraph calls made under them. A checkpoint that stays but whose parent goes
        is grafted onto its nearest remaining ancestor; what a remaining
        checkpoint's DeltaChannel value is rebuilt from stays, as does the parent a
        kept pre-format-4 checkpoint reads its sends from (a warning names what
        stayed). Deleting a thread's last run leaves the thread as it was before
        that run, the writes it left on the checkpoint it resumed included.

        Args:
            run_ids: The runs to delete (a collection of run id strings; empty: nothing).

        Raises:
            TypeError: If `run_ids` is not a collection of strings.
        """
        if self._backend is None:
            return self._inner_delete_for_runs(run_ids)  # type: ignore[no-any-return]
        return drive(self._delete_for_runs(run_ids), self._performer)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async `delete_for_runs`."""
        if self._backend is None:
            return await self._inner_adelete_for_runs(run_ids)  # type: ignore[no-any-return]
        return await adrive(self._delete_for_runs(run_ids), self._performer)

    def _delete_for_runs(self, run_ids: Sequence[str]) -> Flow[None]:
        runs = _run_ids(run_ids)
        backend = self._require_backend()
        threads = (yield Run(backend.run_threads(sorted(runs)), Mode.READ)) if runs else []
        for thread_id in threads:
            flow = self._permission_named(_removal(thread_id, backend, runs, self.policy))
            self._forget(thread_id, (yield Locked(thread_id, flow)))

    def _forget(self, thread_id: str, applied: Applied) -> None:
        """What this process remembers of the deleted checkpoints goes with them."""
        gone = {(d.checkpoint_ns, d.checkpoint_id) for d in applied.deleted}
        if not gone:
            return
        self._reclaimed.forget_clones(thread_id, gone)
        if self._stamps is not None:
            for ns, checkpoint_id in gone:
                if ns == "":
                    self._stamps.forget(thread_id, checkpoint_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint of the source thread, in every namespace, with its parent
        link, writes, blobs, reclaim records and resume ledger entries, under the target
        thread id.

        One transaction: the copy reads, lists, resumes and forks as the source does.
        A source without checkpoints copies nothing.

        Args:
            source_thread_id: The thread to copy.
            target_thread_id: The thread id of the copy, which must have no checkpoints.

        Raises:
            TypeError: If a thread id is not a non-empty str.
            ValueError: If the target thread already has checkpoints.
        """
        if self._backend is None:
            return self.inner.copy_thread(source_thread_id, target_thread_id)  # as bare
        return drive(self._copy_thread(source_thread_id, target_thread_id), self._performer)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async `copy_thread`."""
        if self._backend is None:
            return await self.inner.acopy_thread(source_thread_id, target_thread_id)
        return await adrive(self._copy_thread(source_thread_id, target_thread_id), self._performer)

    def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> Flow[None]:
        source, target = self._copy_ids(source_thread_id, target_thread_id)
        backend = self._require_backend()
        copy = self._permission_named(answer(Run(_copy(backend, source, target), Mode.WRITE)))
        first, second = sorted((source, target))  # one order: two copies never deadlock
        yield Locked(first, answer(Locked(second, copy)))

    def _copy_ids(self, source: Any, target: Any) -> tuple[str, str]:
        nul_ok = self._nul_ok()
        source = validate.thread_id("source_thread_id", source, nul_ok=nul_ok)
        target = validate.thread_id("target_thread_id", target, nul_ok=nul_ok)
        validate.require(
            source != target,
            ValueError,
            f"copy_thread needs two thread ids; got {source!r} for both",
        )
        return source, target


def _run_ids(run_ids: Any) -> frozenset[str]:
    try:
        found = None if isinstance(run_ids, str | bytes) else frozenset(run_ids)
    except TypeError:
        found = None
    validate.require(
        found is not None and all(isinstance(r, str) for r in found),
        TypeError,
        f"run_ids must be a collection of run id strings (not one str), got {run_ids!r}",
    )
    assert found is not None
    return found


def _removal(
    thread_id: str, backend: Backend, run_ids: Collection[str], policy: RetentionPolicy
) -> Flow[Applied]:
    """Purge the thread's caches, remove the runs (planned again if the thread changed
    under the pass), and purge them again."""
    yield Invalidate(thread_id, "", None)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            removal = _remove(backend, thread_id, run_ids, policy)
            applied: Applied = yield Run(removal, Mode.WRITE)
            break
        except PlanChanged as error:
            if attempt == ATTEMPTS:
                raise
            logger.info("removing runs from %s found it changed; again: %s", thread_id, error)
    yield Invalidate(thread_id, "", None)
    return applied


def _remove(
    backend: Backend, thread_id: str, run_ids: Collection[str], policy: RetentionPolicy
) -> Op[Applied]:
    """Plan the removal on the lineage as this transaction reads it, carry it out, and
    give each checkpoint the runs resumed back its writes: as the ledger recorded them
    (`restorations`), else as the store tells (`later_writes`)."""
    lineage = yield from backend.load_lineage(thread_id)
    plan = plan_run_removal(lineage, run_ids, policy)
    _report_kept(thread_id, plan.kept)
    entries = yield from backend.resumptions(thread_id)
    if not plan.deletions and not any(e.run_id in run_ids for e in entries):
        return Applied()
    applied = (yield from backend.apply_plan(thread_id, plan)) if plan.deletions else Applied()
    gone = [(d.checkpoint_ns, d.checkpoint_id) for d in applied.deleted]
    yield from backend.forget_reclaimed_clones(thread_id, gone)
    restoring = restorations(lineage, gone, applied.grafted, run_ids, entries)
    for entry in restoring.restore:
        yield from backend.restore_writes(thread_id, entry)
    yield from backend.drop_resumptions(thread_id, restoring.dropped)
    known = {(e.checkpoint_ns, e.checkpoint_id) for e in entries if e.run_id in run_ids}
    for ns, checkpoint_id in resumed_points(lineage, gone, applied.grafted, run_ids):
        if (ns, checkpoint_id) in known:
            continue  # the ledger saw these resumes: it decided above
        rows = yield from backend.write_rows(thread_id, ns, checkpoint_id)
        later = later_writes(rows, lineage.nodes[ns, checkpoint_id].metadata.get("source"))
        if later:
            yield from backend.delete_writes(thread_id, ns, checkpoint_id, later)
    return applied


def _report_kept(thread_id: str, kept: Mapping[NodeKey, Protection]) -> None:
    """Say which checkpoints of the runs stay, and why: a removal that keeps some is a
    partial one (`delete_for_runs` answers None, as LangGraph's signature has it)."""
    if not kept:
        return
    why = Counter(str(protection) for protection in kept.values())
    logger.warning(
        "delete_for_runs kept %d checkpoint(s) of the runs in thread %s (%s); see "
        "docs/rules.md#run-removed",
        len(kept),
        thread_id,
        ", ".join(f"{reason}: {count}" for reason, count in sorted(why.items())),
    )


def _copy(backend: Backend, source: str, target: str) -> Op[None]:
    if (yield from backend.thread_exists(target)):
        raise ValueError(f"copy_thread: the target thread {target!r} already has checkpoints")
    yield from backend.copy_rows(source, target)
