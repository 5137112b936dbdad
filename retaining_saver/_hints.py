"""The duration leaf this process last wrote on each thread, so admission can take it unread.

An app stamps its run history as a duration-only leaf, usually through the
same saver its graphs run on. Then this saver already knows the leaf the next
admission read would find at the head: its id, parent, versions, ts and
metadata. On a backend that takes a leaf and reads the head in one statement
(`OneRoundBackend.reclaim_and_read`), that admission read costs one round trip
instead of two. A hint is only a lead: the rules judge it like any leaf, the
statement re-checks every precondition of the deletion against the rows, and
when one fails it answers the head a bare read would answer, from which
admission goes on as usual.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, get_serializable_checkpoint_metadata

from retaining_saver import _rules
from retaining_saver._rules import CheckpointNode, RetentionPolicy

logger = logging.getLogger("retaining_saver")


MAX_HINT_BYTES = 64 * 1024
"""A stamp whose metadata serializes larger than this is not remembered: its admission
reads first and takes second, as for a stamp another process wrote."""

MAX_HINTS_BYTES = 8 * 1024 * 1024
"""All hints together hold at most about this many bytes of metadata."""


class LeafHints:
    """Per thread, the root-namespace checkpoint last put through this saver, if it may
    be a duration leaf; for the most recent `size` threads, within `max_bytes` of
    metadata in all (each hint within `max_hint_bytes`)."""

    def __init__(
        self,
        policy: RetentionPolicy,
        size: int = 4096,
        *,
        max_hint_bytes: int = MAX_HINT_BYTES,
        max_bytes: int = MAX_HINTS_BYTES,
    ) -> None:
        self._policy = policy
        self._size = size
        self._max_hint_bytes = max_hint_bytes
        self._max_bytes = max_bytes
        self._leaves: OrderedDict[str, tuple[CheckpointNode, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        """The serialized size of the metadata the hints hold now."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._leaves)

    def note(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any) -> None:
        """Remember a put that may be a leaf; forget the thread's hint on any other put.

        Never raises: the checkpoint is already stored, and a put that cannot
        be read as a leaf only costs the next admission its shortcut.
        """
        configurable = config.get("configurable", {})
        if configurable.get("checkpoint_ns", ""):
            return  # a subgraph's checkpoint does not move the root head
        thread_id = str(configurable.get("thread_id"))
        try:
            leaf = self._leaf_of(config, checkpoint, metadata)
        except Exception:
            logger.debug("put on thread %s is no leaf hint", thread_id, exc_info=True)
            leaf = None
        size = _size_of(leaf.metadata) if leaf is not None else 0
        with self._lock:
            self._forget(thread_id)
            if leaf is None or size > self._max_hint_bytes:
                return
            self._leaves[thread_id] = (leaf, size)
            self._bytes += size
            while len(self._leaves) > self._size or self._bytes > self._max_bytes:
                self._forget(next(iter(self._leaves)))

    def _forget(self, thread_id: str) -> CheckpointNode | None:
        """Drop `thread_id`'s hint (the lock is held); the hint, if there was one."""
        found = self._leaves.pop(thread_id, None)
        if found is None:
            return None
        self._bytes -= found[1]
        return found[0]

    def _leaf_of(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any
    ) -> CheckpointNode | None:
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
        )

    def peek(self, thread_id: str) -> CheckpointNode | None:
        """The thread's hint, kept."""
        if not self._leaves:
            return None
        with self._lock:
            found = self._leaves.get(thread_id)
        return found[0] if found is not None else None

    def take(self, thread_id: str) -> CheckpointNode | None:
        """The thread's hint, forgotten: it leads one admission at most."""
        if not self._leaves:
            return None  # every admission read asks; most find none, without the lock
        with self._lock:
            return self._forget(thread_id)


def _size_of(metadata: Any) -> int:
    """About how many bytes `metadata` holds: its JSON, as the SQL savers store it."""
    return len(json.dumps(metadata, default=repr, separators=(",", ":")))
