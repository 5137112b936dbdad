"""Undoable changes to an `InMemorySaver`'s dicts, and its whole-thread and whole-run
operations (`delete_for_runs` finds a run's threads; `copy_thread` copies one).

Every change a statement makes is journalled, so that `MemoryBackend.transaction` can
undo the operation's earlier statements if a later one fails: an operation is one
transaction here too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, Generic

from langgraph.checkpoint.memory import InMemorySaver

from retaining_saver._rules import NodeKey, WriteKey, WriteRow
from retaining_saver.backends._base import Backend, Op, T

# The running operation's undo actions, per OS thread (see `MemoryBackend.transaction`).
_JOURNAL = threading.local()


def journal(undo: Callable[[], Any]) -> None:
    """Remember how to undo one change, should a later statement of the operation fail."""
    undos = getattr(_JOURNAL, "undo", None)
    if undos is not None:
        undos.append(undo)


def drop(records: dict[Any, Any], keys: list[Any]) -> None:
    """Delete `keys` from `records`, undoably."""
    for key in keys:
        if key in records:
            value = records.pop(key)
            journal(partial(records.__setitem__, key, value))


def put(records: dict[Any, Any], key: Any, value: Any) -> None:
    """Set `records[key]` to `value`, undoably."""
    if key in records:
        journal(partial(records.__setitem__, key, records[key]))
    else:
        journal(partial(records.pop, key, None))
    records[key] = value


class Journalled(Generic[T]):
    """A block, given `value`, whose journalled changes are undone if it raises: what
    `MemoryBackend.transaction` is. A class rather than a generator, as it wraps every
    operation of an admission."""

    __slots__ = ("outer", "undos", "value")

    def __init__(self, value: T) -> None:
        self.value = value

    def __enter__(self) -> T:
        self.outer = getattr(_JOURNAL, "undo", None)
        self.undos: list[Callable[[], Any]] = []
        _JOURNAL.undo = self.undos
        return self.value

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        try:
            if kind is not None:
                for undo in reversed(self.undos):
                    undo()
        finally:
            _JOURNAL.undo = self.outer


class MemoryThreads(Backend):
    """`Backend.run_threads`, `forget_reclaimed_clones`, `thread_exists` and `copy_rows`
    over an `InMemorySaver` (a run's threads and a copy include the resume ledger's)."""

    saver: InMemorySaver
    _records: Callable[[], dict[tuple[str, str, str], Any]]
    resumed_threads: Callable[[set[str]], set[str]]
    copy_resumptions: Callable[[str, str], None]

    def _metadata(self) -> Iterator[tuple[str, Any]]:
        loads = self.saver.serde.loads_typed
        for thread_id, namespaces in list(self.saver.storage.items()):
            for rows in list(namespaces.values()):
                for row in list(rows.values()):
                    yield thread_id, loads(row[1])

    def run_threads(self, run_ids: Sequence[str]) -> Op[list[str]]:
        wanted = {str(r) for r in run_ids}

        def statement() -> list[str]:
            if not wanted:
                return []
            found = {t for t, metadata in self._metadata() if _run(metadata) in wanted}
            return sorted(found | self.resumed_threads(wanted))

        found: list[str] = yield statement
        return found

    def forget_reclaimed_clones(self, thread_id: str, keys: Sequence[NodeKey]) -> Op[None]:
        gone = set(keys)

        def statement() -> None:
            records = self._records()
            drop(
                records,
                [
                    k
                    for k, (clone, _) in records.items()
                    if k[0] == thread_id and (k[1], clone) in gone
                ],
            )

        yield statement

    def write_rows(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> Op[list[WriteRow]]:
        def statement() -> list[WriteRow]:
            stored = self.saver.writes.get((thread_id, checkpoint_ns, checkpoint_id), {})
            return sorted((str(t), str(row[1]), int(i)) for (t, i), row in stored.items())

        found: list[WriteRow] = yield statement
        return found

    def delete_writes(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, keys: Sequence[WriteKey]
    ) -> Op[int]:
        def statement() -> int:
            rows = self.saver.storage.get(thread_id, {}).get(checkpoint_ns, {})
            if any(row[2] == checkpoint_id for row in rows.values()):  # check: childless
                return 0
            stored = self.saver.writes.get((thread_id, checkpoint_ns, checkpoint_id), {})
            gone = [k for k in keys if k in stored]
            drop(stored, gone)
            return len(gone)

        deleted: int = yield statement
        return deleted

    def thread_exists(self, thread_id: str) -> Op[bool]:
        found: bool = yield lambda: any(self.saver.storage.get(thread_id, {}).values())
        return found

    def copy_rows(self, source_thread_id: str, target_thread_id: str) -> Op[None]:
        def statement() -> None:
            saver = self.saver
            for ns, rows in list(saver.storage.get(source_thread_id, {}).items()):
                target = saver.storage[target_thread_id][ns]
                for checkpoint_id, (checkpoint, metadata, parent_id) in list(rows.items()):
                    renamed = _renamed_metadata(saver.serde, metadata, target_thread_id)
                    put(target, checkpoint_id, (checkpoint, renamed, parent_id))
            for table in (saver.writes, saver.blobs):
                for key, value in list(table.items()):
                    if key[0] == source_thread_id and value:
                        put(table, (target_thread_id, *key[1:]), _copied(value))
            records = self._records()
            for key, value in list(records.items()):
                if key[0] == source_thread_id:
                    put(records, (target_thread_id, *key[1:]), value)
            self.copy_resumptions(source_thread_id, target_thread_id)

        yield statement


def _renamed_metadata(serde: Any, metadata: Any, thread_id: str) -> Any:
    """Stored metadata whose `thread_id`, if it has one, names `thread_id` (as the Agent
    Server's own copy writes it); else as it was."""
    loaded = serde.loads_typed(metadata)
    if not isinstance(loaded, dict) or "thread_id" not in loaded:
        return metadata
    return serde.dumps_typed({**loaded, "thread_id": thread_id})


def _run(metadata: Any) -> str | None:
    run_id = metadata.get("run_id") if isinstance(metadata, dict) else None
    return None if run_id is None else str(run_id)


def _copied(value: Any) -> Any:
    """A writes entry (a dict, which the saver changes in place) copied; a blob as is."""
    return dict(value) if isinstance(value, dict) else value
