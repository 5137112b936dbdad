"""`RetentionPolicy`: what the retention engine may delete, validated on creation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from retaining_saver import _validate as validate
from retaining_saver._lineage import CheckpointNode

LeafPredicate = Callable[[CheckpointNode], bool]
"""Whether a checkpoint carries an app's metadata-only marker (replaces the default)."""


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What the exhaustive engine may delete. The default is the contract's.

    Args:
        trailing_duration_leaves: E1, on by default.
        prune_leaf_sibling_branches: E2, delete whole superseded subtrees.
        sibling_branch_min_age: With E2, keep a subtree whose newest checkpoint
            is younger than this, since a client may still hold its ids.
        graft_duration_links: Remove duration-only chain links by re-parenting
            their children onto the link's parent.
        max_delete_per_run: At most this many deletions per thread; 0 plans
            only; None is unbounded.
        protect_checkpoint_ids: Ids that are never deleted.
        is_reclaimable_leaf: Replaces `is_duration_marker`. The clone and
            no-writes requirements stay.

    Raises:
        ValueError: If `max_delete_per_run` is negative or
            `sibling_branch_min_age` is negative.
        TypeError: If a field has the wrong type.
    """

    trailing_duration_leaves: bool = True
    prune_leaf_sibling_branches: bool = False
    sibling_branch_min_age: timedelta | None = None
    graft_duration_links: bool = False
    max_delete_per_run: int | None = None
    protect_checkpoint_ids: frozenset[str] = frozenset()
    is_reclaimable_leaf: LeafPredicate | None = None

    def __post_init__(self) -> None:
        for name in (
            "trailing_duration_leaves",
            "prune_leaf_sibling_branches",
            "graft_duration_links",
        ):
            validate.flag(name, getattr(self, name))
        validate.count("max_delete_per_run", self.max_delete_per_run, optional=True)
        validate.duration("sibling_branch_min_age", self.sibling_branch_min_age, optional=True)
        ids = validate.ids("protect_checkpoint_ids", self.protect_checkpoint_ids)
        object.__setattr__(self, "protect_checkpoint_ids", ids)
        validate.optional_callable("is_reclaimable_leaf", self.is_reclaimable_leaf)
