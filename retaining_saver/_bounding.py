"""Bounded history on admission: the `retention=` policy, a capped pass per run.

With `RetainingSaver(inner, retention=RetentionPolicy(history_keep_runs=N, ...))`
each admission (the automatic one and `admit`/`aadmit`), after its stamp
cleanup and under the same thread lock, runs the engine's own pass over the
thread with that policy: the lineage (no channel blobs on Postgres), the
rules' plan, caches invalidated, the plan carried out in one guarded
transaction. What differs from `enforce_thread_retention`:

- the pass is capped by the policy's `max_delete_per_run`, `RETENTION_MAX_DELETE`
  when the policy leaves it None, so that no run waits for a large cleanup
  (a legacy thread converges over successive runs);
- the ids the run addresses (`checkpoint_id`, `checkpoint_map`) are protected;
- it reads a window of the thread, not the whole: its newest `admission_window`
  root checkpoints and everything above them (`Protection.WINDOW_EDGE`), wider only
  when that holds fewer deletions than the cap, so that a legacy thread's admissions
  read and plan a bounded lineage while it converges;
- it is amortised: skipped, without a read, while the thread cannot hold more
  than `N + slack_runs(N)` runs (`N // 2`; none for N of 0 or 1). After a pass
  that left the head line `k` runs, the next `N + slack - k` admissions of this
  process add at most one run each, and each run `update_state` writes as the
  input takes a room too (`Rooms`); then a pass deletes every run
  beyond the newest N in one transaction. So a thread at the horizon holds
  between N and N + slack runs (and the one just admitted), and one admission
  in `slack + 1` runs a pass. Until a thread first crosses the horizon there
  is no slack: its first pass comes at N + 1 runs;
- a failure never fails the run: it is logged once and counted.

When the pass runs. A sync admission read, `admit`/`aadmit`, and an async
admission read under a policy with `delta_graph` or one whose plans reshape the
head's row (a horizon of 0 runs, keep_latest, step compaction:
`reshapes_the_head`), run it before they answer
(bounded by the cap), so the run reads a thread the pass is done with. Deleting
older runs leaves what the head reads unchanged, so the head is read again only
when the pass changed its own row (made it a root, re-parented it, stored its
values whole). Any other async admission read
answers first, and leaves the pass (`Later`) to a task that the thread's lock
is handed to (`ThreadLocks.hand_over`): the lock is held from the admission to
the pass's end without a gap, in one bounded step, so the run's first write,
and any other admission or write of the thread in this process, waits for the
pass as it would for an inline one; the run's own work between its first read
and its first write (and, with LangGraph's async durability, its nodes) goes on
meanwhile. What keeps this safe, where the run already holds the head:

- the pass carries out only a plan that leaves the head's row as the run read
  it (`sparing`): a plan that would make it a root, re-parent it or store
  values at it does nothing, and defers its deletions to the next admission
  (whose head is another: under a horizon of 1 or more runs, kept whole, the
  head is rarely the row a plan reshapes; under the policies above it is on
  every pass, which is why theirs do not wait);
- without `delta_graph` the rules keep every checkpoint a kept one rebuilds a
  DeltaChannel value from, so no read the run makes of the head's history
  can miss one; with it, a pass stores values whole at a new root and deletes
  what they were rebuilt from, which a rebuild read across its commit could
  miss: those passes stay before the answer;
- everything else the run reads (subgraph namespaces, pinned ids) it reads
  through an admission or a locked read, after the pass.

`asettle_history()` waits for the passes left running on the loop (the
benchmark times a run until its pass is done). Five other designs were
measured against this one and not built, each recorded with its figures in
docs/bounding.md (*Why a run pays its pass*): a larger slack (`slack_runs`),
which costs a run a little less but lets a thread hold up to 2N runs; the pass
before the answer on AsyncSqliteSaver, which took (b) past its bound; a left
pass holding no lock, and a sync pass in a thread of its own, which gained
nothing (a run and its pass are CPU on one loop, or under one GIL); and a pass
in another process, whose work lands on the runs it overlaps all the same. A
run pays its pass's own work; `bench_bounding` prints that share (`pass_split`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from retaining_saver import _run_reads
from retaining_saver._accounting import Accounts
from retaining_saver._admission import AdmissionResult, Admitted, namespace
from retaining_saver._effects import Flow, Later, Lookup
from retaining_saver._engine import keeps_delta_walks, planned_pass
from retaining_saver._locks import ThreadLocks
from retaining_saver._maintenance import DELTA_KEPT, DELTA_KEPT_MESSAGE
from retaining_saver._reclaimed import ReclaimedIds
from retaining_saver._rooms import Rooms, room_left
from retaining_saver._rules import (
    NodeKey,
    RetentionPolicy,
    Skip,
    plan_retention,
)
from retaining_saver._rules._ages import next_age_crossing
from retaining_saver._rules._recheck import Applied
from retaining_saver._rules._sparing import may_wait, sparing
from retaining_saver._stamps import OwnStamps
from retaining_saver.backends._base import Backend

RETENTION_MAX_DELETE = 64
"""Deletions one admission's history pass may make when the `retention` policy's
`max_delete_per_run` is None: about a dozen runs of a small graph."""

LINEAGE_WINDOW = 256
"""The fewest newest root checkpoints an admission's pass reads (`admission_window`): a
thread held at its horizon fits whole; a longer one is read as a window."""


def admission_window(policy: RetentionPolicy) -> int:
    """How many of a thread's newest root checkpoints an admission's pass reads first:
    `LINEAGE_WINDOW`, or four times the cap if that is more, so that the window holds
    the cap's deletions beside the kept runs (`engine.planned_pass` widens it when it
    holds fewer)."""
    return max(LINEAGE_WINDOW, 4 * (policy.max_delete_per_run or RETENTION_MAX_DELETE))


HISTORY_FAILED = "history-failed"


def _utc_now() -> datetime:
    """What "now" is for admission's pass (tests set it through this module)."""
    return datetime.now(UTC)


