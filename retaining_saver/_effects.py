"""Cleanup written once, as generators of effects, and the two drivers that run them.

Admission cleanup and the retention engine yield small effect values
(`Lookup`, `Invalidate`, `Run`, ...) and receive their results. `drive` carries
effects out with the saver's sync methods, `adrive` with its async ones, so
the logic has one copy whichever way the caller came in. An effect that fails
is thrown back into the generator at the point where it was yielded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver._history_cache import HistoryCache
from retaining_saver.backends._base import Backend, Op

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Lookup:
    """`inner.get_tuple(config)`; answers a `CheckpointTuple` or None."""

    config: RunnableConfig


@dataclass(frozen=True, slots=True)
class Invalidate:
    """Make every history cache forget `checkpoint_ids` (all of the thread if None)."""

    thread_id: str | None
    checkpoint_ns: str
    checkpoint_ids: Sequence[str] | None


class Mode(StrEnum):
    """How a backend runs an operation.

    READ: it only reads; it runs as the saver runs its own reads, never in a
    transaction that takes a write lock (SQLite's `BEGIN IMMEDIATE`).
    WRITE: it runs in one transaction.
    GUARDED: it writes, and every statement re-checks what it proved, so it
    needs no enclosing transaction (Postgres then runs each statement on its
    own; the other backends still run it in one transaction).
    """

    READ = "read"
    WRITE = "write"
    GUARDED = "guarded"


@dataclass(frozen=True, slots=True)
class Run:
    """Carry out a backend operation in `mode`; answers its result."""

    op: Op[Any]
    mode: Mode


@dataclass(frozen=True, slots=True)
class History:
    """`inner.get_delta_channel_history(config=..., channels=...)`."""

    config: RunnableConfig
    channels: Sequence[str]


@dataclass(frozen=True, slots=True)
class Offload:
    """`call()`, CPU-bound work such as deserializing pending writes; the async
    driver runs it in a worker thread, as the async savers do."""

    call: Callable[[], Any]


@dataclass(frozen=True, slots=True)
class FellBack:
    """A fast path built on upstream internals failed with `error`, and the saver's own
    call answers instead: count it (and log the first)."""

    what: str
    error: Exception


Effect = Lookup | Invalidate | Run | History | Offload | FellBack
Flow = Generator[Effect, Any, T]


@dataclass(frozen=True)
class Performer:
    """What effects act on: the inner saver, its backend, the caches, and what counts a
    fallback."""

    inner: BaseCheckpointSaver[Any]
    backend: Backend | None
    caches: Sequence[HistoryCache]
    fell_back: Callable[[str, Exception], None] = lambda what, error: None

    def _backend(self) -> Backend:
        if self.backend is None:
            raise RuntimeError("no storage backend: this saver's cleanup is disabled")
        return self.backend

    def perform(self, effect: Effect) -> Any:
        if isinstance(effect, Lookup):
            return self.inner.get_tuple(effect.config)
        if isinstance(effect, History):
            return self.inner.get_delta_channel_history(
                config=effect.config, channels=effect.channels
            )
        if isinstance(effect, Offload):
            return effect.call()
        if isinstance(effect, FellBack):
            return self.fell_back(effect.what, effect.error)
        if isinstance(effect, Invalidate):
            for cache in self.caches:
                if effect.checkpoint_ids is None:
                    cache.purge(effect.thread_id)
                else:
                    cache.invalidate(
                        str(effect.thread_id), effect.checkpoint_ns, effect.checkpoint_ids
                    )
            return None
        backend = self._backend()
        if effect.mode is Mode.READ:
            return backend.read(effect.op)
        if effect.mode is Mode.GUARDED:
            return backend.run_each(effect.op)
        return backend.run(effect.op)

    async def aperform(self, effect: Effect) -> Any:
        if type(effect) is Run:  # the common effect first: every admission read runs one
            return await self._arun(effect)
        if isinstance(effect, Lookup):
            return await self.inner.aget_tuple(effect.config)
        if isinstance(effect, History):
            return await self.inner.aget_delta_channel_history(
                config=effect.config, channels=effect.channels
            )
        if isinstance(effect, Offload):
            return await asyncio.to_thread(effect.call)
        if isinstance(effect, FellBack):
            return self.fell_back(effect.what, effect.error)
        if isinstance(effect, Invalidate):
            for cache in self.caches:
                if effect.checkpoint_ids is None:
                    await cache.apurge(effect.thread_id)
                else:
                    await cache.ainvalidate(
                        str(effect.thread_id), effect.checkpoint_ns, effect.checkpoint_ids
                    )
            return None
        return await self._arun(effect)

    async def _arun(self, effect: Run) -> Any:
        backend = self._backend()
        if effect.mode is Mode.READ:
            return await backend.aread(effect.op)
        if effect.mode is Mode.GUARDED:
            return await backend.arun_each(effect.op)
        return await backend.arun(effect.op)


def drive(flow: Flow[T], performer: Performer) -> T:
    """Run `flow` to its end with sync effects."""
    try:
        effect = next(flow)
        while True:
            try:
                answer = performer.perform(effect)
            except Exception as error:
                effect = flow.throw(error)
            else:
                effect = flow.send(answer)
    except StopIteration as done:
        result: T = done.value
        return result


async def adrive(flow: Flow[T], performer: Performer) -> T:
    """Run `flow` to its end with async effects."""
    try:
        effect = next(flow)
        while True:
            try:
                answer = await performer.aperform(effect)
            except Exception as error:
                effect = flow.throw(error)
            else:
                effect = flow.send(answer)
    except StopIteration as done:
        result: T = done.value
        return result
