"""The resume ledger (`_rules._resumed`) of an `InMemorySaver`.

An entry is kept beside the saver, as the reclaim records are (so that every wrapper of
one store sees the others'): `(thread, ns, id, run) -> (seq, rows)`, where `rows` is the
checkpoint's writes entry as it was, copied (its values are immutable tuples). Restoring
puts that entry back whole; the SQL backends keep only what a write can change.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from retaining_saver._rules import Resumption
from retaining_saver.backends._base import Backend, Op
from retaining_saver.backends._memory_rows import drop, put

LedgerKey = tuple[str, str, str, str]
"""An entry's key: thread, namespace, checkpoint id, run id."""

_RESUMED: weakref.WeakKeyDictionary[InMemorySaver, dict[LedgerKey, tuple[int, dict[Any, Any]]]] = (
    weakref.WeakKeyDictionary()
)
_RESUMED_LOCK = threading.Lock()


def ledger(saver: InMemorySaver) -> dict[LedgerKey, tuple[int, dict[Any, Any]]]:
    """The saver's ledger entries."""
    with _RESUMED_LOCK:
        return _RESUMED.setdefault(saver, {})


class MemoryResumes(Backend):
    """`note_resume`, `resumptions`, `restore_writes` and `drop_resumptions` over an
    `InMemorySaver`."""

    saver: InMemorySaver

    def note_resume(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, run_id: str
    ) -> Op[bool]:
        def statement() -> bool:
            entries = ledger(self.saver)
            key = (thread_id, checkpoint_ns, checkpoint_id, run_id)
            row = self.saver.storage.get(thread_id, {}).get(checkpoint_ns, {}).get(checkpoint_id)
            if row is None or key in entries:
                return False
            metadata = self.saver.serde.loads_typed(row[1])
            made_by = metadata.get("run_id") if isinstance(metadata, dict) else None
            if made_by is not None and str(made_by) == run_id:
                return False  # the run's own checkpoint: rolling it back deletes it
            seq = 1 + max((s for k, (s, _) in entries.items() if k[:3] == key[:3]), default=0)
            rows = dict(self.saver.writes.get((thread_id, checkpoint_ns, checkpoint_id)) or {})
            put(entries, key, (seq, rows))
            return True

        noted: bool = yield statement
        return noted

    def resumptions(self, thread_id: str) -> Op[list[Resumption]]:
        def statement() -> list[Resumption]:
            return [
                Resumption(ns, cid, run, seq)
                for (thread, ns, cid, run), (seq, _) in list(ledger(self.saver).items())
                if thread == thread_id
            ]

        found: list[Resumption] = yield statement
        return found

    def restore_writes(self, thread_id: str, entry: Resumption) -> Op[int]:
        ns, checkpoint_id = entry.checkpoint_ns, entry.checkpoint_id

        def statement() -> int:
            rows = self.saver.storage.get(thread_id, {}).get(ns, {})
            if any(row[2] == checkpoint_id for row in rows.values()):  # check: childless
                return 0
            found = ledger(self.saver).get((thread_id, ns, checkpoint_id, entry.run_id))
            if found is None:
                return 0
            recorded = found[1]
            stored = self.saver.writes[(thread_id, ns, checkpoint_id)]
            extra = [k for k in stored if k not in recorded]
            drop(stored, extra)
            changed = [k for k, v in recorded.items() if stored.get(k) != v]
            for k in changed:
                put(stored, k, recorded[k])
            return len(extra) + len(changed)

        restored: int = yield statement
        return restored

    def drop_resumptions(self, thread_id: str, entries: Sequence[Resumption]) -> Op[None]:
        keys = [(thread_id, e.checkpoint_ns, e.checkpoint_id, e.run_id) for e in entries]
        if keys:
            yield lambda: drop(ledger(self.saver), keys)

    def resumed_threads(self, run_ids: set[str]) -> set[str]:
        """The threads holding a ledger entry of one of `run_ids` (within a statement)."""
        return {key[0] for key in list(ledger(self.saver)) if key[3] in run_ids}

    def forget_resumptions(self, thread_id: str) -> None:
        """Drop the thread's ledger entries (within a statement)."""
        entries = ledger(self.saver)
        drop(entries, [k for k in entries if k[0] == thread_id])

    def copy_resumptions(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy the source thread's ledger entries under the target id (within a statement)."""
        entries = ledger(self.saver)
        for key, (seq, rows) in list(entries.items()):
            if key[0] == source_thread_id:
                put(entries, (target_thread_id, *key[1:]), (seq, dict(rows)))
