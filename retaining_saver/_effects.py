"""Cleanup written once, as generators of effects, and the two drivers that run them.

Admission cleanup and the retention engine yield small effect values
(`Lookup`, `Invalidate`, `Transact`, `Read`, ...) and receive their results. `drive` carries
effects out with the saver's sync methods, `adrive` with its async ones, so
the logic has one copy whichever way the caller came in. An effect that fails
is thrown back into the generator at the point where it was yielded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver.backends._base import Backend, Op

if TYPE_CHECKING:
    from retaining_saver._caches import HistoryCache

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


@dataclass(frozen=True, slots=True)
class Transact:
    """Carry out a backend operation in one transaction; answers its result.

    `each`: every statement of the operation is right as a transaction of its
    own (a read, or a write that re-checks what it proved), so the backend
    may run them without an enclosing one.
    """

    op: Op[Any]
    each: bool = False


@dataclass(frozen=True, slots=True)
class Read:
    """Carry out a backend operation that only reads, as the saver runs its own reads;
    answers its result."""

    op: Op[Any]


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


Effect = Lookup | Invalidate | Transact | Read | History | Offload
Flow = Generator[Effect, Any, T]


@dataclass(frozen=True)
class Performer:
    """What effects act on: the inner saver, its backend and the caches."""

    inner: BaseCheckpointSaver[Any]
    backend: Backend | None
    caches: Sequence[HistoryCache]

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
        if isinstance(effect, Invalidate):
            for cache in self.caches:
                if effect.checkpoint_ids is None:
                    cache.purge(effect.thread_id)
                else:
                    cache.invalidate(
                        str(effect.thread_id), effect.checkpoint_ns, effect.checkpoint_ids
                    )
            return None
        if isinstance(effect, Read):
            return self._backend().read(effect.op)
        if effect.each:
            return self._backend().run_each(effect.op)
        return self._backend().run(effect.op)

    async def aperform(self, effect: Effect) -> Any:
        if isinstance(effect, Lookup):
            return await self.inner.aget_tuple(effect.config)
        if isinstance(effect, History):
            return await self.inner.aget_delta_channel_history(
                config=effect.config, channels=effect.channels
            )
        if isinstance(effect, Offload):
            return await asyncio.to_thread(effect.call)
        if isinstance(effect, Invalidate):
            for cache in self.caches:
                if effect.checkpoint_ids is None:
                    await cache.apurge(effect.thread_id)
                else:
                    await cache.ainvalidate(
                        str(effect.thread_id), effect.checkpoint_ns, effect.checkpoint_ids
                    )
            return None
        if isinstance(effect, Read):
            return await self._backend().aread(effect.op)
        if effect.each:
            return await self._backend().arun_each(effect.op)
        return await self._backend().arun(effect.op)


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
