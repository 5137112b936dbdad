"""`RetentionSweeper`: an `IdleThreadPolicy` applied to a whole store, pass after pass.

A pass walks the store's threads by key from where the last one stopped,
judges each by its ids (`AgeBounds`, no row read), and hands the idle ones,
at most `sweep_limit` of them, to `sweep_thread`, or, for the "delete"
strategy on a store that deletes batches (Postgres), up to a batch of them
at once to `sweep_batch`. When the walk reaches the last thread, the next
pass starts again from the first. Only a page of thread keys and one
thread's lineage are ever in memory. The sweeper rests in proportion to the
time it works (`pace`): after a page with no idle thread, or, for pages with
idle threads, before the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from retaining_saver._effects import Flow, IfFree, IfFreeEach, Rest, Run, adrive, drive
from retaining_saver._rules import RetentionPolicy
from retaining_saver._rules import _validate as validate
from retaining_saver._rules._idle import AgeBounds, HeadFacts, IdleVerdict, ThreadHead
from retaining_saver._rules._idle_policy import IdleThreadPolicy
from retaining_saver._sweep_pass import PassTally, SweepCounters, SweepPass
from retaining_saver._sweep_thread import SweepOutcome, ThreadResult, sweep_batch, sweep_thread
from retaining_saver.backends._base import Mode
from retaining_saver.backends._sweep import BatchDeletes, SweepStore
from retaining_saver.backends._sweep_stores import store_for

if TYPE_CHECKING:
    from retaining_saver._saver import RetainingSaver

logger = logging.getLogger("retaining_saver")

Clock = Callable[[], datetime]
_Chunk = list[tuple[ThreadHead, IdleVerdict]]


def _utc_now() -> datetime:
    return datetime.now(UTC)


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
        pace: How much the sweeper rests for the time it works: after a page of
            thread keys in which it found no idle thread, `pace` times as long as
            the page took (0: it only lets other tasks run); for a page with idle
            threads, as long, but before the next pass, so that one pass handles
            its (at most `sweep_limit`) idle threads without a pause. Passes run
            back to back thus take at most `1 / (1 + pace)` of the event loop's
            and the database's time.
        dry_run: Judge and report, change nothing.
        clock: What "now" is (a timezone-aware `datetime`); settable, for tests.
        on_pass: Called with each pass's `SweepPass`; its errors are logged.

    Raises:
        UnsupportedSaverError: If the saver's store is not supported.
        TypeError: If an argument has the wrong type.
        ValueError: If `interval` is not positive, or `sweep_limit` or
            `page_size` is below 1, or `pace` is negative.
    """

    def __init__(
        self,
        saver: RetainingSaver,
        policy: IdleThreadPolicy,
        *,
        interval: timedelta = timedelta(minutes=5),
        sweep_limit: int = 1000,
        page_size: int = 500,
        pace: float = 9.0,
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
        validate.require(
            isinstance(pace, int | float) and not isinstance(pace, bool),
            TypeError,
            f"pace must be a number, got {pace!r}",
        )
        validate.require(0 <= pace < float("inf"), ValueError, f"pace must be >= 0, got {pace!r}")
        self.pace = float(pace)
        self.dry_run: bool = validate.flag("dry_run", dry_run)
        self.clock: Clock = validate.optional_callable("clock", clock) or _utc_now
        self.on_pass = validate.optional_callable("on_pass", on_pass)
        self.saver, self.policy = saver, policy
        self.store: SweepStore = store_for(saver._require_backend())
        self.engine_policy = _engine_policy(saver, policy)
        self._batch = self.store.batch_size
        # Where the "delete" strategy deletes batches: the store's own, unless dry.
        deletes = self.engine_policy is None and not self.dry_run
        self._batches = self.store.batches if deletes else None
        self.counters = SweepCounters()
        self.last_pass: SweepPass | None = None
        self.resume_after: str | None = None
        """The thread key the next pass starts after (None: the first thread)."""
        self._prepared = False
        self._stopping = threading.Event()
        self._timer: Callable[[], float] = time.perf_counter
        self._owed, self._owed_since = 0.0, 0.0
        """Seconds of rest the last pass's pages with work earned, and when it ended."""
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
        owed = self._owed - (self._timer() - self._owed_since)
        if owed > 0:  # passes back to back: the rest the last one's work earned
            yield Rest(owed)
        self._owed = 0.0
        run = self._begin()
        try:
            while self._wants_more(run):
                began, handled = self._timer(), len(run.results)
                page = yield Run(self.store.scan(run.after, self.page_size), Mode.READ)
                for chunk in self._chunks(run, page):
                    yield from self._handle(run, chunk)
                rest = (self._timer() - began) * self.pace
                if len(run.results) > handled:  # a page with work: its rest comes after the pass
                    self._owed, rest = self._owed + rest, 0.0
                yield Rest(rest)
        except BaseException:
            self._finish(run, cancelled=True)
            raise
        return self._finish(run, cancelled=stoppable and self._stopping.is_set())

    def _begin(self) -> PassTally:
        now = validate.moment("clock()", self.clock())
        validate.require(now.tzinfo is not None, ValueError, f"clock() must be aware, got {now!r}")
        return PassTally(now, self.dry_run, self.resume_after, self.resume_after)

    def _wants_more(self, run: PassTally) -> bool:
        return not (
            run.reached_end or len(run.results) >= self.sweep_limit or self._stopping.is_set()
        )

    def _chunks(self, run: PassTally, page: list[ThreadHead]) -> Iterator[_Chunk]:
        """The threads of `page` in order, each with its verdict by its ids, in chunks of
        at most one batch of idle ones, while the pass may handle more."""
        chunk: _Chunk = []
        idle = 0
        bounds = AgeBounds.at(self.policy, run.started_at)
        for head in page:
            if len(run.results) + idle >= self.sweep_limit or self._stopping.is_set():
                break
            run.scanned += 1
            verdict = bounds.verdict(head)
            chunk.append((head, verdict))
            if verdict is IdleVerdict.EXPIRED and (idle := idle + 1) == self._batch:
                yield chunk
                chunk, idle = [], 0
        else:
            run.reached_end = len(page) < self.page_size
        if chunk:
            yield chunk

    def _handle(self, run: PassTally, chunk: _Chunk) -> Flow[None]:
        """The idle threads of `chunk` handled (a batch of them together where the store
        deletes batches), and every thread of it noted, in order."""
        idle = [head for head, verdict in chunk if verdict is IdleVerdict.EXPIRED]
        done: dict[str, ThreadResult] = {}
        if (batches := self._batches) is None:
            known = (yield from self._prefetched(idle)) if self._batch > 1 else None
            for head in idle:
                if self._stopping.is_set():  # `run_until` stopped: end after this thread
                    break
                handled = self._handled(head, run.started_at, known)
                done[head.thread_id] = yield IfFree(head.thread_id, handled, _busy(head))
        elif idle:
            ids = [head.thread_id for head in idle]
            batch = yield IfFreeEach(
                ids, lambda free: self._batched(batches, idle, free, run.started_at)
            )
            done = {result.thread_id: result for result in batch}
        for head, verdict in chunk:
            if verdict is IdleVerdict.EXPIRED:
                if head.thread_id not in done:  # stopped before it: the next pass resumes here
                    run.reached_end = False
                    return
                run.account(done[head.thread_id])
            else:
                run.outcomes[verdict.value] += 1
                run.after = head.thread_id

    def _batched(
        self, batches: BatchDeletes, heads: list[ThreadHead], free: list[str], now: datetime
    ) -> Flow[list[ThreadResult]]:
        """`sweep_batch` on those of `heads` whose lock in this process was `free`; the
        others busy. If it fails, each of them is counted failed, and the pass goes on."""
        taken = set(free)
        scans = [head for head in heads if head.thread_id in taken]
        try:
            swept = yield from sweep_batch(self.store, batches, scans, self.policy, now)
        except Exception:
            logger.exception("sweeping %d threads failed; the pass goes on", len(scans))
            swept = [ThreadResult(head.thread_id, SweepOutcome.FAILED) for head in scans]
        found = {result.thread_id: result for result in swept}
        return [found.get(head.thread_id) or _busy(head) for head in heads]

    def _prefetched(self, heads: list[ThreadHead]) -> Flow[dict[str, HeadFacts] | None]:
        """The head facts of `heads` in one read where the store has one (each thread's
        transaction re-checks them), else (or if it fails) None: each reads its own."""
        read = self.store.batch_head_facts([head.thread_id for head in heads]) if heads else None
        if read is None:
            return None
        try:
            facts: dict[str, HeadFacts] = yield Run(read, Mode.READ)
        except Exception as error:
            logger.warning(
                "reading %d heads at once failed (%r); each reads its own", len(heads), error
            )
            return None
        return facts

    def _handled(
        self, head: ThreadHead, now: datetime, known: dict[str, HeadFacts] | None = None
    ) -> Flow[ThreadResult]:
        """The thread swept, under its lock (judged on `known` facts if given); a failure is
        logged, and the pass goes on."""
        flow = sweep_thread(
            self.store,
            head,
            self.policy,
            self.engine_policy,
            now,
            dry_run=self.dry_run,
            known=known,
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

    def _finish(self, run: PassTally, *, cancelled: bool) -> SweepPass:
        self._owed_since = self._timer()
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

        A pass under way when `stop` is set ends after the thread (or the batch of
        threads deleted together) it is on.
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
