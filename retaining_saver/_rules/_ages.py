"""When a plan can next change with no new checkpoint: the ages the rules judge by.

A plan is a function of a thread's lineage and of "now". With the lineage fixed,
only an age threshold crossed (`history_min_age`, and `sibling_branch_min_age`
where sibling branches go) changes a verdict, so a plan made at `now` holds
until the earliest moment a checkpoint of the lineage crosses one of them.
Admission's amortised pass (`_bounding`) waits for that moment instead of
planning again on every run while young checkpoints wait.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from retaining_saver._rules._leaf import _parse_ts
from retaining_saver._rules._lineage import Lineage
from retaining_saver._rules._policy import RetentionPolicy


def age_thresholds(policy: RetentionPolicy) -> tuple[timedelta, ...]:
    """The positive ages at which `policy` changes its verdict on a checkpoint."""
    ages = [policy.history_min_age] if policy.history_rules else []
    if policy.prune_leaf_sibling_branches:
        ages.append(policy.sibling_branch_min_age)
    return tuple(age for age in ages if age is not None and age > timedelta(0))


def next_age_crossing(lineage: Lineage, policy: RetentionPolicy, now: datetime) -> datetime | None:
    """The earliest moment after `now` at which a checkpoint of `lineage` grows older than
    an age `policy` judges by; None if none will (a checkpoint of unknown age stays
    young for ever, so it never crosses one)."""
    ages = age_thresholds(policy)
    if not ages:
        return None  # a policy that judges no age (a TTL of zero): no time need be read
    crossings = [
        stamp + age
        for node in lineage.nodes.values()
        if (stamp := _parse_ts(node.ts)) is not None
        for age in ages
        if stamp + age > now
    ]
    return min(crossings, default=None)
