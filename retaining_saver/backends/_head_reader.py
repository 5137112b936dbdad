"""Backends that answer the async admission read themselves, as their saver would.

`HeadReader` runs the saver's own statements for the unpinned read and builds
the tuple as the saver does; `OneRoundBackend` also takes a trailing leaf in
the statement that reads the head. The tuples are built by
`_upstream.tuples`, beside the audit of the internals they use.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple, PendingWrite

from retaining_saver._rules import MarkerShape
from retaining_saver.backends._base import Backend, Op


class HeadReader(Backend):
    """A backend that answers the async admission read itself, as its saver would, for less.

    It declares `Capabilities.reads_head` where it does so. It runs the
    saver's own statements for the unpinned read (`head_row`, in one READ)
    and builds the tuple as the saver does (`read_tuple`). Where the saver's
    async read costs more than its statements (Postgres: a worker
    thread hop to deserialize pending writes, even when there are none;
    SQLite: a hop to aiosqlite's thread for every cursor call), the admission
    read then costs less than the bare one, and what it saves pays for the
    wrapper.
    """

    @abstractmethod
    def head_row(self, thread_id: str, checkpoint_ns: str) -> Op[Any]:
        """What the saver's own unpinned read selects, or None for an empty namespace."""

    @abstractmethod
    def row_writes(self, row: Any) -> Callable[[], list[PendingWrite]] | None:
        """The deserialization of `row`'s pending writes where the saver runs it in a
        worker thread and there are some, else None (`read_tuple` deserializes them)."""

    @abstractmethod
    def read_tuple(
        self, row: Any, writes: list[PendingWrite] | None = None
    ) -> CheckpointTuple | None:
        """The tuple the saver's own read builds from `row`, with its pending writes
        deserialized as `writes` (here, if None); or None where only the saver
        itself can build it (read it through the saver then)."""


class OneRoundBackend(HeadReader):
    """A backend whose admission read takes the trailing leaf, if any, as it reads the head.

    It declares `Capabilities.takes_as_it_reads`. The rules' marker is bound as
    data (`MarkerShape`), so the store judges the
    leaf inside the statement that reads the head: an admission that reclaims
    costs one round trip, like the read it replaces.
    """

    @abstractmethod
    def admit_and_read(
        self,
        thread_id: str,
        checkpoint_ns: str,
        marker: MarkerShape,
        protected: frozenset[str],
        token: str,
    ) -> Op[tuple[str | None, Any]]:
        """Take the namespace's newest checkpoint if `leaf_verdict` would, and read the head.

        Answers the id taken (None if nothing was) and the row of the newest
        checkpoint after it, as the saver reads it, for `read_tuple` (None for
        an empty namespace). The reclaim record of a take names `token`.
        """

    @abstractmethod
    def taken_by(self, thread_id: str, checkpoint_ns: str, token: str) -> Op[str | None]:
        """The id an `admit_and_read` with `token` took, if its statement committed; a read."""
