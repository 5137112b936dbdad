"""The history-cache lifecycle protocol: what `RetainingSaver` calls on each cache.

On its own so that the effect drivers, which call it, and the caches, which
implement it, need not import each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class HistoryCache(Protocol):
    """What `RetainingSaver` needs from a cache: forget ids, or whole threads.

    `purge(None)` forgets every thread (used by `delete_for_runs`, which does
    not say which threads it touches).
    """

    def invalidate(self, thread_id: str, checkpoint_ns: str, checkpoint_ids: Sequence[str]) -> None:
        """Forget everything derived from these checkpoints."""

    async def ainvalidate(
        self, thread_id: str, checkpoint_ns: str, checkpoint_ids: Sequence[str]
    ) -> None:
        """Async `invalidate`."""

    def purge(self, thread_id: str | None) -> None:
        """Forget everything about `thread_id`, or about every thread if None."""

    async def apurge(self, thread_id: str | None) -> None:
        """Async `purge`."""
