"""A plan that spares one checkpoint's row: what a history pass may carry out after the
read of a run that holds that checkpoint as its head (`_bounding`'s pass after an async
admission read). No I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from retaining_saver._rules._lineage import Lineage, NodeKey, Plan
from retaining_saver._rules._plan import plan_retention
from retaining_saver._rules._policy import RetentionPolicy

Planner = Callable[[Lineage, RetentionPolicy, datetime], Plan]
"""What makes a thread's plan: `plan_retention`, or one that spares a row."""


def sparing(key: NodeKey) -> Planner:
    """A planner whose plan leaves `key`'s row as it is: the rules' plan, or, if that would
    delete the checkpoint, re-parent it, make it a root or store values at it, one that
    changes nothing now and defers its deletions to a later pass."""

    def plan(lineage: Lineage, policy: RetentionPolicy, now: datetime) -> Plan:
        found = plan_retention(lineage, policy, now)
        rows = {
            *((d.checkpoint_ns, d.checkpoint_id) for d in found.deletions),
            *((g.checkpoint_ns, g.child_id) for g in found.grafts),
            *((r.checkpoint_ns, r.checkpoint_id) for r in found.roots),
            *((m.checkpoint_ns, m.checkpoint_id) for m in found.materialise),
        }
        if key not in rows:
            return found
        waiting = found.deletions + found.deferred
        return Plan(kept=found.kept, deferred=waiting, heads=found.heads)

    return plan


def reshapes_the_head(policy: RetentionPolicy) -> bool:
    """Whether `policy`'s plans change the head's row on most passes, so that a planner
    sparing it (`sparing`) would defer every pass: a horizon of 0 runs and keep_latest
    make the head a root; step compaction re-parents a finished head onto its run's
    input. Passes under such a policy run before an admission read answers."""
    return policy.history_keep_runs == 0 or policy.keep_latest or policy.compact_steps


def may_wait(policy: RetentionPolicy) -> bool:
    """Whether an async admission read may leave its pass until it has answered, the pass
    then sparing the head (`sparing`): not under `delta_graph` (a pass stores values whole
    at a new root and deletes what they were rebuilt from, which a rebuild read across
    its commit could miss), nor under a policy that reshapes the head (such a pass would
    never carry a plan out)."""
    return policy.delta_graph is None and not reshapes_the_head(policy)
