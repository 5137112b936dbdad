"""Cleanup written once, as generators of effects, and the two drivers that run them.

Admission cleanup and the retention engine yield small effect values
(`Lookup`, `Invalidate`, `Run`, ...) and receive their results. `drive` carries
effects out with the saver's sync methods, `adrive` with its async ones, so
the logic has one copy whichever way the caller came in. Each effect knows
both ways to carry itself out (`perform`, `aperform`). An effect that fails is
thrown back into the generator at the point where it was yielded.

A `Run` names an operation of the backend (`Op`, a generator of its statements)
and the transaction `Mode` it runs in; `_transact.run`/`arun` (re-exported here)
are the one place an operation's statements reach a store, and the flow goes on
only once its transaction has ended (see `_transact`).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver._calls import Call as Call
from retaining_saver._history_cache import HistoryCache
from retaining_saver._locks import ThreadLocks
from retaining_saver._transact import arun as arun
from retaining_saver._transact import run as run
from retaining_saver.backends._base import Backend, Op
from retaining_saver.backends._base import Mode as Mode  # the mode a `Run` names

T = TypeVar("T")


@dataclass(slots=True)
class Lookup:
    """`inner.get_tuple(config)`; answers a `CheckpointTuple` or None."""

    config: RunnableConfig

    def perform(self, performer: Performer) -> Any:
        return performer.inner.get_tuple(self.config)

    async def aperform(self, performer: Performer) -> Any:
        return await performer.inner.aget_tuple(self.config)


@dataclass(slots=True)
class Invalidate:
    """Make every history cache forget `checkpoint_ids` (all of the thread if None)."""

    thread_id: str | None
    checkpoint_ns: str
    checkpoint_ids: Sequence[str] | None

    def perform(self, performer: Performer) -> None:
        for cache in performer.caches:
            self._forget(cache, cache.purge, cache.invalidate)

    async def aperform(self, performer: Performer) -> None:
        for cache in performer.caches:
            await self._forget(cache, cache.apurge, cache.ainvalidate)

    def _forget(
        self, cache: HistoryCache, purge: Callable[..., T], invalidate: Callable[..., T]
    ) -> T:
        """The purge or the invalidation this effect asks of `cache`, as `purge` or
        `invalidate` (its sync or async method) answers it."""
        if self.checkpoint_ids is None:
            return purge(self.thread_id)
        return invalidate(str(self.thread_id), self.checkpoint_ns, self.checkpoint_ids)


@dataclass(slots=True)
class Run:
    """Carry out a backend operation, whole, in one transaction of `mode`; answers its
    result.

    The drivers hand it to `run`/`arun`, which feed its statements to the executor
    of the backend's transaction: nothing stands between.
    """

    op: Op[Any]
    mode: Mode


@dataclass(slots=True)
class History:
    """`inner.get_delta_channel_history(config=..., channels=...)`."""

    config: RunnableConfig
    channels: Sequence[str]

    def perform(self, performer: Performer) -> Any:
        inner = performer.inner
        return inner.get_delta_channel_history(config=self.config, channels=self.channels)

    async def aperform(self, performer: Performer) -> Any:
        inner = performer.inner
        return await inner.aget_delta_channel_history(config=self.config, channels=self.channels)


@dataclass(slots=True)
class Offload:
    """`call()`, CPU-bound work such as deserializing pending writes; the async
    driver runs it in a worker thread, as the async savers do."""

    call: Callable[[], Any]

    def perform(self, performer: Performer) -> Any:
        return self.call()

    async def aperform(self, performer: Performer) -> Any:
        return await asyncio.to_thread(self.call)


@dataclass(slots=True)
class FellBack:
    """A fast path built on upstream internals failed with `error`, and the saver's own
    call answers instead: count it (and log the first)."""

    what: str
    error: Exception

    def perform(self, performer: Performer) -> None:
        performer.fell_back(self.what, self.error)

    async def aperform(self, performer: Performer) -> None:
        performer.fell_back(self.what, self.error)


@dataclass(slots=True)
class Locked:
    """Run `flow` under the thread's lock, held by every deletion and every write (alone, or
    shared: `shared_if`) and never across user code; answers what `flow` returns (or
    raises what it raises).

    Asynchronously, work the flow left for later (`Later`) runs after the answer, in
    a task the lock is handed over to: it is released when that work is done.
    """

    thread_id: str
    flow: Flow[Any]
    # The lock taken shared first (`ThreadLocks.share`): where this then holds (a write
    # that deletes nothing), `flow` runs so, beside such writes; else it is taken alone.
    shared_if: Callable[[], bool] | None = None

    def perform(self, performer: Performer) -> Any:
        with performer.locks.hold_or_share(self.thread_id, self.shared_if):
            return drive(self.flow, performer)

    async def aperform(self, performer: Performer) -> Any:
        if self.shared_if is not None:
            async with performer.locks.ashare(self.thread_id):
                if self.shared_if():
                    return await adrive(self.flow, performer)
        return await _hold_then_hand_over(self.thread_id, self.flow, performer)


async def _hold_then_hand_over(thread_id: str, flow: Flow[Any], performer: Performer) -> Any:
    """`Locked`, asynchronously: `flow` under the lock, then the work it left (`Later`) in a
    task the lock is handed over to, if it left any; else the lock is released."""
    hold = performer.locks.ahold(thread_id)
    await hold.__aenter__()
    left: list[Flow[Any]] = []
    token = _LEFT.set(left)
    try:
        answer = await adrive(flow, performer)
    except BaseException:
        await hold.__aexit__()
        raise
    finally:
        _LEFT.reset(token)
    if not left:
        await hold.__aexit__()
    else:
        performer.locks.hand_over(hold, lambda: _run_all(left, performer))
    return answer


async def _run_all(flows: Sequence[Flow[Any]], performer: Performer) -> None:
    for flow in flows:
        await adrive(flow, performer)


_LEFT: contextvars.ContextVar[list[Flow[Any]]] = contextvars.ContextVar("retaining_saver_left")
"""The work `Later` effects left to run after the innermost async `Locked` flow returns."""


@dataclass(slots=True)
class Later:
    """One piece of work, as two flows: `now`, or `later` after the caller has its answer.

    The sync driver runs `now` and answers what it returns. The async driver,
    inside a `Locked` flow, answers None at once and runs `later` when that flow
    has returned, in a task of its own that still holds the thread's lock (the
    caller gets its answer first; the thread's next writer or admission waits
    for the work as for any holder of the lock); outside one, it runs `now`.
    """

    now: Flow[Any]
    later: Flow[Any]

    def perform(self, performer: Performer) -> Any:
        return drive(self.now, performer)

    async def aperform(self, performer: Performer) -> Any:
        return await _now_or_left(self, performer)


async def _now_or_left(later: Later, performer: Performer) -> Any:
    """`Later`, asynchronously: None, its `later` flow left to the innermost `Locked` flow;
    outside one, what its `now` flow returns. (A flow never started needs no closing.)"""
    left = _LEFT.get(None)
    if left is None:
        return await adrive(later.now, performer)
    left.append(later.later)
    return None


@dataclass(slots=True)
class IfFree:
    """Run `flow` under the thread's lock if no one holds it, else answer `busy`.

    The async driver first lets the app's other tasks run (and a cancel land),
    even on a store whose calls never suspend (memory).
    """

    thread_id: str
    flow: Flow[Any]
    busy: Any

    def perform(self, performer: Performer) -> Any:
        with performer.locks.try_hold(self.thread_id) as free:
            return drive(self.flow, performer) if free else self.busy

    async def aperform(self, performer: Performer) -> Any:
        await asyncio.sleep(0)
        async with performer.locks.atry_hold(self.thread_id) as free:
            return await adrive(self.flow, performer) if free else self.busy


@dataclass(slots=True)
class IfFreeEach:
    """Run `flow(free)` holding the lock of each of `thread_ids` no one holds, `free`
    being those, in order; answers what it returns. As `IfFree`, the async driver first
    lets the app's other tasks run."""

    thread_ids: Sequence[str]
    flow: Callable[[list[str]], Flow[Any]]

    def perform(self, performer: Performer) -> Any:
        with ExitStack() as held:
            free = [t for t in self.thread_ids if held.enter_context(performer.locks.try_hold(t))]
            return drive(self.flow(free), performer)

    async def aperform(self, performer: Performer) -> Any:
        await asyncio.sleep(0)
        async with AsyncExitStack() as held:
            return await adrive(self.flow(await self._taken(held, performer)), performer)

    async def _taken(self, held: AsyncExitStack, performer: Performer) -> list[str]:
        """Those of `thread_ids` whose lock for the running loop `held` took (the free ones)."""
        locks = performer.locks
        return [t for t in self.thread_ids if await held.enter_async_context(locks.atry_hold(t))]