def admission_retention(retention: Any, saver_policy: RetentionPolicy) -> RetentionPolicy | None:
    """The policy each admission's history pass runs, from the `retention` flag.

    The saver's `protect_checkpoint_ids` and `is_reclaimable_leaf` join it, and
    its cap defaults to `RETENTION_MAX_DELETE`.

    Raises:
        TypeError: If `retention` is not a `RetentionPolicy` or None.
        ValueError: If it turns on no history rule, turns on step compaction with
            neither a horizon nor keep_latest, or caps a pass at 0.
    """
    if retention is None:
        return None
    if not isinstance(retention, RetentionPolicy):
        raise TypeError(f"retention must be a RetentionPolicy or None, got {retention!r}")
    if not retention.history_rules:
        raise ValueError(
            "retention must turn on a history rule (history_keep_runs, compact_steps or "
            "keep_latest); the stamps are admission's own work"
        )
    if (
        retention.compact_steps
        and retention.history_keep_runs is None
        and not retention.keep_latest
    ):
        # Such a thread keeps every run's ends, so it outgrows any window: each pass would
        # read (and, on Postgres, sweep the blobs of) the whole thread, on every admission.
        raise ValueError(
            "retention with compact_steps alone bounds nothing and would cost each "
            "admission a pass over the whole thread: add history_keep_runs=N (which holds "
            "the thread, and so each pass, within N runs), or compact from a job "
            "(enforce_retention)"
        )
    if retention.max_delete_per_run == 0:
        raise ValueError(
            "retention.max_delete_per_run=0 would delete nothing on admission: "
            f"leave it None (at most {RETENTION_MAX_DELETE} a run) or give a positive cap"
        )
    cap = retention.max_delete_per_run
    return dataclasses.replace(
        retention,
        max_delete_per_run=RETENTION_MAX_DELETE if cap is None else cap,
        protect_checkpoint_ids=retention.protect_checkpoint_ids
        | saver_policy.protect_checkpoint_ids,
        is_reclaimable_leaf=retention.is_reclaimable_leaf or saver_policy.is_reclaimable_leaf,
    )


