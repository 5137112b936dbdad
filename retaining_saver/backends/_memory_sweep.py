"""The idle-thread sweep on an `InMemorySaver`: its dicts are the index.

Each "statement" is a closure over the saver's dicts, as in `memory`; the
backend's transaction undoes what a failed operation changed. One process holds
the store, so the per-thread lock of `RetainingSaver` is the only lock.
"""

from __future__ import annotations

from typing import Any

from retaining_saver._rules._idle import ThreadHead
from retaining_saver.backends._base import Op
from retaining_saver.backends._memory_rows import drop
from retaining_saver.backends._sweep import SweepStore


class MemorySweep(SweepStore):
    """The sweep over an `InMemorySaver`'s `storage`, `writes` and `blobs`."""

    def _saver(self) -> Any:
        return self.backend.saver

    def scan(self, after: str | None, limit: int) -> Op[list[ThreadHead]]:
        def statement() -> list[ThreadHead]:
            storage = self._saver().storage
            found: list[ThreadHead] = []
            for thread_id in sorted(t for t in storage if after is None or t > after):
                root = storage[thread_id].get("", {})
                if root:
                    found.append(ThreadHead(thread_id, max(root), min(root)))
                    if len(found) == limit:
                        break
            return found

        heads: list[ThreadHead] = yield statement
        return heads

    def delete_thread(self, thread_id: str) -> Op[int]:
        # One step on the saver's dicts: no write of this process runs inside it, so
        # nothing of the thread is left after it (the SQL stores read that again).
        def statement() -> int:
            saver = self._saver()
            namespaces = saver.storage.get(thread_id, {})
            deleted = sum(len(rows) for rows in namespaces.values())
            drop(saver.storage, [thread_id])
            drop(saver.writes, [k for k in saver.writes if k[0] == thread_id])
            drop(saver.blobs, [k for k in saver.blobs if k[0] == thread_id])
            return deleted

        deleted: int = yield statement
        yield from self.backend.forget_reclaimed(thread_id)
        return deleted
