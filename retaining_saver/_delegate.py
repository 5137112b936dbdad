"""A saver that forwards every call to the saver it wraps.

`DelegatingSaver` is the transparent half of `RetainingSaver`: each public
method of `BaseCheckpointSaver` goes to `inner` and returns what `inner`
returns. Tools such as `langgraph-checkpoint-conformance` decide what a saver
can do by asking which methods its *type* overrides, so a wrapper that
overrides everything would claim capabilities its inner saver lacks. Each
instance is therefore created as a cached subclass in which every method the
inner saver lacks is the `BaseCheckpointSaver` default again: detection sees
what the bare saver can do, and calling it fails exactly as it fails on the
bare saver.

What the inner saver lacks is asked of the *instance*, not of its type. A
saver may forward attribute access to another saver (LangGraph's own test
suite wraps an `InMemorySaver` in a class that defines only `get_tuple` and
forwards the rest through `__getattribute__`): its type inherits the base
defaults, yet every call works, so the wrapper forwards them. For such a
saver, detection on the wrapper reports what the saver answers, where
detection on its bare type reports only what the type defines. Mirrors are
cached by the set of lacking names; for an ordinary saver that set is the one
its type gives, so nothing changes for it.
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

# Sync and async twins a saver may lack: the base defaults only raise
# NotImplementedError, and capability detection reads their presence off the type.
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


def answers_by_default(saver: BaseCheckpointSaver[Any], name: str) -> bool:
    """Whether `saver.<name>`, as the instance resolves it, is the `BaseCheckpointSaver` default.

    A default bound to another object counts too: a saver that forwards `prune`
    to an `InMemorySaver` lacks it just as that `InMemorySaver` does.

    Args:
        saver: The saver to ask.
        name: A method name of `BaseCheckpointSaver`.

    Returns:
        True if calling `saver.<name>` runs the base class's own function.
    """
    resolved = getattr(saver, name, None)
    return getattr(resolved, "__func__", resolved) is getattr(BaseCheckpointSaver, name)


def answers_by_own_default(saver: BaseCheckpointSaver[Any], name: str) -> bool:
    """Whether `saver.<name>` is the base default bound to `saver` itself.

    Only then does a default such as `get` read through `saver`'s own `get_tuple`;
    a forwarding saver's `get` may read through another saver's.

    Args:
        saver: The saver to ask.
        name: A method name of `BaseCheckpointSaver`.

    Returns:
        True if calling `saver.<name>` runs the base class's function on `saver`.
    """
    resolved = getattr(saver, name, None)
    return answers_by_default(saver, name) and getattr(resolved, "__self__", None) is saver


def lacking_methods(saver: BaseCheckpointSaver[Any]) -> frozenset[str]:
    """The names of `MIRRORED_METHODS` that `saver` answers with the base default."""
    return frozenset(
        name for pair in MIRRORED_METHODS for name in pair if answers_by_default(saver, name)
    )


_MIRRORS: dict[tuple[type, frozenset[str]], type[Any]] = {}
_MIRRORS_LOCK = threading.Lock()


def _mirror_class(
    wrapper: type[DelegatingSaver], inner: BaseCheckpointSaver[Any]
) -> type[DelegatingSaver]:
    """The cached subclass of `wrapper` that lacks what `inner` lacks, but for what
    `wrapper` provides itself over `inner`."""
    key = (wrapper, lacking_methods(inner) - wrapper.provided_for(inner))
    with _MIRRORS_LOCK:
        mirror = _MIRRORS.get(key)
        if mirror is None:
            mirror = _MIRRORS[key] = _new_mirror(*key)
    return mirror


def _new_mirror(wrapper: type[DelegatingSaver], lacking: frozenset[str]) -> type[DelegatingSaver]:
    namespace: dict[str, Any] = {name: getattr(BaseCheckpointSaver, name) for name in lacking}
    namespace.update(_mirror_base=wrapper, __module__=wrapper.__module__)
    name = f"{wrapper.__name__}[lacking {', '.join(sorted(lacking)) or 'nothing'}]"
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

    # On a mirror class: the class it mirrors (None on the class a user names).
    _mirror_base: ClassVar[type[DelegatingSaver] | None] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        if cls._mirror_base is not None:
            return super().__new__(cls)
        inner = args[0] if args else kwargs.get("inner")
        if not isinstance(inner, BaseCheckpointSaver):
            raise TypeError(
                f"{cls.__name__} wraps a BaseCheckpointSaver; got {type(inner).__name__!r}"
            )
        return cast(Self, super().__new__(_mirror_class(cls, inner)))

    def __init__(self, inner: BaseCheckpointSaver[Any], /) -> None:
        self.inner = inner

    @classmethod
    def provided_for(cls, inner: BaseCheckpointSaver[Any]) -> frozenset[str]:
        """The `MIRRORED_METHODS` this wrapper implements itself over `inner`, whether
        `inner` has them or not (none: it forwards every one)."""
        return frozenset()

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
        if (enter := getattr(self.inner, "__enter__", None)) is not None:
            enter()
        return self

    def __exit__(self, *exc_info: object) -> bool | None:
        leave = getattr(self.inner, "__exit__", None)
        return None if leave is None else bool(leave(*exc_info))

    async def __aenter__(self) -> Self:
        if (enter := getattr(self.inner, "__aenter__", None)) is not None:
            await enter()
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        leave = getattr(self.inner, "__aexit__", None)
        return None if leave is None else bool(await leave(*exc_info))

    # Sync methods

    def get(self, config: RunnableConfig) -> Checkpoint | None:
        # Through this wrapper's get_tuple only where the bare saver reads through its own.
        if not answers_by_own_default(self.inner, "get"):
            return self.inner.get(config)
        return value.checkpoint if (value := self.get_tuple(config)) else None

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
        return self.inner.put(config, checkpoint, metadata, new_versions)

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
        # The clone may be another kind of saver (a forwarding saver hands back its target's).
        wrapper = type(self)._mirror_base or type(self)
        clone = cast(Self, object.__new__(_mirror_class(wrapper, inner)))
        clone.__dict__.update(self.__dict__)
        clone.inner = inner
        return clone

    # Async methods

    async def aget(self, config: RunnableConfig) -> Checkpoint | None:
        # As in `get`.
        if not answers_by_own_default(self.inner, "aget"):
            return await self.inner.aget(config)
        return value.checkpoint if (value := await self.aget_tuple(config)) else None

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
        return await self.inner.aput(config, checkpoint, metadata, new_versions)

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