class BoundingMixin:
    """The history pass `RetainingSaver` runs on admission with its `retention` policy."""

    _backend: Backend | None
    _accounts: Accounts
    _reclaimed: ReclaimedIds
    _stamps: OwnStamps | None
    retention: RetentionPolicy | None
    _rooms: Rooms
    _locks: ThreadLocks
    _settle: Callable[[CheckpointTuple | None, RunnableConfig], Flow[CheckpointTuple | None]]

    async def asettle_history(self) -> None:
        """Wait until the history passes this saver's async admission reads left running
        on this event loop have finished (see `retention`): to read a thread as they leave
        it, or before the loop closes. A sync admission finishes its pass before it
        answers, so there is no sync twin."""
        await self._locks.asettled()

    def _history_may_run(self, thread_id: str, head: CheckpointTuple | None) -> bool:
        """Whether an admission that reclaims nothing at `head` takes the lock for the
        history pass (else it is counted as skipped)."""
        if self.retention is None or self._backend is None:
            return False
        head_id = head.checkpoint["id"] if head is not None else None
        now = _utc_now()
        if not self._rooms.would_skip(thread_id, head_id, now):
            return True
        self._rooms.due(thread_id, head_id, now)
        self._accounts.count("history_skipped")
        return False

    def _history_read(self, config: RunnableConfig, admitted: Admitted) -> Flow[Admitted]:
        """The history pass after the stamps, if due; the run's head, read again if the
        pass changed its row (its parent, or its values stored whole): deleting older
        runs leaves what the head reads unchanged."""
        result, found = admitted
        result, changed = yield from self._bound_history(config, result, defer=True)
        if (namespace(config), result.head_id) in changed:
            found = yield Lookup(config)
        return result, (yield from self._settle(found, config))

    def _untaken(self, thread_id: str, head: CheckpointTuple | None) -> Admitted:
        """An admission whose read found nothing to take at `head`."""
        head_id = head.checkpoint["id"] if head is not None else None
        empty = Skip.EMPTY_THREAD if head is None else None
        return AdmissionResult(thread_id, (), empty, head_id), head

    def _account_history(self, admitted: Admitted) -> CheckpointTuple | None:
        """Account for a history pass alone (the admission itself was counted)."""
        self._accounts.account_history(admitted[0])
        return admitted[1]

    def _bound_history(
        self, config: RunnableConfig, result: AdmissionResult, *, defer: bool = False
    ) -> Flow[tuple[AdmissionResult, frozenset[NodeKey]]]:
        """`result` with what the history pass deleted, if one was due, and the checkpoints
        whose rows it changed (deleted, re-parented, made roots, or given whole values).

        With `defer` (an admission read: its run has the head), a pass under a policy
        without `delta_graph` is left for later (`Later`): asynchronously it runs once the
        read has answered, still holding the thread's lock, and carries out only a plan
        that leaves the head's row as the run read it; `result` is then answered as it
        is (see the module docstring). Run under the thread's lock, after the stamps.
        Never raises.
        """
        policy, backend, thread_id = self.retention, self._backend, result.thread_id
        if policy is None or backend is None or self._accounts.waiting():
            return result, frozenset()
        now = _utc_now()
        if not self._rooms.due(thread_id, result.head_id, now):
            self._accounts.count("history_skipped")
            return result, frozenset()
        if result.skipped is Skip.EMPTY_THREAD:
            # No slack yet: the first pass comes as soon as the thread crosses the horizon.
            self._rooms.left(thread_id, policy.history_keep_runs or 0, None)
            return result, frozenset()
        protected = _run_reads.run_selectors(config)
        if protected:
            merged = policy.protect_checkpoint_ids | protected
            policy = dataclasses.replace(policy, protect_checkpoint_ids=merged)
        self._accounts.count("history_passes")
        run_kept = bool(protected)
        inline = self._history_pass(result, policy, backend, None, run_kept)
        if not defer or result.head_id is None or not may_wait(policy):
            return (yield from inline)
        head = (namespace(config), result.head_id)
        done = yield Later(inline, self._left_pass(result, policy, backend, head, run_kept))
        return (result, frozenset()) if done is None else done

    def _left_pass(
        self,
        result: AdmissionResult,
        policy: RetentionPolicy,
        backend: Backend,
        head: NodeKey,
        run_kept: bool,
    ) -> Flow[None]:
        """The pass an admission read left for later, sparing `head`'s row; what it deleted
        is accounted for here (the admission was counted when it answered)."""
        done, _ = yield from self._history_pass(result, policy, backend, head, run_kept)
        self._accounts.account_history(done)

    def _history_pass(
        self,
        result: AdmissionResult,
        policy: RetentionPolicy,
        backend: Backend,
        spare: NodeKey | None,
        run_kept: bool,
    ) -> Flow[tuple[AdmissionResult, frozenset[NodeKey]]]:
        """One pass over `result`'s thread (see `_bound_history`); with `spare`, one that
        carries out no plan changing that checkpoint's row (`sparing`). `run_kept`: the
        policy keeps the ids the run addresses (see `room_left`)."""
        thread_id, now = result.thread_id, _utc_now()
        planner = plan_retention if spare is None else sparing(spare)
        try:
            window = admission_window(policy)
            flow = planned_pass(thread_id, backend, policy, now, planner, window)
            lineage, plan, applied = yield from flow
        except Exception as error:
            self._rooms.forget(thread_id)
            problem = backend.permission_problem(error)
            if problem is not None:
                self._accounts.failure(thread_id, error, problem)
            self._accounts.count("history_failed")
            self._accounts.once(
                HISTORY_FAILED,
                "the retention policy's pass over thread %s failed; the run proceeds "
                "(logged once, counted in counters.history_failed): %r",
                thread_id,
                error,
            )
            return result, frozenset()
        if keeps_delta_walks(plan, policy):
            self._accounts.once(DELTA_KEPT, DELTA_KEPT_MESSAGE, "the retention policy")
        due_at = next_age_crossing(lineage, policy, now)
        left = room_left(lineage, plan, applied, policy, due_at, run_kept=run_kept)
        self._rooms.left(thread_id, left, result.head_id, due_at)
        deleted = self._remember_history_deletions(thread_id, applied)
        return dataclasses.replace(result, history_reclaimed=deleted), _changed_rows(applied)

    def _remember_history_deletions(self, thread_id: str, applied: Applied) -> tuple[NodeKey, ...]:
        """Under the thread's lock: each deleted clone's id names what it cloned, and no
        stamp this process remembers is one that went."""
        for deletion in applied.deleted:
            key = (thread_id, deletion.checkpoint_ns, deletion.checkpoint_id)
            if deletion.clone_of is not None:
                self._reclaimed.remember(key, deletion.clone_of)
            if self._stamps is not None and not deletion.checkpoint_ns:
                self._stamps.forget(thread_id, deletion.checkpoint_id)
        return tuple((d.checkpoint_ns, d.checkpoint_id) for d in applied.deleted)


def _changed_rows(applied: Applied) -> frozenset[NodeKey]:
    """The checkpoints whose rows carrying out a plan changed or deleted."""
    return frozenset(
        (
            *((d.checkpoint_ns, d.checkpoint_id) for d in applied.deleted),
            *((g.checkpoint_ns, g.child_id) for g in applied.grafted),
            *((r.checkpoint_ns, r.checkpoint_id) for r in applied.rooted),
            *applied.materialised,
        )
    )
