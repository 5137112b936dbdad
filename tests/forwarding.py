"""Savers that answer calls their type does not define, as in LangGraph's own test suite.

Wrapped, each must answer every call as it does bare:

- `ForwardingSaver` defines `get_tuple` and forwards every other attribute to an
  `InMemorySaver` through `__getattribute__`. Its type inherits the base
  defaults of `put`, `list`, `aget_tuple` and the rest, yet each of them works.
- `PartlyForwardingSaver` defines the sync methods a run needs and forwards the
  rest, async ones included.
- `FallbackSaver` defines the sync methods a run needs and forwards only what
  normal lookup does not find (`__getattr__`), so its async methods are the
  base defaults and fail, as they fail bare.
- `CopyingMemorySaver` is an `InMemorySaver` subclass that overrides `put` and
  `aput`, like LangGraph's `memory` test fixture.

The `own_*` counters of the two forwarding savers count the calls they
answered themselves, so a test can tell which saver's method a call reached.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver

from retaining_saver import RetainingSaver

UNSUPPORTED = r".*not a supported saver"


class ForwardingSaver(BaseCheckpointSaver[str]):
    """Answers `get_tuple` itself; every other attribute is its `target`'s."""

    # Names looked up on the saver itself; `__class__` keeps isinstance() honest.
    OWN: ClassVar[frozenset[str]] = frozenset({"__class__", "target", "own_reads", "get_tuple"})

    def __init__(self) -> None:
        # No super().__init__(): even `serde` is the target's.
        self.target = InMemorySaver()
        self.own_reads = 0

    def __getattribute__(self, name: str) -> Any:
        if name in type(self).OWN:
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "target"), name)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self.own_reads += 1
        return self.target.get_tuple(config)


class PartlyForwardingSaver(ForwardingSaver):
    """Answers the sync methods a run needs itself; forwards the rest, async ones included."""

    OWN = ForwardingSaver.OWN | {"own_writes", "put", "put_writes", "list"}

    def __init__(self) -> None:
        super().__init__()
        self.own_writes = 0

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self.own_writes += 1
        return self.target.put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.own_writes += 1
        self.target.put_writes(config, writes, task_id, task_path)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        self.own_reads += 1
        return self.target.list(config, filter=filter, before=before, limit=limit)


class FallbackSaver(BaseCheckpointSaver[str]):
    """Answers the sync methods a run needs; `__getattr__` lends it its target's extras."""

    def __init__(self) -> None:
        super().__init__()
        self.target = InMemorySaver()

    def __getattr__(self, name: str) -> Any:
        # Reached only for names normal lookup misses: never a BaseCheckpointSaver method.
        if name == "target":
            raise AttributeError(name)
        return getattr(self.target, name)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.target.get_tuple(config)

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        return self.target.list(config, **kwargs)

    def put(self, config: RunnableConfig, *args: Any) -> RunnableConfig:
        return self.target.put(config, *args)

    def put_writes(self, config: RunnableConfig, *args: Any) -> None:
        self.target.put_writes(config, *args)


class CopyingMemorySaver(InMemorySaver):
    """An InMemorySaver that keeps a deep copy of every checkpoint it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[Checkpoint] = []

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self.copies.append(copy.deepcopy(checkpoint))
        return super().put(config, checkpoint, metadata, new_versions)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self.copies.append(copy.deepcopy(checkpoint))
        return await super().aput(config, checkpoint, metadata, new_versions)


# Every kind by name. Each stores in an InMemorySaver; FallbackSaver alone lacks async methods.
KINDS: dict[str, Callable[[], BaseCheckpointSaver[Any]]] = {
    "forwarding": ForwardingSaver,
    "partly-forwarding": PartlyForwardingSaver,
    "memory-subclass": CopyingMemorySaver,
    "fallback": FallbackSaver,
}
# The kinds on which every sync and async call a run makes works bare.
COMPLETE_KINDS = ("forwarding", "partly-forwarding", "memory-subclass")


def own_calls(saver: BaseCheckpointSaver[Any]) -> tuple[int, int]:
    """The calls `saver` answered itself: (reads, writes); (0, 0) for other kinds."""
    if not isinstance(saver, ForwardingSaver):
        return 0, 0
    return saver.own_reads, getattr(saver, "own_writes", 0)


def wrap_quietly(inner: BaseCheckpointSaver[Any]) -> RetainingSaver:
    """`RetainingSaver(inner)` without the unsupported-saver warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNSUPPORTED)
        return RetainingSaver(inner)