@dataclass(slots=True)
class Rest:
    """Let the app's other work run for `seconds`: the async driver sleeps on the loop (0:
    lets its ready tasks run once), the sync one sleeps the calling thread."""

    seconds: float

    def perform(self, performer: Performer) -> None:
        if self.seconds > 0:
            time.sleep(self.seconds)

    async def aperform(self, performer: Performer) -> None:
        await asyncio.sleep(self.seconds)


@dataclass(slots=True)
class ReadHead:
    """The admission read of the head: `inner.get_tuple(config)`.

    The async driver first runs `fast`, the backend's own read of it where it
    declares one (`Capabilities.reads_head`); if that fails, the failure is
    counted as `what` and the saver's own read answers (a real database error
    raises there too).
    """

    config: RunnableConfig
    fast: Flow[Any] | None
    what: str

    def perform(self, performer: Performer) -> Any:
        return performer.inner.get_tuple(self.config)

    async def aperform(self, performer: Performer) -> Any:
        if self.fast is not None:
            try:
                return await adrive(self.fast, performer)
            except Exception as error:
                performer.fell_back(self.what, error)
        return await performer.inner.aget_tuple(self.config)


Effect = (
    Lookup
    | Invalidate
    | Run
    | History
    | Offload
    | FellBack
    | Locked
    | Later
    | IfFree
    | IfFreeEach
    | Rest
    | ReadHead
    | Call
)
Flow = Generator[Effect, Any, T]


