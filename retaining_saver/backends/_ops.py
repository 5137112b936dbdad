"""What a backend's operations are and what it supplies to run them: `Op` (a generator of a
backend's own statements that receives their results), the transaction `Mode` each runs
in, the executors a transaction yields (`Execute`, `AExecute`), the `Capabilities` a
backend declares, the `Integrity` it reports, and `on_saver_loop` (which runs a
coroutine on an async saver's loop from another thread). `_base` re-exports them for
the backends.

An op is the unit of a transaction. A flow yields `Run(op, mode)` and the one driver
pair in `retaining_saver._effects` (`run`, `arun`, which `drive`/`adrive` call for a
`Run`) feeds the op's statements, one after the other, to the executor of the
transaction its backend opens for `mode` (`Backend.transaction`, `atransaction`).
That is why an op's statements are a sub-generator of one `Run` and not effects of
the flow: between a transaction's first statement and its end no other effect (the
thread's lock, a history cache, a read through the saver, another op, the app's code)
may run, and the flow goes on, with the op's result, only once the transaction has
ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Generator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
Op = Generator[Any, Any, T]
"""An operation: yields statements, receives their results, returns a T; the statements
of one transaction."""
Execute = Callable[[Any], Any]
"""What a sync transaction yields: runs one of its backend's statements, answers its result."""
AExecute = Callable[[Any], Awaitable[Any]]
"""What an async transaction yields: `Execute`, awaited."""


class AwaitedTransactions(Protocol):
    """A backend whose statements are awaited on its saver's loop (`Backend.awaited`)."""

    def atransaction(self, mode: Mode) -> AbstractAsyncContextManager[AExecute]:
        """`Backend.transaction`, with each statement awaited."""
        ...


class Mode(StrEnum):
    """The transaction a backend runs an operation in.

    READ: it only reads; it runs as the saver runs its own reads, never in a
    transaction that takes a write lock (SQLite's `BEGIN IMMEDIATE`), and
    creates nothing.
    WRITE: it runs in one transaction.
    GUARDED: it writes, and every statement re-checks what it proved, so it
    needs no enclosing transaction (Postgres then runs each statement on its
    own; the other backends still run it in one transaction).
    APART: it writes in transactions of its own, which it yields as `Apart` (each
    commits or rolls back alone, in order); it runs in no enclosing transaction.
    Only Postgres runs an `Apart` (the idle-thread sweep's batch of threads).
    """

    READ = "read"
    WRITE = "write"
    GUARDED = "guarded"
    APART = "apart"


@dataclass(frozen=True)
class Integrity:
    """Rows of a thread that point at nothing: each count must be zero.

    Attributes:
        dangling_parents: Checkpoints whose parent id names no checkpoint.
        orphan_writes: Writes rows whose checkpoint does not exist.
        orphan_blobs: Blob rows no checkpoint of their namespace references.
    """

    dangling_parents: int
    orphan_writes: int
    orphan_blobs: int

    @property
    def clean(self) -> bool:
        return not (self.dangling_parents or self.orphan_writes or self.orphan_blobs)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the primitives every backend implements: declared by
    it when it is made (`Backend.declare`), and read by the saver instead of probing its
    class.

    Attributes:
        reads_head: It answers the async admission read itself (`HeadReader`), as its
            saver would, for less: its saver's async read costs more than its statements.
        takes_as_it_reads: Its admission read takes the trailing leaf in the statement
            that reads the head (`OneRoundBackend.admit_and_read`).
        compacts: It gives free pages back to the filesystem (`compact`, `acompact`).
    """

    reads_head: bool = False
    takes_as_it_reads: bool = False
    compacts: bool = False


def on_saver_loop(
    loop: asyncio.AbstractEventLoop, what: str | None, make: Callable[[], Coroutine[Any, Any, T]]
) -> T:
    """Run `make()` on an async saver's loop from another thread, as its sync methods do.

    Args:
        loop: The async saver's event loop.
        what: The public method called (`create_retention_indexes`), whose async twin
            the error names; None where the backend cannot tell which one it serves.
        make: The coroutine to run there.

    Raises:
        asyncio.InvalidStateError: If called from that loop's own thread, where
            blocking on it would deadlock.
    """
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        twin = f"`await saver.a{what}(...)`" if what else "its async twin (`await saver.a...`)"
        raise asyncio.InvalidStateError(
            f"a synchronous {what or 'maintenance'}() call on an async saver is only allowed "
            f"from a thread other than the saver's event loop; use {twin}"
        )
    return asyncio.run_coroutine_threadsafe(make(), loop).result()


def window_size(newest: int | None) -> int | None:
    """`newest` as `load_lineage` binds it.

    Raises:
        ValueError: If it is not None or a positive int.
    """
    if newest is None or (type(newest) is int and newest > 0):
        return newest
    raise ValueError(f"newest must be a positive int or None, got {newest!r}")
