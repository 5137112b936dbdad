"""The primitives every backend gives a removed run's resumed checkpoints: their writes
rows, and the resume ledger (`_rules._resumed`), which `delete_for_runs` reads to give a
resumed checkpoint back the writes it held before the removed run wrote there.

Apart from `_base` for length; `Backend` inherits them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from retaining_saver._rules._resumed import Resumption, WriteKey, WriteRow
from retaining_saver.backends._ops import Op


class ResumedWrites(ABC):
    """What a backend reads and changes of a resumed checkpoint's writes."""

    @abstractmethod
    def write_rows(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> Op[list[WriteRow]]:
        """The checkpoint's writes rows, as task id, channel and index, in key order."""

    @abstractmethod
    def delete_writes(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, keys: Sequence[WriteKey]
    ) -> Op[int]:
        """Delete the checkpoint's writes rows of `keys` (task id, index), each only while no
        checkpoint names it as parent; how many were deleted."""

    @abstractmethod
    def note_resume(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, run_id: str
    ) -> Op[bool]:
        """Record in the resume ledger (`_rules._resumed`) the checkpoint's writes rows as
        they are (keys; special rows whole) under `run_id`, before its first write there,
        if the checkpoint exists, another run made it, and `run_id` has no entry on it."""

    @abstractmethod
    def resumptions(self, thread_id: str) -> Op[list[Resumption]]:
        """The thread's ledger entries (none where the ledger was never written)."""

    @abstractmethod
    def restore_writes(self, thread_id: str, entry: Resumption) -> Op[int]:
        """Give the entry's checkpoint back the writes rows it recorded (those it did not go,
        its special rows are put back), while no checkpoint names it as parent; how many
        rows changed."""

    @abstractmethod
    def drop_resumptions(self, thread_id: str, entries: Sequence[Resumption]) -> Op[None]:
        """Delete the ledger entries named."""
