"""Statistics of an `InMemorySaver`: its three dicts measured as serialized bytes.

A row's bytes are the lengths of the typed payloads the saver keeps: the
checkpoint and metadata of a `storage` row, the value of a write, a blob.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from retaining_saver._rules import BlobKey, NodeKey
from retaining_saver.backends._base import Backend, Op
from retaining_saver.backends._stats import ChannelStats, StorageStats, TableStats, ThreadStats


class MemoryStats(Backend):
    """The statistics primitives over the saver's `storage`, `writes` and `blobs`."""

    saver: InMemorySaver

    def stats(self, thread_id: str | None) -> Op[StorageStats]:
        stats: StorageStats = yield lambda: self._stats(thread_id)
        return stats

    def _stats(self, thread_id: str | None) -> StorageStats:
        threads = [thread_id] if thread_id is not None else list(self.saver.storage)
        rows = [row for t in threads for _, _, row in self._rows(t)]
        writes = [w for _, w in self._writes(thread_id)]
        blobs = [b for k, b in self.saver.blobs.items() if thread_id in (None, k[0])]
        return StorageStats(
            thread_id,
            {
                "storage": TableStats(len(rows), sum(map(_row_bytes, rows))),
                "writes": TableStats(len(writes), sum(len(w[2][1]) for w in writes)),
                "blobs": TableStats(len(blobs), sum(len(b[1]) for b in blobs)),
            },
        )

    def _rows(self, thread_id: str) -> Iterator[tuple[str, str, Any]]:
        for ns, rows in self.saver.storage.get(thread_id, {}).items():
            for checkpoint_id, row in rows.items():
                yield ns, checkpoint_id, row

    def _writes(self, thread_id: str | None) -> Iterator[tuple[NodeKey, Any]]:
        """Each write of the thread (of every thread for None), with its checkpoint."""
        for key, found in self.saver.writes.items():
            if thread_id in (None, key[0]):
                for write in found.values():
                    yield (key[1], key[2]), write

    def gone_stats(
        self, thread_id: str, checkpoints: Sequence[NodeKey], blobs: Sequence[BlobKey]
    ) -> Op[dict[str, TableStats]]:
        def statement() -> dict[str, TableStats]:
            named = set(checkpoints)
            rows = [row for ns, cid, row in self._rows(thread_id) if (ns, cid) in named]
            writes = [w for key, w in self._writes(thread_id) if key in named]
            found = [self.saver.blobs.get((thread_id, *key)) for key in blobs]
            present = [b for b in found if b is not None]
            return {
                "storage": TableStats(len(rows), sum(map(_row_bytes, rows))),
                "writes": TableStats(len(writes), sum(len(w[2][1]) for w in writes)),
                "blobs": TableStats(len(present), sum(len(b[1]) for b in present)),
            }

        gone: dict[str, TableStats] = yield statement
        return gone

    def channel_stats(self, thread_id: str | None) -> Op[dict[str, ChannelStats]]:
        def statement() -> dict[str, ChannelStats]:
            blobs = [(k[2], b) for k, b in self.saver.blobs.items() if thread_id in (None, k[0])]
            return _per_channel(blobs, [w for _, w in self._writes(thread_id)])

        channels: dict[str, ChannelStats] = yield statement
        return channels

    def gone_channel_stats(
        self, thread_id: str, checkpoints: Sequence[NodeKey], blobs: Sequence[BlobKey]
    ) -> Op[dict[str, ChannelStats]]:
        def statement() -> dict[str, ChannelStats]:
            named = set(checkpoints)
            found = [(key[1], self.saver.blobs.get((thread_id, *key))) for key in blobs]
            writes = [w for key, w in self._writes(thread_id) if key in named]
            return _per_channel([(c, b) for c, b in found if b is not None], writes)

        channels: dict[str, ChannelStats] = yield statement
        return channels

    def top_threads(self, limit: int) -> Op[list[ThreadStats]]:
        def statement() -> list[ThreadStats]:
            each = [self._stats(t) for t in list(self.saver.storage)]
            ranked = sorted(each, key=lambda s: (-s.bytes, s.thread_id or ""))
            return [ThreadStats(s.thread_id or "", s.rows, s.bytes) for s in ranked[:limit]]

        top: list[ThreadStats] = yield statement
        return top


def _row_bytes(row: Any) -> int:
    return len(row[0][1]) + len(row[1][1])


def _per_channel(
    blobs: Sequence[tuple[str, Any]], writes: Sequence[Any]
) -> dict[str, ChannelStats]:
    """Per channel, the (channel, blob) pairs as values and the write tuples as writes."""
    found: dict[str, ChannelStats] = {}
    for channel, blob in blobs:
        _add(found, channel, ChannelStats(values=1, value_bytes=len(blob[1])))
    for write in writes:
        _add(found, write[1], ChannelStats(writes=1, write_bytes=len(write[2][1])))
    return dict(sorted(found.items()))


def _add(found: dict[str, ChannelStats], channel: str, more: ChannelStats) -> None:
    found[channel] = found.get(channel, ChannelStats()) + more
