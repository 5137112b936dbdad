"""`RetentionSweeper`: an `IdleThreadPolicy` applied to a whole store, pass after pass.

A pass walks the store's threads by key from where the last one stopped,
judges each by its ids (`age_verdict`, no row read), and hands the idle ones,
at most `sweep_limit` of them, to `sweep_thread`. When the walk reaches the
last thread, the next pass starts again from the first. Only a page of
thread keys and one thread's lineage are ever in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from retaining_saver._effects import Flow, IfFree, Run, adrive, drive
from retaining_saver._rules import RetentionPolicy
from retaining_saver._rules import _validate as validate
from retaining_saver._rules._idle import IdleVerdict, ThreadHead, age_verdict
from retaining_saver._rules._idle_policy import IdleThreadPolicy
from retaining_saver._sweep_thread import SweepOutcome, ThreadResult, sweep_thread
from retaining_saver.backends._base import Mode
from retaining_saver.backends._sweep import SweepStore
from retaining_saver.backends._sweep_stores import store_for

if TYPE_CHECKING:
    from retaining_saver._saver import RetainingSaver

logger = logging.getLogger("retaining_saver")

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class SweepPass:
    """What one pass found and did.

    Attributes:
        started_at: The sweeper's clock when the pass began (what ages are measured to).
        dry_run: True if nothing was changed.
        started_after: The thread key the pass resumed after (None: the first thread).
        stopped_after: The key the next pass resumes after (None: the walk reached the
            last thread, and the next pass starts from the first).
        scanned: Threads whose ids the pass read.
        outcomes: Per outcome, how many threads had it (young threads included).
        results: Each thread the pass found idle by its ids, and what it did with it.
        checkpoints_deleted: Checkpoints deleted (or, in a dry run, that would be).
        cancelled: The pass was cancelled (or stopped) before its end.
    """

    started_at: datetime
    dry_run: bool
    started_after: str | None
    stopped_after: str | None
    scanned: int
    outcomes: dict[str, int]
    results: tuple[ThreadResult, ...]
    checkpoints_deleted: int
    cancelled: bool = False

    @property
    def failed(self) -> int:
        """Threads whose handling raised (each logged)."""
        return self.outcomes.get(SweepOutcome.FAILED, 0)


@dataclass
class SweepCounters:
    """Totals over every pass of a sweeper.

    Attributes:
        passes: Passes finished or cancelled.
        scanned: Threads whose ids were read.
        outcomes: Per outcome, how many threads had it.
        checkpoints_deleted: Checkpoints deleted.
        failed: Threads whose handling raised.
    """

    passes: int = 0
    scanned: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    checkpoints_deleted: int = 0
    failed: int = 0


@dataclass
class _Pass:
    """A pass under way: its key, its tally, its results."""

    started_at: datetime
    dry_run: bool
    started_after: str | None
    after: str | None
    scanned: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    results: list[ThreadResult] = field(default_factory=list)
    reached_end: bool = False

    def note(self, result: ThreadResult) -> None:
        self.results.append(result)
        self.outcomes[result.outcome] += 1
        self.after = result.thread_id

    def summary(self, *, cancelled: bool) -> SweepPass:
        deleted = sum(
            r.checkpoints
            for r in self.results
            if r.outcome
            in (
                SweepOutcome.DELETED,
                SweepOutcome.PRUNED,
                SweepOutcome.WOULD_DELETE,
                SweepOutcome.WOULD_PRUNE,
            )
        )
        return SweepPass(
            started_at=self.started_at,
            dry_run=self.dry_run,
            started_after=self.started_after,
            stopped_after=None if self.reached_end else self.after,
            scanned=self.scanned,
            outcomes=dict(self.outcomes),
            results=tuple(self.results),
            checkpoints_deleted=deleted,
            cancelled=cancelled,
        )


class RetentionSweeper:
    """Applies an `IdleThreadPolicy` to every thread of a `RetainingSaver`'s store, every
    `interval`, at most `sweep_limit` idle threads a pass.

    In an asyncio app, run it for the app's lifetime: `async with
    RetentionSweeper(...)`, or `await start()` and `await stop()`. From
    synchronous code, call `run_pass()` yourself (a cron job), or run
    `run_until(stop_event)` in a thread of its own. Several processes may
    each run one on one Postgres database: a thread is handled by one at a
    time, and one that another holds is skipped (see the README's "Running
    it for a fleet").

    A thread whose handling fails is logged and counted, and the pass goes on.
    Cancelling a pass (or `stop()`) ends it at once; each thread is handled
    in one transaction, so none is left half done.

    Args:
        saver: The saver whose store is swept. Use the same (sync or async)
            calls as its runs do: a thread one of them holds in this process
            is skipped.
        policy: Which threads expire, and what happens to them.
        interval: Time between the start of one pass and the next.
        sweep_limit: At most this many idle threads handled per pass.
        page_size: Thread keys read per query.
        dry_run: Judge and report, change nothing.
        clock: What "now" is (a timezone-aware `datetime`); settable, for tests.
        on_pass: Called with each pass's `SweepPass`; its errors are logged.

    Raises:
        UnsupportedSaverError: If the saver's store is not supported.
        TypeError: If an argument has the wrong type.
        ValueError: If `interval` is not positive, or `sweep_limit` or
            `page_size` is below 1.
    """

    def __init__(
        self,
        saver: RetainingSaver,
        policy: IdleThreadPolicy,
        *,
        interval: timedelta = timedelta(minutes=5),
        sweep_limit: int = 1000,
        page_size: int = 500,
        dry_run: bool = False,
        clock: Clock | None = None,
        on_pass: Callable[[SweepPass], Any] | None = None,
    ) -> None:
        chosen: Any = policy
        validate.require(
            isinstance(chosen, IdleThreadPolicy),
            TypeError,
            f"policy must be an IdleThreadPolicy, got {chosen!r}",
        )
        self.interval: timedelta = validate.duration("interval", interval, positive=True)
        self.sweep_limit: int = validate.count("sweep_limit", sweep_limit, minimum=1)
        self.page_size: int = validate.count("page_size", page_size, minimum=1)
        self.dry_run: bool = validate.flag("dry_run", dry_run)
        self.clock: Clock = validate.optional_callable("clock", clock) or _utc_now
        self.on_pass = validate.optional_callable("on_pass", on_pass)
        self.saver, self.policy = saver, policy
        self.store: SweepStore = store_for(saver._require_backend())
        self.engine_policy = _engine_policy(saver, policy)
        self.counters = SweepCounters()
        self.last_pass: SweepPass | None = None
        self.resume_after: str | None = None
        """The thread key the next pass starts after (None: the first thread)."""
        self._prepared = False
        self._stopping = threading.Event()
        self._task: asyncio.Task[None] | None = None

    # One pass

    def run_pass(self) -> SweepPass:
        """Run one pass now, synchronously (and from any thread, on an async saver too)."""
        return drive(self._pass(stoppable=True), self.saver._performer)

    async def arun_pass(self) -> SweepPass:
        """Async `run_pass`: cancelling it ends the pass with no thread half done."""
        return await adrive(self._pass(stoppable=False), self.saver._performer)

    def _pass(self, *, stoppable: bool) -> Flow[SweepPass]:
        """One pass; `stoppable`: a pass `run_until` stopped counts as cancelled."""
        if not self._prepared and not self.dry_run:
            yield Run(self.store.prepare(), Mode.WRITE)
            self._prepared = True
        run = self._begin()
        try:
            while self._wants_more(run):
                page = yield Run(self.store.scan(run.after, self.page_size), Mode.READ)
                for head in self._idle_heads(run, page):
                    handled = self._handled(head, run.started_at)
                    run.note((yield IfFree(head.thread_id, handled, _busy(head))))
        except BaseException:
            self._finish(run, cancelled=True)
            raise
        return self._finish(run, cancelled=stoppable and self._stopping.is_set())

    def _begin(self) -> _Pass:
        now = validate.moment("clock()", self.clock())
        validate.require(now.tzinfo is not None, ValueError, f"clock() must be aware, got {now!r}")
        return _Pass(now, self.dry_run, self.resume_after, self.resume_after)

    def _wants_more(self, run: _Pass) -> bool:
        return not (
            run.reached_end or len(run.results) >= self.sweep_limit or self._stopping.is_set()
        )

    def _idle_heads(self, run: _Pass, page: list[ThreadHead]) -> Any:
        """The threads of `page` idle by their ids, while the pass may handle more; the
        others are counted as they pass."""
        for head in page:
            if len(run.results) >= self.sweep_limit or self._stopping.is_set():
                return
            run.scanned += 1
            verdict = age_verdict(head, self.policy, run.started_at)
            if verdict is IdleVerdict.EXPIRED:
                yield head
            else:
                run.outcomes[verdict.value] += 1
                run.after = head.thread_id
        run.reached_end = len(page) < self.page_size

    def _handled(self, head: ThreadHead, now: datetime) -> Flow[ThreadResult]:
        """The thread swept, under its lock; a failure is logged, and the pass goes on."""
        flow = sweep_thread(
            self.store, head, self.policy, self.engine_policy, now, dry_run=self.dry_run
        )
        try:
            return self._remember_clones((yield from flow))
        except Exception:
            logger.exception("sweeping thread %r failed; the pass goes on", head.thread_id)
            return ThreadResult(head.thread_id, SweepOutcome.FAILED)

    def _remember_clones(self, result: ThreadResult) -> ThreadResult:
        """Remember what each reclaimed duplicate's id resolves to, as the engine does."""
        for (ns, checkpoint_id), clone_id in (result.clones or {}).items():
            self.saver._reclaimed.remember((result.thread_id, ns, checkpoint_id), clone_id)
        return result

    def _finish(self, run: _Pass, *, cancelled: bool) -> SweepPass:
        summary = run.summary(cancelled=cancelled)
        self.resume_after = summary.stopped_after
        self.last_pass = summary
        counters = self.counters
        counters.passes += 1
        counters.scanned += summary.scanned
        counters.outcomes.update(summary.outcomes)
        counters.failed += summary.failed
        if not summary.dry_run:
            counters.checkpoints_deleted += summary.checkpoints_deleted
        if self.on_pass is not None:
            try:
                self.on_pass(summary)
            except Exception:
                logger.exception("on_pass raised; the sweeper goes on")
        return summary

    # The service

    def run_until(self, stop: threading.Event) -> None:
        """Run a pass every `interval` until `stop` is set (for a thread of its own).

        A pass under way when `stop` is set ends after the thread it is on.
        """
        self._stopping = stop
        while not stop.is_set():
            try:
                self.run_pass()
            except Exception:
                logger.exception("a sweep pass failed; the next runs in %s", self.interval)
            stop.wait(self.interval.total_seconds())

    async def start(self) -> None:
        """Start passes every `interval` in a task of the running event loop.

        Raises:
            RuntimeError: If it is already running.
        """
        if self._task is not None and not self._task.done():
            raise RuntimeError("this RetentionSweeper is already running")
        self._task = asyncio.get_running_loop().create_task(self._serve())

    async def stop(self) -> None:
        """Cancel the running pass, if any, and wait for it to end."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _serve(self) -> None:
        while True:
            try:
                await self.arun_pass()
            except Exception:
                logger.exception("a sweep pass failed; the next runs in %s", self.interval)
            await asyncio.sleep(self.interval.total_seconds())

    async def __aenter__(self) -> RetentionSweeper:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def _busy(head: ThreadHead) -> ThreadResult:
    return ThreadResult(head.thread_id, SweepOutcome.BUSY)


def _engine_policy(saver: RetainingSaver, policy: IdleThreadPolicy) -> RetentionPolicy | None:
    """The engine pass the strategy runs on an expired thread; None for "delete"."""
    from retaining_saver._maintenance import keep_latest_policy

    if policy.strategy == "delete":
        return None
    if isinstance(policy.strategy, RetentionPolicy):
        return saver._policy(policy.strategy)
    return saver._policy(keep_latest_policy(policy.delta_graph))
