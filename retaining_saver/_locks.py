"""Per-thread locks that live only while somebody holds or waits for them."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Generic, TypeVar

L = TypeVar("L", threading.Lock, asyncio.Lock)


class _Entry(Generic[L]):
    """A lock and how many holders and waiters use it."""

    __slots__ = ("lock", "users")

    def __init__(self, lock: L) -> None:
        self.lock: L = lock
        self.users = 0


class _Registry(Generic[L]):
    """The locks in use, by thread id; an entry goes when its last user leaves."""

    __slots__ = ("entries", "guard", "make")

    def __init__(self, guard: threading.Lock, make: type[L]) -> None:
        self.guard = guard
        self.make: type[L] = make
        self.entries: dict[str, _Entry[L]] = {}

    def enter(self, thread_id: str) -> _Entry[L]:
        with self.guard:
            entry = self.entries.get(thread_id)
            if entry is None:
                entry = self.entries[thread_id] = _Entry(self.make())
            entry.users += 1
            return entry

    def leave(self, thread_id: str, entry: _Entry[L]) -> None:
        with self.guard:
            entry.users -= 1
            if not entry.users:
                del self.entries[thread_id]

    @contextmanager
    def using(self, thread_id: str) -> Iterator[_Entry[L]]:
        """`thread_id`'s entry, entered for as long as the block runs."""
        entry = self.enter(thread_id)
        try:
            yield entry
        finally:
            self.leave(thread_id, entry)


class ThreadLocks:
    """A `threading.Lock` per thread id for sync callers, an `asyncio.Lock` per
    (event loop, thread id) for async ones.

    The registry holds only the locks in use, however many threads pass
    through: an entry counts its holders and waiters and goes with the last.
    An `asyncio.Lock` belongs to one event loop, so each loop gets its own
    registry; a loop that is gone takes its registry with it.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._sync = _Registry(self._guard, threading.Lock)
        self._async: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, _Registry[asyncio.Lock]
        ] = weakref.WeakKeyDictionary()
        # Tasks holding a lock handed over to them (`hand_over`): a strong reference each,
        # so that none is collected while it runs.
        self._handed: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        with self._guard:
            return len(self._sync.entries) + sum(len(r.entries) for r in self._async.values())

    @contextmanager
    def hold(self, thread_id: str) -> Iterator[None]:
        """Hold `thread_id`'s sync lock."""
        entry = self._sync.enter(thread_id)
        try:
            with entry.lock:
                yield
        finally:
            self._sync.leave(thread_id, entry)

    @contextmanager
    def try_hold(self, thread_id: str) -> Iterator[bool]:
        """Hold `thread_id`'s sync lock if it is free; yields whether it was."""
        with (
            self._sync.using(thread_id) as entry,
            _held_if(entry.lock, entry.lock.acquire(blocking=False)) as got,
        ):
            yield got

    @asynccontextmanager
    async def atry_hold(self, thread_id: str) -> AsyncIterator[bool]:
        """Hold `thread_id`'s lock for the running event loop if it is free (`async with`);
        yields whether it was."""
        with self._loop_registry().using(thread_id) as entry:
            # A free lock with no waiters is taken without suspending: nobody can slip in.
            if got := not entry.lock.locked():
                await entry.lock.acquire()
            with _held_if(entry.lock, got):
                yield got

    def ahold(self, thread_id: str) -> _AsyncHold:
        """Hold `thread_id`'s lock for the running event loop (`async with`)."""
        return _AsyncHold(self._loop_registry(), thread_id)

    def hand_over(self, hold: _AsyncHold, work: Callable[[], Awaitable[None]]) -> None:
        """Keep `hold`, taken by the caller, until `work()` has run in a task of its own on
        the running loop, which then releases it: the caller goes on, and whoever waits for
        the lock next waits for the work as for any holder."""

        async def finish() -> None:
            try:
                await work()
            finally:
                await hold.__aexit__()

        task = asyncio.get_running_loop().create_task(finish())
        self._handed.add(task)
        task.add_done_callback(self._handed.discard)

    async def asettled(self) -> None:
        """Wait until the work handed over to tasks on the running loop has run."""
        loop = asyncio.get_running_loop()
        while handed := [task for task in self._handed if task.get_loop() is loop]:
            await asyncio.wait(handed)

    def _loop_registry(self) -> _Registry[asyncio.Lock]:
        loop = asyncio.get_running_loop()
        registry = self._async.get(loop)
        if registry is None:
            with self._guard:
                registry = self._async.setdefault(loop, _Registry(self._guard, asyncio.Lock))
        return registry


@contextmanager
def _held_if(lock: threading.Lock | asyncio.Lock, got: bool) -> Iterator[bool]:
    """Yields `got`, whether this caller took `lock`, and releases it afterwards if so."""
    try:
        yield got
    finally:
        if got:
            lock.release()


class _AsyncHold:
    """`async with` on a thread's `asyncio.Lock`.

    A plain class, not `asynccontextmanager`: every admission passes through it.
    """

    __slots__ = ("_entry", "_registry", "_thread_id")

    def __init__(self, registry: _Registry[asyncio.Lock], thread_id: str) -> None:
        self._registry = registry
        self._thread_id = thread_id

    async def __aenter__(self) -> None:
        self._entry = entry = self._registry.enter(self._thread_id)
        try:
            await entry.lock.acquire()
        except BaseException:  # cancelled while waiting: it holds nothing
            self._registry.leave(self._thread_id, entry)
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._entry.lock.release()
        self._registry.leave(self._thread_id, self._entry)