def answer(effect: Effect) -> Flow[Any]:
    """A flow of the one `effect`, returning what it answers: a flow for `Locked` to hold
    the lock across."""
    return (yield effect)


@dataclass(frozen=True)
class Performer:
    """What effects act on: the inner saver, its backend, the caches, what counts a
    fallback, and the per-thread locks."""

    inner: BaseCheckpointSaver[Any]
    backend: Backend | None
    caches: Sequence[HistoryCache]
    fell_back: Callable[[str, Exception], None] = lambda what, error: None
    locks: ThreadLocks = field(default_factory=ThreadLocks)

    def storage(self) -> Backend:
        """The backend a `Run` goes to."""
        if self.backend is None:
            raise RuntimeError("no storage backend: this saver's cleanup is disabled")
        return self.backend


def drive(flow: Flow[T], performer: Performer) -> T:
    """Run `flow` to its end with sync effects."""
    try:
        effect = next(flow)
        while True:
            try:
                if isinstance(effect, Run):
                    answer = run(performer.storage(), effect.op, effect.mode)
                else:
                    answer = effect.perform(performer)
            except BaseException as error:  # a cancel too: the flow may end what it began
                effect = flow.throw(error)
            else:
                effect = flow.send(answer)
    except StopIteration as done:
        return cast(T, done.value)


async def adrive(flow: Flow[T], performer: Performer) -> T:
    """Run `flow` to its end with async effects."""
    try:
        effect = next(flow)
        while True:
            try:
                if isinstance(effect, Run):
                    answer = await arun(performer.storage(), effect.op, effect.mode)
                else:
                    answer = await effect.aperform(performer)
            except BaseException as error:  # a cancel too: the flow may end what it began
                effect = flow.throw(error)
            else:
                effect = flow.send(answer)
    except StopIteration as done:
        return cast(T, done.value)
