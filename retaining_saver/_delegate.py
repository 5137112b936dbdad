"""A saver that forwards every call to the saver it wraps.

`DelegatingSaver` is the transparent half of `RetainingSaver`: each public
method of `BaseCheckpointSaver` goes to `inner` and returns what `inner`
returns. Tools such as `langgraph-checkpoint-conformance` decide what a saver
can do by asking which methods its *type* overrides, so a wrapper that
overrides everything would claim capabilities its inner saver lacks. Each
instance is therefore created as a cached subclass for the inner type, in
which a method the inner type does not override is the `BaseCheckpointSaver`
default again: detection sees what it would see on the bare saver, and calling
it fails exactly as it fails on the bare saver.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Self, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

# Sync and async twins whose presence capability detection reads off the type.
MIRRORED_METHODS: tuple[tuple[str, str], ...] = (
    ("put", "aput"),
    ("put_writes", "aput_writes"),
    ("get_tuple", "aget_tuple"),
    ("list", "alist"),
    ("delete_thread", "adelete_thread"),
    ("delete_for_runs", "adelete_for_runs"),
    ("copy_thread", "acopy_thread"),
    ("prune", "aprune"),
)


def overrides(saver_type: type, name: str) -> bool:
    """Whether `saver_type` implements `name` rather than inheriting the base default."""
    return getattr(saver_type, name, None) is not getattr(BaseCheckpointSaver, name, None)


_MIRRORS: dict[tuple[type, type], type[Any]] = {}
_MIRRORS_LOCK = threading.Lock()


def _mirror_class(wrapper: type[DelegatingSaver], inner_type: type) -> type[DelegatingSaver]:
    with _MIRRORS_LOCK:
        mirror = _MIRRORS.get((wrapper, inner_type))
        if mirror is None:
            mirror = _MIRRORS[(wrapper, inner_type)] = _new_mirror(wrapper, inner_type)
    return mirror


def _new_mirror(wrapper: type[DelegatingSaver], inner_type: type) -> type[DelegatingSaver]:
    namespace: dict[str, Any] = {"_mirror_of": inner_type, "__module__": wrapper.__module__}
    for pair in MIRRORED_METHODS:
        for name in pair:
            if not overrides(inner_type, name):
                namespace[name] = getattr(BaseCheckpointSaver, name)
    name = f"{wrapper.__name__}[{inner_type.__name__}]"
    mirror = type(name, (wrapper,), namespace)
    mirror.__qualname__ = name
    return mirror


class DelegatingSaver(BaseCheckpointSaver[Any]):
    """Forward every `BaseCheckpointSaver` method to `inner`, unchanged.

    Args:
        inner: The saver that stores the checkpoints.

    Raises:
        TypeError: If `inner` is not a `BaseCheckpointSaver`.
    """

    _mirror_of: ClassVar[type | None] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        if cls._mirror_of is not None:
            return super().__new__(cls)
        inner = args[0] if args else kwargs.get("inner")
        if not isinstance(inner, BaseCheckpointSaver):
            raise TypeError(
                f"{cls.__name__} wraps a BaseCheckpointSaver; got {type(inner).__name__!r}"
            )
        return cast(Self, super().__new__(_mirror_class(cls, type(inner))))

    def __init__(self, inner: BaseCheckpointSaver[Any], /) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__.split('[')[0]}({self.inner!r})"

    # Attributes the base class defines

    @property
    def serde(self) -> SerializerProtocol:
        """The inner saver's serializer, never a copy of it."""
        return self.inner.serde

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        self.inner.serde = value

    @property
    def config_specs(self) -> list[Any]:
        return self.inner.config_specs

    def __getattr__(self, name: str) -> Any:
        # Backend extras such as `setup()` or `conn` stay reachable.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # Context-manager use

    def __enter__(self) -> Self:
        enter = getattr(self.inner, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(self, *exc_info: object) -> bool | None:
        leave = getattr(self.inner, "__exit__", None)
        return None if leave is None else bool(leave(*exc_info))

    async def __aenter__(self) -> Self:
        enter = getattr(self.inner, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        leave = getattr(self.inner, "__aexit__", None)
        return None if leave is None else bool(await leave(*exc_info))

    # Sync methods

    def get(self, config: RunnableConfig) -> Checkpoint | None:
        if value := self.get_tuple(config):
            return value.checkpoint
        return None

    def _stored(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> None:
        """Called after each `put`/`aput` that `inner` stored; a hook for subclasses."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        stored = self.inner.put(config, checkpoint, metadata, new_versions)
        self._stored(config, checkpoint, metadata)
        return stored

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        return self.inner.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        return self.inner.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        return self.inner.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        return self.inner.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        return self.inner.prune(thread_ids, strategy=strategy)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> Self:
        """Wrap the inner saver's `with_allowlist` clone, keeping this wrapper's state."""
        inner = self.inner.with_allowlist(extra_allowlist)
        if inner is self.inner:
            return self
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.inner = inner
        return clone

    # Async methods

    async def aget(self, config: RunnableConfig) -> Checkpoint | None:
        if value := await self.aget_tuple(config):
            return value.checkpoint
        return None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.inner.aget_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        stored = await self.inner.aput(config, checkpoint, metadata, new_versions)
        self._stored(config, checkpoint, metadata)
        return stored

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        return await self.inner.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        return await self.inner.adelete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        return await self.inner.adelete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        return await self.inner.acopy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        return await self.inner.aprune(thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self.inner.aget_delta_channel_history(config=config, channels=channels)
