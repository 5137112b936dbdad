"""Whole-thread deletions of `RetainingSaver`: caches are purged before and after."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver._effects import Call, Flow, Invalidate, Performer, adrive, drive
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
            return drive(self._deleting_thread(thread_id), self._performer)

    async def adelete_thread(self, thread_id: str) -> Any:
        async with self._locks.ahold(str(thread_id)):
            return await adrive(self._deleting_thread(thread_id), self._performer)

    def _deleting_thread(self, thread_id: str) -> Flow[Any]:
        inner = self.inner
        return _purging([thread_id], Call(inner.delete_thread, inner.adelete_thread, (thread_id,)))

    def _inner_prune(self, thread_ids: Sequence[str], strategy: str) -> Any:
        """The inner saver's own `prune`, for a saver whose storage is not supported."""
        return drive(self._inner_pruning(thread_ids, strategy), self._performer)

    async def _inner_aprune(self, thread_ids: Sequence[str], strategy: str) -> Any:
        return await adrive(self._inner_pruning(thread_ids, strategy), self._performer)

    def _inner_pruning(self, thread_ids: Sequence[str], strategy: str) -> Flow[Any]:
        prune = partial(self.inner.prune, thread_ids, strategy=strategy)
        aprune = partial(self.inner.aprune, thread_ids, strategy=strategy)
        return _purging(_thread_list(thread_ids), Call(prune, aprune))

    def _inner_delete_for_runs(self, run_ids: Sequence[str]) -> Any:
        """The inner saver's own `delete_for_runs`, for a saver whose storage is not
        supported: it may touch any thread, so every cache is purged."""
        return drive(self._inner_deleting_runs(run_ids), self._performer)

    async def _inner_adelete_for_runs(self, run_ids: Sequence[str]) -> Any:
        return await adrive(self._inner_deleting_runs(run_ids), self._performer)

    def _inner_deleting_runs(self, run_ids: Sequence[str]) -> Flow[Any]:
        inner = self.inner
        return _purging([None], Call(inner.delete_for_runs, inner.adelete_for_runs, (run_ids,)))


def _purging(thread_ids: Sequence[str | None], delete: Call) -> Flow[Any]:
    """Purge the caches of `thread_ids` (None: all), `delete`, and purge again; answers
    what `delete` answers."""
    for thread_id in thread_ids:
        yield _purge(thread_id)
    result = yield delete
    for thread_id in thread_ids:
        yield _purge(thread_id)
    return result


def _purge(thread_id: str | None) -> Invalidate:
    """Every cache forgets `thread_id` (every thread, if None)."""
    return Invalidate(None if thread_id is None else str(thread_id), "", None)


def _thread_list(thread_ids: Sequence[str]) -> list[str]:
    # A str is refused by the inner saver; iterating it here would purge per letter.
    return [] if isinstance(thread_ids, str) else [str(t) for t in thread_ids]
