"""Reclaimed ids keep resolving to the clone that survives them.

Only a clone of its parent is ever reclaimed as a duplicate (a trailing
duration leaf, or a grafted duration link): the same channel versions, the
same values, the same next tasks. A client may still hold its id (`get_state`
showed it), so that id keeps naming the surviving clone:

- a read pinned to it answers the clone's tuple, config included, which is
  exactly what the same read of the clone answers on a thread where the
  reclaimed checkpoint was never written;
- a checkpoint or a write this process puts on it lands on the clone, so
  nothing ever becomes the child of a deleted id.

Each backend records the reclaim durably, in the transaction that deletes the
checkpoint, for `ttl` (other processes resolve pinned reads through it). This
process also remembers its own reclaims in `ReclaimedIds`, a map bounded in
entries of fixed size, which its writes consult under the per-thread lock.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from datetime import timedelta

from retaining_saver._lru import BoundedLru

RECLAIMED_ID_TTL = timedelta(days=30)
"""How long a reclaimed id resolves to its clone, by default."""

MAX_HOPS = 8
"""Stacked clones resolve through at most this many reclaimed ids."""

Key = tuple[str, str, str]
"""(thread_id, checkpoint_ns, checkpoint_id)."""


class ReclaimedIds:
    """The ids this process reclaimed, each with the clone that replaced it.

    At most `size` entries of three ids each (about 250 bytes), the oldest
    forgotten first, and none older than `ttl`.
    """

    def __init__(self, ttl: timedelta = RECLAIMED_ID_TTL, size: int = 16_384) -> None:
        self._ttl = ttl.total_seconds()
        self._clones: BoundedLru[Key, tuple[str, float]] = BoundedLru(size)

    def remember(self, key: Key, clone_id: str) -> None:
        """Remember that `key`'s checkpoint was reclaimed as a duplicate of `clone_id`."""
        self._clones.put(key, (clone_id, time.monotonic()))

    def clone_of(self, key: Key) -> str | None:
        """The clone `key` names, if this process reclaimed it within `ttl`."""
        found = self._clones.get(key)
        if found is None or time.monotonic() - found[1] > self._ttl:
            return None
        return found[0]

    def survivor(self, key: Key) -> str | None:
        """Where `key` leads through every clone this process reclaimed, or None."""
        if not self._clones:
            return None  # every write asks: most processes (no stamps) reclaim nothing
        thread_id, ns, current = key
        survivor = None
        for _ in range(MAX_HOPS):
            clone = self.clone_of((thread_id, ns, current))
            if clone is None:
                break
            survivor = current = clone
        return survivor

    def forget_thread(self, thread_id: str) -> None:
        """Forget every reclaim of `thread_id` (its checkpoints were all deleted)."""
        self._clones.drop_where(lambda key: key[0] == thread_id)

    def forget_clones(self, thread_id: str, gone: Collection[tuple[str, str]]) -> None:
        """Forget each reclaim of `thread_id` that resolves to a checkpoint in `gone`
        ((namespace, id) pairs, deleted since)."""
        self._clones.drop_entries(
            lambda key, value: key[0] == thread_id and (key[1], value[0]) in gone
        )
