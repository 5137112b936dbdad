"""The maintenance surface of `RetainingSaver`: the exhaustive engine and statistics."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from retaining_saver import _validate as validate
from retaining_saver._effects import Flow, Performer, adrive, drive
from retaining_saver._engine import RetentionReport, prune_pass, retention_pass
from retaining_saver._errors import CleanupPermissionError, UnsupportedSaverError
from retaining_saver._locks import ThreadLocks
from retaining_saver._reclaimed import ReclaimedIds
from retaining_saver._rules import RetentionPolicy
from retaining_saver.backends._apply import Applied
from retaining_saver.backends._base import Backend, StorageStats


class MaintenanceMixin:
    """Engine entrypoints; every one refuses an unsupported saver before any read."""

    backend: Backend | None
    performer: Performer
    # The history caches' purge around a whole-thread deletion, and an unsupported
    # saver's own prune (see `CachePurgeMixin`).
    delete_thread: Callable[[str], Any]
    adelete_thread: Callable[[str], Awaitable[Any]]
    _inner_prune: Callable[[Sequence[str], str], Any]
    _inner_aprune: Callable[[Sequence[str], str], Awaitable[Any]]
    policy: RetentionPolicy
    locks: ThreadLocks
    reclaimed: ReclaimedIds

    def _nul_ok(self) -> bool:
        return self.backend is None or self.backend.holds_nul

    def _require_backend(self) -> Backend:
        if self.backend is None:
            raise UnsupportedSaverError(type(self.performer.inner))
        return self.backend

    def _policy(self, policy: RetentionPolicy | None) -> RetentionPolicy:
        if policy is None:
            policy = RetentionPolicy(is_reclaimable_leaf=self.policy.is_reclaimable_leaf)
        chosen: Any = policy
        if not isinstance(chosen, RetentionPolicy):
            raise TypeError(f"policy must be a RetentionPolicy or None, got {chosen!r}")
        protected = chosen.protect_checkpoint_ids | self.policy.protect_checkpoint_ids
        # Admission judges leaves by the saver's predicate: so does a pass whose policy
        # names none.
        leaf = chosen.is_reclaimable_leaf or self.policy.is_reclaimable_leaf
        return dataclasses.replace(
            chosen, protect_checkpoint_ids=protected, is_reclaimable_leaf=leaf
        )

    def _retention_pass(
        self,
        thread_id: str,
        policy: RetentionPolicy | None,
        dry_run: bool,
        now: datetime | None,
    ) -> Flow[RetentionReport]:
        backend = self._require_backend()
        validate.flag("dry_run", dry_run)
        validate.moment("now", now)
        return retention_pass(thread_id, backend, self._policy(policy), dry_run=dry_run, now=now)

    def enforce_thread_retention(
        self,
        thread_id: str,
        policy: RetentionPolicy | None = None,
        *,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> RetentionReport:
        """Plan and carry out retention for one thread under `policy`.

        The default policy is the contract's: trailing duration leaves only.
        With `dry_run`, nothing changes and the report lists what would.

        Raises:
            UnsupportedSaverError: If the wrapped saver is not supported.
            TypeError: If `policy` is not a `RetentionPolicy`.
        """
        validate.thread_id("thread_id", thread_id, nul_ok=self._nul_ok())
        flow = self._retention_pass(thread_id, policy, dry_run, now)
        with self.locks.hold(thread_id), self._permission_named():
            return self._noted_clones(drive(flow, self.performer))

    async def aenforce_thread_retention(
        self,
        thread_id: str,
        policy: RetentionPolicy | None = None,
        *,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> RetentionReport:
        """Async `enforce_thread_retention`."""
        validate.thread_id("thread_id", thread_id, nul_ok=self._nul_ok())
        flow = self._retention_pass(thread_id, policy, dry_run, now)
        async with self.locks.ahold(thread_id):
            with self._permission_named():
                return self._noted_clones(await adrive(flow, self.performer))

    @contextmanager
    def _permission_named(self) -> Iterator[None]:
        """A refused privilege surfaces as a `CleanupPermissionError` naming it."""
        try:
            yield
        except Exception as error:
            problem = self._require_backend().permission_problem(error)
            if problem is None:
                raise
            raise CleanupPermissionError(problem) from error

    def _noted_clones(self, report: RetentionReport) -> RetentionReport:
        """Under the thread's lock, remember what each deleted clone resolves to."""
        if not report.dry_run:
            for (ns, checkpoint_id), clone_id in report.clones.items():
                self.reclaimed.note((report.thread_id, ns, checkpoint_id), clone_id)
        return report

    def enforce_retention(
        self,
        thread_ids: Iterable[str] | None = None,
        policy: RetentionPolicy | None = None,
        *,
        dry_run: bool = False,
        page_size: int = 100,
    ) -> Iterator[RetentionReport]:
        """Yield a report per thread: the given ones, or every thread, a page at a time.

        Memory stays bounded by `page_size` ids and one thread's lineage.
        """
        self._require_backend()
        thread_ids = validate.thread_ids("thread_ids", thread_ids, nul_ok=self._nul_ok())
        for thread_id in thread_ids if thread_ids is not None else self._all_threads(page_size):
            yield self.enforce_thread_retention(thread_id, policy, dry_run=dry_run)

    def _all_threads(self, page_size: int) -> Iterator[str]:
        _check_page_size(page_size)
        backend, after = self._require_backend(), None
        while page := backend.read(backend.thread_ids(after, page_size)):
            yield from page
            after = page[-1]

    async def aenforce_retention(
        self,
        thread_ids: Iterable[str] | None = None,
        policy: RetentionPolicy | None = None,
        *,
        dry_run: bool = False,
        page_size: int = 100,
    ) -> AsyncIterator[RetentionReport]:
        """Async `enforce_retention`."""
        backend = self._require_backend()
        thread_ids = validate.thread_ids("thread_ids", thread_ids, nul_ok=self._nul_ok())
        if thread_ids is not None:
            for thread_id in thread_ids:
                yield await self.aenforce_thread_retention(thread_id, policy, dry_run=dry_run)
            return
        _check_page_size(page_size)
        after: str | None = None
        while page := await backend.aread(backend.thread_ids(after, page_size)):
            for thread_id in page:
                yield await self.aenforce_thread_retention(thread_id, policy, dry_run=dry_run)
            after = page[-1]

    def prune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", delta_graph: Any = None
    ) -> Any:
        """Prune the given threads: `"keep_latest"` keeps only the latest checkpoint of
        each namespace, `"delete"` deletes the threads, as upstream's `prune` means.

        On a supported saver (whether or not it implements `prune` itself),
        `"keep_latest"` runs the engine with `keep_latest`: also kept are a
        childless checkpoint's pending writes (with its chain to the head's
        line), explicit ids, and each kept checkpoint's DeltaChannel values,
        stored whole at it with `delta_graph` (the threads' compiled graph),
        else rebuilt from the ancestors it keeps. An unsupported saver's own
        `prune` runs instead.

        Raises:
            ValueError: If `strategy` is neither.
            TypeError: If `thread_ids` is not a collection of thread id strings.
        """
        if self.backend is None:
            return self._inner_prune(thread_ids, strategy)  # what it answers, as bare
        ids = self._prune_ids(thread_ids, strategy)
        for thread_id in ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            # Its policy takes no duplicate (no clone's id to remember).
            with self.locks.hold(thread_id), self._permission_named():
                drive(self._prune_pass(thread_id, delta_graph), self.performer)
        return None

    async def aprune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", delta_graph: Any = None
    ) -> Any:
        """Async `prune`."""
        if self.backend is None:
            return await self._inner_aprune(thread_ids, strategy)
        ids = self._prune_ids(thread_ids, strategy)
        for thread_id in ids:
            if strategy == "delete":
                await self.adelete_thread(thread_id)
                continue
            flow = self._prune_pass(thread_id, delta_graph)
            async with self.locks.ahold(thread_id):
                with self._permission_named():
                    await adrive(flow, self.performer)
        return None

    def _prune_pass(self, thread_id: str, delta_graph: Any) -> Flow[Applied]:
        policy = self._policy(_keep_latest(delta_graph))
        return prune_pass(thread_id, self._require_backend(), policy, datetime.now(UTC))

    def _prune_ids(self, thread_ids: Sequence[str], strategy: str) -> list[str]:
        validate.require(
            strategy in PRUNE_STRATEGIES,
            ValueError,
            f"strategy must be one of {PRUNE_STRATEGIES}, got {strategy!r}",
        )
        found = validate.thread_ids("thread_ids", thread_ids, nul_ok=self._nul_ok())
        return list(found or ())

    def storage_stats(self, thread_id: str | None = None) -> StorageStats:
        """Rows and bytes per table for one thread, or for the whole store."""
        validate.optional_thread_id("thread_id", thread_id, nul_ok=self._nul_ok())
        backend = self._require_backend()
        return backend.read(backend.stats(thread_id))

    def create_retention_indexes(self) -> None:
        """Postgres: index `checkpoints` by parent, so admission's child check stays flat.

        Run once, like the saver's own `setup()`; it builds the index
        concurrently, so the saver needs an autocommit connection (as
        `from_conn_string` gives). SQLite gets the same index on first use;
        memory needs none.
        """
        create = getattr(self._require_backend(), "create_indexes", None)
        if create is not None:
            create()

    async def acreate_retention_indexes(self) -> None:
        """Async `create_retention_indexes`."""
        create = getattr(self._require_backend(), "acreate_indexes", None)
        if create is not None:
            await create()

    def compact_storage(self, min_free_ratio: float = 0.25) -> Any:
        """SQLite only: give the file's free pages back once `min_free_ratio` of it is free.

        Deleting rows never shrinks a SQLite file; this checkpoints the WAL and
        runs `VACUUM`. Returns a `Compaction` with pages and bytes before and after.

        Raises:
            TypeError: If the wrapped saver is not a SQLite saver.
        """
        return _compactor(self._require_backend()).compact(min_free_ratio)

    async def acompact_storage(self, min_free_ratio: float = 0.25) -> Any:
        """Async `compact_storage`."""
        return await _compactor(self._require_backend()).acompact(min_free_ratio)

    async def astorage_stats(self, thread_id: str | None = None) -> StorageStats:
        """Async `storage_stats`."""
        validate.optional_thread_id("thread_id", thread_id, nul_ok=self._nul_ok())
        backend = self._require_backend()
        return await backend.aread(backend.stats(thread_id))


PRUNE_STRATEGIES = ("keep_latest", "delete")


def _keep_latest(delta_graph: Any) -> RetentionPolicy:
    """What `prune(strategy="keep_latest")` runs: every namespace's latest checkpoint,
    whatever its age (the call is the explicit TTL), and what the rules keep with it."""
    return RetentionPolicy(
        trailing_duration_leaves=False,
        keep_latest=True,
        history_min_age=timedelta(0),
        delta_graph=delta_graph,
    )


def _compactor(backend: Backend) -> Any:
    compact = getattr(backend, "compact", None)
    if compact is None:
        raise TypeError(f"compaction is for SQLite savers; this one stores in {backend.kind}")
    return backend


def _check_page_size(page_size: int) -> None:
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
