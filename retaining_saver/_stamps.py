"""The duration leaf this process last wrote on each thread, for the writes that follow.

An app stamps its run history as a duration-only leaf, usually through the
same saver its graphs run on. A later write on or beside that stamp (an
`update_state`, a second stamp) would keep it where the thread without stamps
never had it, so `RetainingSaver` reclaims the stamp first; this is how it
knows the stamp without reading the head. A stamp is remembered as the saver
will store it (id, parent, versions, ts, metadata), and judged by the rules
like any leaf when it matters.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, get_serializable_checkpoint_metadata

from retaining_saver import _rules
from retaining_saver._lru import BoundedLru
from retaining_saver._rules import CheckpointNode, RetentionPolicy

logger = logging.getLogger("retaining_saver")


MAX_STAMP_BYTES = 64 * 1024
"""A stamp whose metadata serializes larger than this is not remembered: a write after it
looks the head up instead, as for a stamp another process wrote."""

MAX_STAMPS_BYTES = 8 * 1024 * 1024
"""All remembered stamps together hold at most about this many bytes of metadata."""


class OwnStamps:
    """Per thread, the root-namespace checkpoint last put through this saver, if it may
    be a duration leaf; for the most recent `size` threads, within `max_bytes` of
    metadata in all (each stamp within `max_stamp_bytes`)."""

    def __init__(
        self,
        policy: RetentionPolicy,
        size: int = 4096,
        *,
        max_stamp_bytes: int = MAX_STAMP_BYTES,
        max_bytes: int = MAX_STAMPS_BYTES,
    ) -> None:
        self._policy = policy
        # The marker as data, which a put's own metadata can rule out; None: an app's rule.
        self._marker = _rules.marker_shape(policy)
        self._stamps: BoundedLru[str, CheckpointNode] = BoundedLru(
            size,
            size_of=lambda node: _size_of(node.metadata),
            max_bytes=max_bytes,
            max_entry_bytes=max_stamp_bytes,
        )

    @property
    def bytes(self) -> int:
        """The serialized size of the metadata the stamps hold now."""
        return self._stamps.bytes

    def __len__(self) -> int:
        return len(self._stamps)

    def remember(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any) -> None:
        """Remember a put that may be a stamp; forget the thread's stamp on any other put.

        Never raises: the checkpoint is already stored, and a put that cannot be
        read as a stamp only costs a later write a look at the head.
        """
        configurable = config.get("configurable", {})
        if configurable.get("checkpoint_ns", ""):
            return  # a subgraph's checkpoint does not move the root head
        thread_id = str(configurable.get("thread_id"))
        try:
            stamp = self._stamp_of(config, checkpoint, metadata)
        except Exception:
            logger.debug("put on thread %s is no stamp", thread_id, exc_info=True)
            stamp = None
        if stamp is None:
            self._stamps.pop(thread_id)
        else:
            self._stamps.put(thread_id, stamp)

    def _stamp_of(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any
    ) -> CheckpointNode | None:
        if not self._may_be_stamp(metadata):
            return None
        # As the savers store it: the config's keys merged in, without `writes`.
        stored = get_serializable_checkpoint_metadata(config, metadata)
        if not _rules.may_have_marker(stored, self._policy):
            return None
        return CheckpointNode(
            checkpoint_ns="",
            checkpoint_id=checkpoint["id"],
            parent_id=config.get("configurable", {}).get("checkpoint_id"),
            channel_versions=dict(checkpoint["channel_versions"]),
            versions_seen={k: dict(v) for k, v in checkpoint["versions_seen"].items()},
            write_count=0,
            metadata=stored,
            ts=checkpoint["ts"],
            format_version=CheckpointNode.format_version_of(checkpoint.get("v")),
        )

    def _may_be_stamp(self, metadata: Any) -> bool:
        """False when the put's own `source` is not the marker's: the config's keys never
        replace a key the metadata has, so the stored metadata cannot have the marker
        either. Every put of a run is dismissed here, before the stored metadata is built."""
        if self._marker is None or "source" not in metadata:
            return True
        source = metadata["source"]
        # The savers store text without its NULs (`get_checkpoint_metadata`).
        return (source.replace("\x00", "") if isinstance(source, str) else source) == (
            self._marker.source
        )

    def peek(self, thread_id: str) -> CheckpointNode | None:
        """The thread's stamp, kept."""
        return self._stamps.get(thread_id)

    def forget(self, thread_id: str, checkpoint_id: str) -> None:
        """Forget the thread's stamp if it is `checkpoint_id` (it was reclaimed)."""
        stamp = self._stamps.get(thread_id)
        if stamp is not None and stamp.checkpoint_id == checkpoint_id:
            self._stamps.pop(thread_id)


def _size_of(metadata: Any) -> int:
    """About how many bytes `metadata` holds: its JSON, as the SQL savers store it."""
    return len(json.dumps(metadata, default=repr, separators=(",", ":")))
