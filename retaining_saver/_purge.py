"""Whole-thread deletions of `RetainingSaver`: caches are purged before and after."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver._effects import Invalidate, Performer
from retaining_saver._locks import ThreadLocks


class CachePurgeMixin:
    """`delete_thread`, and an unsupported saver's `prune` and `delete_for_runs`, with
    the history caches purged.

    A purge that fails before the deletion stops it; the inner saver's result
    is returned unchanged.
    """

    inner: BaseCheckpointSaver[Any]
    _performer: Performer
    _locks: ThreadLocks

    def delete_thread(self, thread_id: str) -> Any:
        # Under the thread's lock: a reclaim in this process cannot record a reclaimed id
        # after the thread's records were forgotten.
        with self._locks.hold(str(thread_id)):
            return self._purging([thread_id], lambda: self.inner.delete_thread(thread_id))

    async def adelete_thread(self, thread_id: str) -> Any:
        async with self._locks.ahold(str(thread_id)):
            return await self._apurging([thread_id], self.inner.adelete_thread(thread_id))

    def _inner_prune(self, thread_ids: Sequence[str], strategy: str) -> Any:
        """The inner saver's own `prune`, for a saver whose storage is not supported."""
        return self._purging(
            _thread_list(thread_ids), lambda: self.inner.prune(thread_ids, strategy=strategy)
        )

    async def _inner_aprune(self, thread_ids: Sequence[str], strategy: str) -> Any:
        deleting = self.inner.aprune(thread_ids, strategy=strategy)
        return await self._apurging(_thread_list(thread_ids), deleting)

    def _inner_delete_for_runs(self, run_ids: Sequence[str]) -> Any:
        """The inner saver's own `delete_for_runs`, for a saver whose storage is not
        supported: it may touch any thread, so every cache is purged."""
        return self._purging([None], lambda: self.inner.delete_for_runs(run_ids))

    async def _inner_adelete_for_runs(self, run_ids: Sequence[str]) -> Any:
        return await self._apurging([None], self.inner.adelete_for_runs(run_ids))

    def _purging(self, thread_ids: Sequence[str | None], delete: Callable[[], Any]) -> Any:
        """Purge the caches of `thread_ids` (None: all), delete, and purge again."""
        for thread_id in thread_ids:
            _purge(thread_id).perform(self._performer)
        result = delete()
        for thread_id in thread_ids:
            _purge(thread_id).perform(self._performer)
        return result

    async def _apurging(self, thread_ids: Sequence[str | None], delete: Awaitable[Any]) -> Any:
        try:
            for thread_id in thread_ids:
                await _purge(thread_id).aperform(self._performer)
        except BaseException:
            _discard(delete)
            raise
        result = await delete
        for thread_id in thread_ids:
            await _purge(thread_id).aperform(self._performer)
        return result


def _discard(awaitable: Awaitable[Any]) -> None:
    close = getattr(awaitable, "close", None)
    if close is not None:
        close()


def _purge(thread_id: str | None) -> Invalidate:
    """Every cache forgets `thread_id` (every thread, if None)."""
    return Invalidate(None if thread_id is None else str(thread_id), "", None)


def _thread_list(thread_ids: Sequence[str]) -> list[str]:
    # A str is refused by the inner saver; iterating it here would purge per letter.
    return [] if isinstance(thread_ids, str) else [str(t) for t in thread_ids]
