"""The maintenance surface of `RetainingSaver`: the exhaustive engine and statistics."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from retaining_saver._accounting import Accounts
from retaining_saver._effects import Call, Flow, Locked, Performer, adrive, arun, drive, run
from retaining_saver._engine import (
    RetentionReport,
    keeps_delta_walks,
    planned_pass,
    retention_pass,
)
from retaining_saver._errors import CleanupPermissionError
from retaining_saver._locks import ThreadLocks
from retaining_saver._reclaimed import ReclaimedIds
from retaining_saver._rules import RetentionPolicy
from retaining_saver._rules import _validate as validate
from retaining_saver._rules._recheck import Applied
from retaining_saver._storage import StorageMixin
from retaining_saver.backends._base import Backend, Mode

T = TypeVar("T")

if TYPE_CHECKING:
    from langgraph.pregel import Pregel


class MaintenanceMixin(StorageMixin):
    """Engine entrypoints; every one refuses an unsupported saver before any read."""

    _backend: Backend | None
    _performer: Performer
    # The history caches' purge around a whole-thread deletion, and an unsupported
    # saver's own prune (see `CachePurgeMixin`).
    delete_thread: Callable[[str], Any]
    adelete_thread: Callable[[str], Awaitable[Any]]
    _inner_prune: Callable[[Sequence[str], str], Any]
    _inner_aprune: Callable[[Sequence[str], str], Awaitable[Any]]
    policy: RetentionPolicy
    _locks: ThreadLocks
    _reclaimed: ReclaimedIds
    _accounts: Accounts

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

    def enforce_thread_retention(
        self,
        thread_id: str,
        policy: RetentionPolicy | None = None,
        *,
        dry_run: bool = False,
        now: datetime | None = None,
        channels: bool = False,
    ) -> RetentionReport:
        """Plan and carry out retention for one thread under `policy`.

        The default policy is the contract's: trailing duration leaves only.
        With `dry_run`, nothing changes and the report lists what would. The
        report's `before` and `after` carry the thread's rows and bytes per table
        and the store's space on disk; with `channels`, per channel too, as
        `storage_stats(channels=True)` measures them (on SQLite, decoding the
        thread's checkpoints before and after).

        Raises:
            UnsupportedSaverError: If the wrapped saver is not supported.
            TypeError: If `policy` is not a `RetentionPolicy`.
        """
        flow = self._enforce_thread(thread_id, policy, dry_run, now, channels)
        return drive(flow, self._performer)

    async def aenforce_thread_retention(
        self,
        thread_id: str,
        policy: RetentionPolicy | None = None,
        *,
        dry_run: bool = False,
        now: datetime | None = None,
        channels: bool = False,
    ) -> RetentionReport:
        """Async `enforce_thread_retention`."""
        flow = self._enforce_thread(thread_id, policy, dry_run, now, channels)
        return await adrive(flow, self._performer)

    def _enforce_thread(
        self,
        thread_id: str,
        policy: RetentionPolicy | None,
        dry_run: bool,
        now: datetime | None,
        channels: bool,
    ) -> Flow[RetentionReport]:
        validate.thread_id("thread_id", thread_id, nul_ok=self._nul_ok())
        backend = self._require_backend()
        validate.flag("dry_run", dry_run)
        validate.flag("channels", channels)
        validate.moment("now", now)
        chosen = self._policy(policy)
        flow = retention_pass(
            thread_id, backend, chosen, dry_run=dry_run, now=now, channels=channels
        )
        report: RetentionReport = yield Locked(thread_id, self._remembering_clones(flow))
        return report

    def _remembering_clones(self, flow: Flow[RetentionReport]) -> Flow[RetentionReport]:
        """`flow`, permissions named; then, still under the thread's lock, what each deleted
        clone resolves to remembered."""
        return self._remember_clones((yield from self._permission_named(flow)))

    def _permission_named(self, flow: Flow[T]) -> Flow[T]:
        """`flow`, with a refused privilege surfacing as a `CleanupPermissionError` naming it."""
        try:
            return (yield from flow)
        except Exception as error:
            problem = self._require_backend().permission_problem(error)
            if problem is None:
                raise
            raise CleanupPermissionError(problem) from error

    def _remember_clones(self, report: RetentionReport) -> RetentionReport:
        """Under the thread's lock, remember what each deleted clone resolves to."""
        if not report.dry_run:
            for (ns, checkpoint_id), clone_id in report.clones.items():
                self._reclaimed.remember((report.thread_id, ns, checkpoint_id), clone_id)
        return report

    def enforce_retention(
        self,
        thread_ids: Iterable[str] | None = None,
        policy: RetentionPolicy | None = None,
        *,
        dry_run: bool = False,
        page_size: int = 100,
        channels: bool = False,
    ) -> Iterator[RetentionReport]:
        """A report per thread: the given ones, or every thread, a page at a time.

        The arguments are checked at the call; the passes run as the returned
        iterator is consumed, one thread per report, so a call that is never
        iterated deletes nothing (`list(saver.enforce_retention())` runs them
        all). Memory stays bounded by `page_size` ids and one thread's lineage.
        `channels` asks each report for its figures per channel (see
        `enforce_thread_retention`).

        Raises:
            TypeError: If `thread_ids` is not an iterable of thread ids (a
                `RetentionPolicy` given positionally, say) or `policy` is not a
                `RetentionPolicy`.
            ValueError: If `page_size` is not a positive int.
            UnsupportedSaverError: If the wrapped saver is not supported.
        """
        ids, kw = self._checked_pass_arguments(thread_ids, policy, dry_run, page_size, channels)
        return self._enforce_each(ids, page_size, partial(self.enforce_thread_retention, **kw))

    def _checked_pass_arguments(
        self,
        thread_ids: Iterable[str] | None,
        policy: RetentionPolicy | None,
        dry_run: bool,
        page_size: int,
        channels: bool,
    ) -> tuple[Iterable[str] | None, dict[str, Any]]:
        """`thread_ids` checked (each id as it is used), with everything else the passes
        take checked now, at the call, not when the first report is asked for; and the
        keyword arguments of each thread's pass."""
        self._require_backend()
        chosen: Any = thread_ids
        validate.require(
            not isinstance(chosen, RetentionPolicy),
            TypeError,
            "thread_ids is a RetentionPolicy: pass it as policy=..., after the thread ids "
            "(None for every thread)",
        )
        self._policy(policy)
        validate.flag("dry_run", dry_run)
        validate.flag("channels", channels)
        _check_page_size(page_size)
        ids = validate.thread_ids("thread_ids", thread_ids, nul_ok=self._nul_ok())
        return ids, {"policy": policy, "dry_run": dry_run, "channels": channels}

    def _enforce_each(
        self,
        thread_ids: Iterable[str] | None,
        page_size: int,
        one: Callable[[str], RetentionReport],
    ) -> Iterator[RetentionReport]:
        for thread_id in thread_ids if thread_ids is not None else self._all_threads(page_size):
            yield one(thread_id)

    def _all_threads(self, page_size: int) -> Iterator[str]:
        backend, after = self._require_backend(), None
        while page := run(backend, backend.thread_ids(after, page_size), Mode.READ):
            yield from page
            after = page[-1]

    def aenforce_retention(
        self,
        thread_ids: Iterable[str] | None = None,
        policy: RetentionPolicy | None = None,
        *,
        dry_run: bool = False,
        page_size: int = 100,
        channels: bool = False,
    ) -> AsyncIterator[RetentionReport]:
        """Async `enforce_retention`: checked at the call, run as it is iterated
        (`async for report in saver.aenforce_retention(): ...`)."""
        ids, kw = self._checked_pass_arguments(thread_ids, policy, dry_run, page_size, channels)
        return self._aenforce_each(ids, page_size, partial(self.aenforce_thread_retention, **kw))

    async def _aenforce_each(
        self,
        thread_ids: Iterable[str] | None,
        page_size: int,
        one: Callable[[str], Awaitable[RetentionReport]],
    ) -> AsyncIterator[RetentionReport]:
        ids = _each(thread_ids) if thread_ids is not None else self._aall_threads(page_size)
        async for thread_id in ids:
            yield await one(thread_id)

    async def _aall_threads(self, page_size: int) -> AsyncIterator[str]:
        backend, after = self._require_backend(), None
        while page := await arun(backend, backend.thread_ids(after, page_size), Mode.READ):
            for thread_id in page:
                yield thread_id
            after = page[-1]

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        delta_graph: Pregel[Any, Any, Any, Any] | None = None,
    ) -> None:
        """Prune the given threads: `"keep_latest"` keeps only the latest checkpoint of
        each namespace, `"delete"` deletes the threads, as upstream's `prune` means;
        `"delete_all"`, the name LangGraph's Agent Server passes, is `"delete"`.

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
        if self._backend is None:
            # Its own prune, whose answer (None, by upstream's signature) passes through.
            return self._inner_prune(thread_ids, strategy)  # type: ignore[no-any-return]
        return drive(self._prune(thread_ids, strategy, delta_graph), self._performer)

    async def aprune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        delta_graph: Pregel[Any, Any, Any, Any] | None = None,
    ) -> None:
        """Async `prune`."""
        if self._backend is None:
            return await self._inner_aprune(thread_ids, strategy)  # type: ignore[no-any-return]
        return await adrive(self._prune(thread_ids, strategy, delta_graph), self._performer)

    def _prune(
        self,
        thread_ids: Sequence[str],
        strategy: str,
        delta_graph: Pregel[Any, Any, Any, Any] | None,
    ) -> Flow[None]:
        for thread_id in self._prune_ids(thread_ids, strategy):
            if strategy in DELETE_STRATEGIES:
                yield Call(self.delete_thread, self.adelete_thread, (thread_id,))
                continue
            # Its policy takes no duplicate (no clone's id to remember).
            flow = self._permission_named(self._prune_pass(thread_id, delta_graph))
            yield Locked(thread_id, flow)

    def _prune_pass(
        self, thread_id: str, delta_graph: Pregel[Any, Any, Any, Any] | None
    ) -> Flow[Applied]:
        policy = self._policy(keep_latest_policy(delta_graph))
        backend = self._require_backend()
        _, plan, applied = yield from planned_pass(thread_id, backend, policy, datetime.now(UTC))
        if keeps_delta_walks(plan, policy):
            self._accounts.once(DELTA_KEPT, DELTA_KEPT_MESSAGE, "prune(strategy='keep_latest')")
        return applied

    def _prune_ids(self, thread_ids: Sequence[str], strategy: str) -> list[str]:
        validate.require(
            strategy in PRUNE_STRATEGIES,
            ValueError,
            f"strategy must be one of {PRUNE_STRATEGIES}, got {strategy!r}",
        )
        found = validate.thread_ids("thread_ids", thread_ids, nul_ok=self._nul_ok())
        return list(found or ())


PRUNE_STRATEGIES = ("keep_latest", "delete", "delete_all")

# Both delete the threads whole: upstream's base class names `"delete"`, the Agent
# Server's sweep passes `"delete_all"`.
DELETE_STRATEGIES = ("delete", "delete_all")

DELTA_KEPT = "delta-kept"
DELTA_KEPT_MESSAGE = (
    "%s keeps the checkpoints a kept DeltaChannel value is rebuilt from, for want of "
    "delta_graph (the threads' compiled graph, which stores the value whole at the "
    "oldest kept checkpoint instead); logged once"
)


def keep_latest_policy(delta_graph: Pregel[Any, Any, Any, Any] | None = None) -> RetentionPolicy:
    """What `prune(strategy="keep_latest")` runs: every namespace's latest checkpoint,
    whatever its age (the call is the explicit TTL), and what the rules keep with it."""
    return RetentionPolicy(
        trailing_duration_leaves=False,
        keep_latest=True,
        history_min_age=timedelta(0),
        delta_graph=delta_graph,
    )


def _check_page_size(page_size: int) -> None:
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")


async def _each(thread_ids: Iterable[str]) -> AsyncIterator[str]:
    """The ids of `thread_ids`, for an `async for` that may also page through the store."""
    for thread_id in thread_ids:
        yield thread_id
