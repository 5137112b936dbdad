"""The history-cache lifecycle API, and a bounded cache for delta-channel history.

A cache of anything derived from checkpoints must forget a checkpoint before
the checkpoint is deleted; `RetainingSaver` calls `invalidate` (or `purge`)
on every cache it knows first, and deletes nothing if that fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import DeltaChannelHistory

from retaining_saver._effects import Flow, History
from retaining_saver._lru import BoundedLru

CacheKey = tuple[str, str, str, str]
"""(thread_id, checkpoint_ns, checkpoint_id, channel): immutable once written."""


class DeltaHistoryCache:
    """A bounded LRU read-through cache of `get_delta_channel_history` results.

    Pass it in `RetainingSaver(history_caches=[cache])`: reads pinned to a
    `checkpoint_id` are answered from it, and it is invalidated before any
    checkpoint is reclaimed. Unpinned reads bypass it, since "latest" moves.

    Args:
        maxsize: How many (thread, namespace, checkpoint, channel) entries it keeps.

    Raises:
        ValueError: If `maxsize` is not a positive int.
    """

    def __init__(self, maxsize: int = 4096) -> None:
        if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 1:
            raise ValueError(f"maxsize must be a positive int, got {maxsize!r}")
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._entries: BoundedLru[CacheKey, DeltaChannelHistory] = BoundedLru(maxsize)

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, keys: Iterable[CacheKey]) -> dict[str, DeltaChannelHistory]:
        """The cached entries among `keys`, by channel."""
        found: dict[str, DeltaChannelHistory] = {}
        for key in keys:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
                found[key[3]] = entry
        return found

    def store(self, prefix: tuple[str, str, str], entries: Mapping[str, Any]) -> None:
        """Remember `entries` (by channel) for checkpoint `prefix`."""
        for channel, entry in entries.items():
            self._entries.put((*prefix, channel), entry)

    def invalidate(self, thread_id: str, checkpoint_ns: str, checkpoint_ids: Sequence[str]) -> None:
        ids = set(checkpoint_ids)
        self._entries.drop_where(
            lambda k: k[0] == thread_id and k[1] == checkpoint_ns and k[2] in ids
        )

    async def ainvalidate(
        self, thread_id: str, checkpoint_ns: str, checkpoint_ids: Sequence[str]
    ) -> None:
        self.invalidate(thread_id, checkpoint_ns, checkpoint_ids)

    def purge(self, thread_id: str | None) -> None:
        self._entries.drop_where(lambda k: thread_id is None or k[0] == thread_id)

    async def apurge(self, thread_id: str | None) -> None:
        self.purge(thread_id)


def cached_history(
    config: RunnableConfig, channels: Sequence[str], caches: Sequence[object]
) -> Flow[Mapping[str, DeltaChannelHistory]]:
    """Delta-channel history, answered from the `DeltaHistoryCache`s where pinned."""
    configurable = config.get("configurable", {})
    checkpoint_id = configurable.get("checkpoint_id")
    stores = [c for c in caches if isinstance(c, DeltaHistoryCache)]
    if not checkpoint_id or not stores or not channels:
        answer: Mapping[str, DeltaChannelHistory] = yield History(config, channels)
        return answer
    prefix = (str(configurable["thread_id"]), configurable.get("checkpoint_ns", ""), checkpoint_id)
    found = stores[0].lookup((*prefix, channel) for channel in channels)
    missing = [channel for channel in channels if channel not in found]
    if missing:
        fresh: Mapping[str, DeltaChannelHistory] = yield History(config, missing)
        for store in stores:
            store.store(prefix, fresh)
        found.update(fresh)
    return {channel: found[channel] for channel in channels}
