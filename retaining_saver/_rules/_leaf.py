"""The rules about one checkpoint and its parent: markers, clones, leaves, and what a
graft or root proved, re-checked on the rows as they are (a deletion's checks are
`_checks`'). No I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from retaining_saver._rules._lineage import (
    CheckpointNode,
    Deletion,
    Graft,
    Reason,
    Root,
)
from retaining_saver._rules._policy import RetentionPolicy

RUN_HISTORY_KEYS = ("run_durations", "run_message_ids")
MAX_STACKED_LEAVES = 3
"""How many stacked duration leaves one admission reclaims at the most."""
PARSED_TS_CACHE = 4096
"""How many checkpoint times `_parse_ts` keeps parsed: a few passes' windows."""
DELTA_UNNAMED_KEY = "delta_writes_versioned"
"""The metadata key LangGraph.js marks a DeltaChannel graph's threads with, without
naming its channels: such a thread keeps all its history."""
ROOT_NAMESPACE = ""


def is_duration_marker(node: CheckpointNode) -> bool:
    """The default marker rule: a metadata-only checkpoint a run-history writer stamped.

    It looks at shape alone, so it holds on every backend: `source == "update"`
    and a run-history key. Postgres drops `metadata["writes"]`, so the
    `runtime_run_duration` write marker is not required.
    """
    return is_duration_metadata(node.metadata)


def is_duration_metadata(metadata: Mapping[str, Any]) -> bool:
    """`is_duration_marker`, on a checkpoint's metadata alone."""
    return DURATION_MARKER.matches(metadata)


@dataclass(frozen=True, slots=True)
class MarkerShape:
    """A marker rule stated as data, so that a store can test it inside a statement.

    Metadata has the marker when its `source` is `source` and it has one of
    `keys` at its top level. A backend that judges a leaf in SQL binds these
    values, never its own copy of them; tests/admission/test_reclaim_guard.py holds the
    statements to `leaf_verdict`.
    """

    source: str
    keys: tuple[str, ...]

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        return metadata.get("source") == self.source and any(k in metadata for k in self.keys)


DURATION_MARKER = MarkerShape("update", RUN_HISTORY_KEYS)
"""The default marker: what a run-history writer stamps (see `is_duration_marker`)."""


def marker_shape(policy: RetentionPolicy) -> MarkerShape | None:
    """The policy's marker as data; None when an app's own predicate replaces it."""
    return DURATION_MARKER if policy.is_reclaimable_leaf is None else None


def may_have_marker(metadata: Mapping[str, Any], policy: RetentionPolicy) -> bool:
    """False when no checkpoint with this metadata has the marker under `policy`.

    It needs no `CheckpointNode`, so a read can dismiss an ordinary head cheaply.
    """
    return policy.is_reclaimable_leaf is not None or is_duration_metadata(metadata)


def has_marker(node: CheckpointNode, policy: RetentionPolicy) -> bool:
    """Whether `node` has the metadata-only marker under `policy`."""
    rule = policy.is_reclaimable_leaf or is_duration_marker
    return bool(rule(node))


def is_clone(node: CheckpointNode, parent: CheckpointNode) -> bool:
    """Whether `node` holds exactly its parent's state, compared as whole maps, with the
    same values stored (a delta walk through either stops at the same place) and the
    same checkpoint format (below 4, a checkpoint's pending sends are read from its
    parent's writes).

    `stored` or `format_version` None is a fact not loaded: it matches only another
    unloaded one (both read by the same loader), never a loaded value.
    """
    return (
        node.parent_id == parent.checkpoint_id
        and node.checkpoint_ns == parent.checkpoint_ns
        and dict(node.channel_versions) == dict(parent.channel_versions)
        and dict(node.versions_seen) == dict(parent.versions_seen)
        and node.stored == parent.stored
        and node.format_version == parent.format_version
    )


def leaf_deletion(node: CheckpointNode, reason: Reason, *, head: bool) -> Deletion:
    """The guarded deletion of a duration-only checkpoint that clones its parent."""
    return Deletion(
        node.checkpoint_ns,
        node.checkpoint_id,
        node.parent_id,
        reason,
        clone_of=node.parent_id,
        must_be_head=head,
    )


def _time_text(ts: object) -> str:
    """A checkpoint's `ts` as text: a time that is no string (a hand-made checkpoint's)
    reads as a missing one, `""`, which the backends give for none."""
    return str(ts) if isinstance(ts, str) else ""


def _parse_ts(ts: object) -> datetime | None:
    """The moment `ts` names, aware; None where it names none (not an ISO-8601 string)."""
    return _parsed_ts(_time_text(ts))


@lru_cache(maxsize=PARSED_TS_CACHE)
def _parsed_ts(ts: str) -> datetime | None:
    # Each pass reads the ages of the checkpoints the last one kept: their times are parsed
    # once, not at every pass (a datetime is immutable, so one may be shared).
    try:
        return _aware(datetime.fromisoformat(ts))
    except ValueError:
        return None


def _aware(moment: datetime) -> datetime:
    """Naive times are taken as UTC, which is what LangGraph writes."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _graftable_onto(parent: CheckpointNode | None) -> bool:
    """Whether a link's children may be re-parented onto `parent`.

    A delta channel's value at a child is rebuilt by walking up from its
    parent, collecting writes down to the nearest stored value, the seed's own
    writes included. A link clones its parent and owns no writes; grafting
    past it changes the walk only by the writes of the new parent, should the
    link have been the seed. So the new parent must own none.
    """
    return parent is not None and not parent.write_count


def graft_holds(graft: Graft, now: Mapping[str, CheckpointNode]) -> bool:
    """Whether `graft` is still sound, on the rows `now` read in its transaction.

    A duration-link graft: every link it skips clones its parent and owns no
    writes, and the new parent owns none (`_graftable_onto`). A history graft:
    the chain is as planned (`_chain_as_planned`).
    """
    if graft.reason is not Reason.GRAFTED_DURATION_LINK:
        return _chain_as_planned(graft.child_id, graft.via, graft.new_parent_id, now)
    child = now.get(graft.child_id)
    if child is None or child.parent_id != graft.via[0]:
        return False
    if not _graftable_onto(now.get(graft.new_parent_id)):
        return False
    for link_id, parent_id in zip(graft.via, (*graft.via[1:], graft.new_parent_id), strict=True):
        link, parent = now.get(link_id), now.get(parent_id)
        if link is None or parent is None or link.write_count or not is_clone(link, parent):
            return False
    return True


def root_holds(root: Root, now: Mapping[str, CheckpointNode]) -> bool:
    """Whether `root` is still sound: its chain runs through `via` to a root, as planned."""
    return _chain_as_planned(root.checkpoint_id, root.via, None, now)


def _chain_as_planned(
    child_id: str, via: Sequence[str], top_id: str | None, now: Mapping[str, CheckpointNode]
) -> bool:
    """Whether `child_id`'s parents are `via` then `top_id` (None: `via` ends at a root),
    as the rows `now` read.

    A changed chain means the thread changed since the plan; it is judged again
    on the next pass. (A delta channel's walk back from the child was judged on
    these same rows: a checkpoint's versions, values and writes do not change
    once written, and a walk runs only up its chain.)
    """
    chain = [child_id, *via]
    for checkpoint_id, parent_id in zip(chain, [*via, top_id], strict=True):
        node = now.get(checkpoint_id)
        if node is None or node.parent_id != parent_id:
            return False
    return top_id is None or top_id in now
