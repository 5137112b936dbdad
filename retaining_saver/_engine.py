"""The exhaustive retention engine, for maintenance and measurement.

One pass over a thread: statistics, lineage, a plan from the rules, cache
invalidation, the plan carried out in one transaction, statistics again.
Unlike admission cleanup, its work grows with the thread; run it off the
request path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from retaining_saver import _rules
from retaining_saver._effects import Flow, History, Invalidate, Mode, Run
from retaining_saver._rules import (
    BlobKey,
    Graft,
    Lineage,
    NodeKey,
    Plan,
    Protection,
    RetentionPolicy,
    Root,
)
from retaining_saver._rules._recheck import Applied
from retaining_saver._rules._sparing import Planner
from retaining_saver._storage import full_stats
from retaining_saver.backends import _upstream
from retaining_saver.backends._apply import PlanChanged
from retaining_saver.backends._base import Backend
from retaining_saver.backends._stats import ChannelStats, StorageStats, TableStats

logger = logging.getLogger("retaining_saver")


@dataclass(frozen=True)
class RetentionReport:
    """What one retention pass over a thread found and did.

    Attributes:
        thread_id: The thread.
        dry_run: True if nothing was changed.
        deleted: Deleted (or, in a dry run, deletable) checkpoints: (ns, id) -> reason.
        dropped: Planned deletions whose re-check failed in the transaction.
        deferred: Deletable checkpoints left for a later pass by `max_delete_per_run`.
        kept: Every other checkpoint: (ns, id) -> the protection that keeps it.
        heads: The latest checkpoint id of each namespace before the pass.
        grafts: Children re-parented past removed checkpoints (duration links, or a
            history rule's stretch: see each graft's `reason`).
        clones: Each deleted (or deletable) clone, and the checkpoint it cloned:
            its id keeps resolving there for `reclaimed_id_ttl`.
        freed_blobs: Blob keys deleted (or, in a dry run, that would be).
        before: Storage statistics before the pass, as `storage_stats(thread_id)`
            measures them: rows and bytes per table, per channel when the pass was
            asked for `channels` (as `storage_stats(channels=True)`), and the
            whole store's space on disk (SQLite's file, pages and freelist,
            Postgres's relation sizes).
        after: Storage statistics after it; in a dry run, what they would be: `before`
            less the rows the plan deletes, per table and channel (values it would
            store whole not counted), with the space unknown (None: deleting rows
            frees pages inside the store, which only compaction gives back).
            None if reading them failed after the deletions were committed.
        roots: Checkpoints made roots (parent None) because the history horizon
            removed every ancestor they had.
        materialised: Checkpoints at which DeltaChannel values were stored whole
            (or, in a dry run, would be), so that their ancestors could go.
    """

    thread_id: str
    dry_run: bool
    deleted: Mapping[NodeKey, _rules.Reason]
    dropped: tuple[NodeKey, ...]
    deferred: tuple[NodeKey, ...]
    kept: Mapping[NodeKey, Protection]
    heads: Mapping[str, str]
    grafts: tuple[Graft, ...]
    clones: Mapping[NodeKey, str]
    freed_blobs: tuple[BlobKey, ...]
    before: StorageStats
    after: StorageStats | None = field(repr=False)
    roots: tuple[Root, ...] = ()
    materialised: tuple[NodeKey, ...] = ()


def retention_pass(
    thread_id: str,
    backend: Backend,
    policy: RetentionPolicy,
    *,
    dry_run: bool,
    now: datetime | None = None,
    channels: bool = False,
) -> Flow[RetentionReport]:
    """Plan and (unless `dry_run`) carry out retention for one thread; with `channels`,
    its statistics per channel too."""
    measured = full_stats(backend, thread_id, channels, 0)
    before: StorageStats = yield Run(measured, Mode.READ)
    lineage: Lineage = yield Run(backend.load_lineage(thread_id), Mode.READ)
    plan = _rules.plan_retention(lineage, policy, datetime.now(UTC) if now is None else now)
    applied = Applied(
        deleted=list(plan.deletions),
        grafted=list(plan.grafts),
        rooted=list(plan.roots),
        freed_blobs=list(plan.freed_blobs),
        materialised=[(m.checkpoint_ns, m.checkpoint_id) for m in plan.materialise],
    )
    after: StorageStats | None = before
    if dry_run and backend.stores_blobs and plan.freed_blobs and plan.deletions:
        # As a real pass reports them: the blob rows it would delete.
        stored = backend.stored_blobs(thread_id, plan.freed_blobs)
        applied.freed_blobs = yield Run(stored, Mode.READ)
    if dry_run and plan.deletions:
        after = yield from _would_be_after(thread_id, backend, plan, before, channels)
    if not dry_run and not plan.empty:
        applied = yield from _carry_out(thread_id, backend, policy, plan)
        try:
            after = yield Run(full_stats(backend, thread_id, channels, 0), Mode.READ)
        except Exception as error:
            # The deletions are committed: the caller must get their report all the same.
            logger.warning("statistics after retention of %s failed: %r", thread_id, error)
            after = None
    if not backend.stores_blobs:
        applied.freed_blobs.clear()
    return RetentionReport(
        thread_id=thread_id,
        dry_run=dry_run,
        deleted={(d.checkpoint_ns, d.checkpoint_id): d.reason for d in applied.deleted},
        dropped=tuple((d.checkpoint_ns, d.checkpoint_id) for d in applied.dropped),
        deferred=tuple((d.checkpoint_ns, d.checkpoint_id) for d in plan.deferred),
        kept=plan.kept,
        heads=plan.heads,
        grafts=tuple(applied.grafted),
        clones={
            (d.checkpoint_ns, d.checkpoint_id): d.clone_of
            for d in applied.deleted
            if d.clone_of is not None
        },
        freed_blobs=tuple(applied.freed_blobs),
        before=before,
        after=after,
        roots=tuple(applied.rooted),
        materialised=tuple(applied.materialised),
    )


def _would_be_after(
    thread_id: str, backend: Backend, plan: Plan, before: StorageStats, channels: bool
) -> Flow[StorageStats]:
    """`before` less the rows the plan deletes: its checkpoints with their writes, and
    the blobs it frees, per table and (with `channels`) per channel. Values it would
    store whole (`Plan.materialise`) are not counted."""
    deleted = [(d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions]
    blobs = list(plan.freed_blobs) if backend.stores_blobs else []
    gone: dict[str, TableStats] = yield Run(
        backend.gone_stats(thread_id, deleted, blobs), Mode.READ
    )
    if not channels:
        return before.without(gone)
    gone_channels: dict[str, ChannelStats] = yield Run(
        backend.gone_channel_stats(thread_id, deleted, blobs), Mode.READ
    )
    return before.without(gone, gone_channels)


WINDOW_GROWTH = 4
"""How much larger the next window a pass reads is, when its window held fewer
deletions than the cap (`planned_pass`)."""


def planned_pass(
    thread_id: str,
    backend: Backend,
    policy: RetentionPolicy,
    now: datetime,
    planner: Planner = _rules.plan_retention,
    window: int | None = None,
) -> Flow[tuple[Lineage, Plan, Applied]]:
    """`retention_pass` without its statistics or report, for `prune` and admission's
    history work: the lineage it read, its plan, and what carrying it out did.

    With `window`, the pass reads only the thread's newest `window` root checkpoints
    and what is above them (`Backend.load_lineage`), and plans on that
    (`Protection.WINDOW_EDGE`); if that plan deletes fewer than the policy's cap while
    the thread reaches below, a window `WINDOW_GROWTH` times larger, up to the whole
    thread. A pass that read a window is one of several (see `_rooms.room_left`)."""
    lineage: Lineage = yield Run(backend.load_lineage(thread_id, window), Mode.READ)
    plan = planner(lineage, policy, now)
    while window is not None and _falls_short(lineage, plan, policy):
        window *= WINDOW_GROWTH
        lineage = yield Run(backend.load_lineage(thread_id, window), Mode.READ)
        plan = planner(lineage, policy, now)
    if plan.empty:
        return lineage, plan, Applied()
    return lineage, plan, (yield from _carry_out(thread_id, backend, policy, plan))


def _falls_short(lineage: Lineage, plan: Plan, policy: RetentionPolicy) -> bool:
    """Whether a pass reads a wider window: its window reaches below, and its plan
    deletes fewer than the cap (None: no cap), so a wider one may hold more."""
    cap = policy.max_delete_per_run
    return lineage.window_start is not None and (cap is None or len(plan.deletions) < cap)


def keeps_delta_walks(plan: Plan, policy: RetentionPolicy) -> bool:
    """Whether `plan` keeps checkpoints only because a DeltaChannel value is rebuilt from
    them, for want of `delta_graph` (with it, a new root would store the value whole)."""
    return policy.delta_graph is None and any(
        protection is Protection.DELTA_HISTORY for protection in plan.kept.values()
    )


def _carry_out(
    thread_id: str, backend: Backend, policy: RetentionPolicy, plan: Plan
) -> Flow[Applied]:
    """The values to store first, every cache told, then the plan in one transaction."""
    values = yield from _values(thread_id, plan, policy)
    for ns, ids in _changed_ids(plan).items():
        yield Invalidate(thread_id, ns, ids)
    try:
        applied: Applied = yield Run(backend.apply_plan(thread_id, plan, values), Mode.WRITE)
    except PlanChanged as error:
        # Rolled back whole: the thread changed under the pass; the next one judges it again.
        logger.info("retention of %s found the thread changed; nothing done: %s", thread_id, error)
        return Applied(dropped=list(plan.deletions))
    return applied


def _values(
    thread_id: str, plan: Plan, policy: RetentionPolicy
) -> Flow[dict[NodeKey, dict[str, Any]]]:
    """Each `Materialise`'s channel values, rebuilt before anything changes: the saver's
    own delta history of the checkpoint, replayed by the graph's channel (only the
    graph knows its reducer). A channel that rebuilds empty stores nothing: its value
    after the pass rebuilds empty too."""
    values: dict[NodeKey, dict[str, Any]] = {}
    graph = policy.delta_graph
    if graph is None:
        return values  # without a graph, the rules plan none
    for stored in plan.materialise:
        configurable = {
            "thread_id": thread_id,
            "checkpoint_ns": stored.checkpoint_ns,
            "checkpoint_id": stored.checkpoint_id,
        }
        history = yield History({"configurable": configurable}, stored.channels)
        found = values.setdefault((stored.checkpoint_ns, stored.checkpoint_id), {})
        for channel in stored.channels:
            spec = graph.channels[channel]
            holds, value = _upstream.delta_value(spec, history.get(channel, {"writes": []}))
            if holds:
                found[channel] = value
    return values


def _changed_ids(plan: Plan) -> dict[str, list[str]]:
    """Per namespace, the checkpoints the plan deletes or re-parents.

    A re-parented checkpoint's history (its parent walk) changes too, so a
    cache must forget it as well as the deleted ones.
    """
    changed: dict[str, list[str]] = {}
    for ns, checkpoint_id in (
        *((d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions),
        *((g.checkpoint_ns, g.child_id) for g in plan.grafts),
        *((r.checkpoint_ns, r.checkpoint_id) for r in plan.roots),
    ):
        changed.setdefault(ns, []).append(checkpoint_id)
    return dict(sorted(changed.items()))
