"""`RetentionPolicy`: what the retention engine may delete, validated on creation."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from retaining_saver._rules import _validate as validate
from retaining_saver._rules._lineage import CheckpointNode

if TYPE_CHECKING:
    from langgraph.pregel import Pregel

LeafPredicate = Callable[[CheckpointNode], bool]
"""Whether a checkpoint carries an app's metadata-only marker (replaces the default)."""

StepPredicate = Callable[[CheckpointNode], bool]
"""Whether step compaction must keep a super-step checkpoint an app still needs."""

_TTL_REQUIRED = (
    "{name} deletes checkpoints a client may still hold as explicit resume targets, so they "
    "expire only with an explicit TTL: pass history_min_age=timedelta(...) (timedelta(0) for "
    "no grace period); see docs/rules.md#too-young"
)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What the exhaustive engine may delete. The default is the contract's.

    Args:
        trailing_duration_leaves: Delete each namespace's trailing duration-only
            leaf (a clone of its parent that owns no writes); on by default.
        prune_leaf_sibling_branches: Delete whole superseded subtrees: sibling
            branches forked off the protected chain (a regenerated answer's
            old branch, say).
        sibling_branch_min_age: With `prune_leaf_sibling_branches`, keep a
            subtree whose newest checkpoint is younger than this, since a
            client may still hold its ids.
        graft_duration_links: Remove duration-only chain links by re-parenting
            their children onto the link's parent.
        max_delete_per_run: At most this many deletions per thread; 0 plans
            only; None is unbounded (as `RetainingSaver(retention=...)`, 64 per
            admission).
        protect_checkpoint_ids: Ids that are never deleted.
        is_reclaimable_leaf: Replaces `is_duration_marker`. The clone and
            no-writes requirements stay.
        history_keep_runs: History horizon: keep the newest this many runs of
            the root namespace's head line (and the branches forked inside
            them), delete everything older, and make the oldest kept
            checkpoint a root. 0 keeps only the head. None is off.
        compact_steps: Step compaction: in each finished run of the head line
            keep its input, first and last super-step checkpoints, and graft
            out the super-steps between them.
        history_min_age: The TTL of both history rules: no checkpoint younger
            than this is deleted or re-parented. Required by either rule.
        keep_step: With `compact_steps`, super-steps it answers True for stay.
        keep_latest: Every namespace keeps only its latest checkpoint, whatever
            its age, with the protections, as `prune(strategy="keep_latest")`
            means upstream (which sets it). A history rule: `history_min_age`
            is required.
        delta_graph: The compiled graph whose threads the pass visits. With it,
            a DeltaChannel's value is stored whole (materialised) at a
            checkpoint the history rules make a root, so that its ancestors
            can go; without it, they stay back to the channel's last stored
            value. Only the graph knows the channel's reducer: give it only
            for threads of that graph.

    Raises:
        ValueError: If `max_delete_per_run`, `history_keep_runs`,
            `sibling_branch_min_age` or `history_min_age` is negative; if a
            history rule is on without `history_min_age`; if `keep_step` is
            given without `compact_steps`.
        TypeError: If a field has the wrong type.
    """

    trailing_duration_leaves: bool = True
    prune_leaf_sibling_branches: bool = False
    sibling_branch_min_age: timedelta | None = None
    graft_duration_links: bool = False
    max_delete_per_run: int | None = None
    protect_checkpoint_ids: frozenset[str] = frozenset()
    is_reclaimable_leaf: LeafPredicate | None = None
    history_keep_runs: int | None = None
    compact_steps: bool = False
    history_min_age: timedelta | None = None
    keep_step: StepPredicate | None = None
    keep_latest: bool = False
    delta_graph: Pregel[Any, Any, Any, Any] | None = None
    materializable: frozenset[str] = field(init=False, default=frozenset())
    """The root namespace's DeltaChannels `delta_graph` declares: whose values a pass may
    materialise, where the store can hold them whole (`Lineage.stores_whole`)."""

    @property
    def history_rules(self) -> bool:
        """Whether the horizon, step compaction or keep_latest is on."""
        return self.history_keep_runs is not None or self.compact_steps or self.keep_latest

    def __post_init__(self) -> None:
        for name in (
            "trailing_duration_leaves",
            "prune_leaf_sibling_branches",
            "graft_duration_links",
            "compact_steps",
            "keep_latest",
        ):
            validate.flag(name, getattr(self, name))
        validate.count("max_delete_per_run", self.max_delete_per_run, optional=True)
        validate.duration("sibling_branch_min_age", self.sibling_branch_min_age, optional=True)
        ids = validate.ids("protect_checkpoint_ids", self.protect_checkpoint_ids)
        object.__setattr__(self, "protect_checkpoint_ids", ids)
        validate.optional_callable("is_reclaimable_leaf", self.is_reclaimable_leaf)
        self._check_history_rules()
        object.__setattr__(self, "materializable", _delta_channels_of(self.delta_graph))

    def _check_history_rules(self) -> None:
        validate.count("history_keep_runs", self.history_keep_runs, optional=True)
        validate.duration("history_min_age", self.history_min_age, optional=True)
        validate.optional_callable("keep_step", self.keep_step)
        for name, on in (
            ("history_keep_runs", self.history_keep_runs is not None),
            ("compact_steps", self.compact_steps),
            ("keep_latest", self.keep_latest),
        ):
            validate.require(
                not on or self.history_min_age is not None,
                ValueError,
                _TTL_REQUIRED.format(name=name),
            )
        validate.require(
            self.keep_step is None or self.compact_steps,
            ValueError,
            "keep_step only applies to step compaction: set compact_steps=True",
        )


def _delta_channels_of(graph: Any) -> frozenset[str]:
    """The names of the DeltaChannels `graph` declares (none without a graph)."""
    if graph is None:
        return frozenset()
    channels = getattr(graph, "channels", None)
    if not isinstance(channels, Mapping):
        raise TypeError(
            f"delta_graph must be a compiled LangGraph graph (with .channels), got {graph!r}"
        )
    from langgraph.channels import DeltaChannel

    return frozenset(name for name, spec in channels.items() if isinstance(spec, DeltaChannel))
