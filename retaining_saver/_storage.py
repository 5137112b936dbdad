"""The storage surface of `RetainingSaver`: statistics, compaction and indexes."""

from __future__ import annotations

import dataclasses
from typing import Protocol, cast

from retaining_saver._effects import Performer, arun, run
from retaining_saver._errors import UnsupportedSaverError
from retaining_saver._rules import _validate as validate
from retaining_saver.backends._base import Backend, Mode, Op
from retaining_saver.backends._sqlite_compaction import Compaction
from retaining_saver.backends._stats import StorageStats, ranked


class StorageMixin:
    """What a store holds and takes, and the upkeep it needs; refuses an unsupported saver."""

    _backend: Backend | None
    _performer: Performer

    def _nul_ok(self) -> bool:
        return self._backend is None or self._backend.holds_nul

    def _require_backend(self) -> Backend:
        if self._backend is None:
            raise UnsupportedSaverError(type(self._performer.inner))
        return self._backend

    def storage_stats(
        self, thread_id: str | None = None, *, channels: bool = False, top_threads: int = 0
    ) -> StorageStats:
        """Rows and bytes per table for one thread, or for the whole store.

        Args:
            thread_id: The thread; None for the whole store.
            channels: Also measure, per channel, its stored values and writes
                (`StorageStats.channels`, the most bytes first): which channel's
                values take the space. Postgres: its `checkpoint_blobs` rows plus
                the primitive values kept inline in each checkpoint's JSONB.
                Memory: its blobs. SQLite keeps every value inside each checkpoint's
                payload, so each payload measured is decoded (a page at a time)
                and each value serialized alone: a value unchanged for many steps
                counts once per checkpoint, as it is stored.
            top_threads: For the whole store, also this many of the threads holding
                the most bytes (`StorageStats.top_threads`), aggregated in the
                store without loading any thread.

        Returns:
            The figures, with the store's space on disk (`StorageStats.space`):
            SQLite's file, pages and freelist, Postgres's relation sizes.

        Raises:
            ValueError: If `top_threads` is negative, or given with a `thread_id`.
        """
        backend = self._stats_backend(thread_id, channels, top_threads)
        return run(backend, full_stats(backend, thread_id, channels, top_threads), Mode.READ)

    async def astorage_stats(
        self, thread_id: str | None = None, *, channels: bool = False, top_threads: int = 0
    ) -> StorageStats:
        """Async `storage_stats`."""
        backend = self._stats_backend(thread_id, channels, top_threads)
        return await arun(backend, full_stats(backend, thread_id, channels, top_threads), Mode.READ)

    def _stats_backend(self, thread_id: str | None, channels: bool, top_threads: int) -> Backend:
        validate.optional_thread_id("thread_id", thread_id, nul_ok=self._nul_ok())
        validate.flag("channels", channels)
        validate.count("top_threads", top_threads)
        validate.require(
            thread_id is None or not top_threads,
            ValueError,
            "top_threads ranks the whole store's threads: give it without a thread_id",
        )
        return self._require_backend()

    def create_retention_indexes(self) -> None:
        """Postgres: index `checkpoints` by parent, so admission's child check stays flat,
        root checkpoints by thread and id, so `RetentionSweeper` finds idle threads
        without scanning the table, and checkpoints by the `run_id` in their metadata, so
        `delete_for_runs` finds a run's threads without scanning it either.

        Run once, like the saver's own `setup()`; it builds the index
        concurrently, so the saver needs an autocommit connection (as
        `from_conn_string` gives). SQLite gets the same index on first use;
        memory needs none.
        """
        self._require_backend().create_indexes()

    async def acreate_retention_indexes(self) -> None:
        """Async `create_retention_indexes`."""
        await self._require_backend().acreate_indexes()

    def compact_storage(self, min_free_ratio: float = 0.25) -> Compaction:
        """SQLite only: give the file's free pages back once `min_free_ratio` of it is free.

        Deleting rows never shrinks a SQLite file; this checkpoints the WAL and
        runs `VACUUM`. Returns a `Compaction` with pages and bytes before and after.

        Raises:
            TypeError: If the wrapped saver is not a SQLite saver.
        """
        return _compactor(self._require_backend()).compact(min_free_ratio)

    async def acompact_storage(self, min_free_ratio: float = 0.25) -> Compaction:
        """Async `compact_storage`."""
        return await _compactor(self._require_backend()).acompact(min_free_ratio)


def full_stats(
    backend: Backend, thread_id: str | None, channels: bool, top_threads: int
) -> Op[StorageStats]:
    """`storage_stats`' figures, read in one go."""
    tables = yield from backend.stats(thread_id)
    found = (yield from backend.channel_stats(thread_id)) if channels else {}
    top = (yield from backend.top_threads(top_threads)) if top_threads else []
    space = yield from backend.space()
    return dataclasses.replace(tables, channels=ranked(found), top_threads=tuple(top), space=space)


class _Compactor(Protocol):
    """A backend that compacts its store (SQLite's)."""

    def compact(self, min_free_ratio: float) -> Compaction: ...

    async def acompact(self, min_free_ratio: float) -> Compaction: ...


def _compactor(backend: Backend) -> _Compactor:
    if not backend.capabilities.compacts:
        raise TypeError(f"compaction is for SQLite savers; this one stores in {backend.kind}")
    return cast(_Compactor, backend)
