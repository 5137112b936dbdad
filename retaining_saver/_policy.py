"""`RetentionPolicy`: what the retention engine may delete, validated on creation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

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
        for name in ("trailing_duration_leaves", "prune_leaf_sibling_branches"):
            _require(isinstance(getattr(self, name), bool), TypeError, f"{name} must be a bool")
        _require(
            isinstance(self.graft_duration_links, bool),
            TypeError,
            "graft_duration_links must be a bool",
        )
        cap = self.max_delete_per_run
        if cap is not None:
            _require(
                isinstance(cap, int) and not isinstance(cap, bool),
                TypeError,
                "max_delete_per_run must be an int or None",
            )
            _require(cap >= 0, ValueError, f"max_delete_per_run must be >= 0, got {cap}")
        age = self.sibling_branch_min_age
        if age is not None:
            _require(
                isinstance(age, timedelta),
                TypeError,
                "sibling_branch_min_age must be a timedelta or None",
            )
            _require(age >= timedelta(0), ValueError, "sibling_branch_min_age must be >= 0")
        ids = self.protect_checkpoint_ids
        try:
            # Materialised first: a generator would be used up by the check.
            frozen = None if isinstance(ids, str | bytes) else frozenset(ids)
        except TypeError:
            frozen = None
        _require(
            frozen is not None and all(isinstance(i, str) for i in frozen),
            TypeError,
            "protect_checkpoint_ids must be a collection of str ids",
        )
        object.__setattr__(self, "protect_checkpoint_ids", frozen)
        _require(
            self.is_reclaimable_leaf is None or callable(self.is_reclaimable_leaf),
            TypeError,
            "is_reclaimable_leaf must be callable or None",
        )


def _require(ok: bool, error: type[Exception], message: str) -> None:
    if not ok:
        raise error(message)
