"""Checks a contract scenario makes after a deletion: lineage walks, orphan rows, records."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

from retaining_saver._effects import arun, run
from retaining_saver.backends import backend_for
from retaining_saver.backends._base import Backend, Integrity
from retaining_saver.backends.memory import _RECLAIMED


class LineageIntegrityError(AssertionError):
    """A `parent_config` walk reached a checkpoint id that does not exist."""


def _unwrapped(saver: BaseCheckpointSaver[Any]) -> BaseCheckpointSaver[Any]:
    return getattr(saver, "inner", saver)


def integrity(saver: BaseCheckpointSaver[Any], thread_id: str) -> Integrity:
    """Dangling parents, orphan writes and orphan blobs of one thread."""
    backend = _backend(saver)
    return run(backend, backend.integrity(thread_id))


async def aintegrity(saver: BaseCheckpointSaver[Any], thread_id: str) -> Integrity:
    """Async `integrity`."""
    backend = _backend(saver)
    return await arun(backend, backend.integrity(thread_id))


def _backend(saver: BaseCheckpointSaver[Any]) -> Backend:
    """The backend of `saver`'s storage (of its inner saver, if it wraps one)."""
    backend = backend_for(_unwrapped(saver))
    if backend is None:
        raise TypeError(f"no backend for {type(saver).__name__}")
    return backend


def walk(saver: BaseCheckpointSaver[Any], config: RunnableConfig) -> Iterator[CheckpointTuple]:
    """Follow `parent_config` from `config` to the root, loudly.

    Raises:
        LineageIntegrityError: If a link names a checkpoint that is gone; this
            is what branch/regenerate hits after an ancestor was deleted.
    """
    yield (current := _found(saver.get_tuple(config), config))
    while (link := current.parent_config) is not None:
        yield (current := _found(saver.get_tuple(link), config, current))


async def awalk(saver: BaseCheckpointSaver[Any], config: RunnableConfig) -> list[CheckpointTuple]:
    """Async `walk`, collected."""
    found = [current := _found(await saver.aget_tuple(config), config)]
    while (link := current.parent_config) is not None:
        found.append(current := _found(await saver.aget_tuple(link), config, current))
    return found


def _found(
    read: CheckpointTuple | None, start: RunnableConfig, child: CheckpointTuple | None = None
) -> CheckpointTuple:
    """`read`, the checkpoint a walk from `start` read (the parent of `child`, past the
    first), which must exist."""
    if read is not None:
        return read
    if child is None:
        raise LineageIntegrityError(f"start checkpoint {start} does not exist")
    missing = cast(RunnableConfig, child.parent_config)["configurable"].get("checkpoint_id")
    raise LineageIntegrityError(f"ancestor {missing} of {child.config} is missing")


def memory_reclaim_records(saver: InMemorySaver, thread_id: str) -> frozenset[tuple[str, str, str]]:
    """The reclaim records an `InMemorySaver` holds for one thread, as rows
    `(checkpoint_ns, reclaimed id, clone id)`.

    The SQL savers keep these rows in the `retaining_saver_reclaimed` table, which
    a test reads directly; the in-memory backend keeps them beside the saver, where
    this reads them as they are (expired records included), through no backend call.
    """
    records = list(_RECLAIMED.get(saver, {}).items())
    return frozenset((ns, cid, clone) for (t, ns, cid), (clone, _) in records if t == thread_id)
