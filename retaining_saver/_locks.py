"""Per-thread locks that live only while somebody holds or waits for them."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Generic, TypeVar

L = TypeVar("L", threading.Lock, asyncio.Lock)

SHARING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "retaining_saver_sharing", default=False
)
"""Whether the code running here holds its thread's lock shared (`ThreadLocks.share`,
`ashare`): a write so must delete and record nothing, whatever a read taught this process
since it checked."""


class _Entry(Generic[L]):
    """A lock and how many holders and waiters use it; how many share it (`sharers`), and
    what tells its exclusive holder that the last of them left (`drained`: a
    `threading.Condition` or an `asyncio.Event`, made when first waited on)."""

    __slots__ = ("drained", "lock", "sharers", "users")

    def __init__(self, lock: L) -> None:
        self.lock: L = lock
        self.users = 0
        self.sharers = 0
        self.drained: Any = None


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

    A lock is held alone (`hold`, `ahold`: deletions, admissions, any write that deletes
    or records first) or shared (`share`, `ashare`: the other writes), as a
    readers-writer lock: sharers come in only while nobody holds it alone or waits
    to (they take the lock and give it back at once, in turn with the others), and a
    holder alone, once it has the lock, waits for the sharers inside to leave.

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
        """Hold `thread_id`'s sync lock alone: once its sharers (`share`) have left."""
        entry = self._sync.enter(thread_id)
        try:
            with _alone(entry, self._guard):
                yield
        finally:
            self._sync.leave(thread_id, entry)

    def share(self, thread_id: str) -> _SyncShare:
        """Hold `thread_id`'s sync lock shared with other sharers (writes that delete
        nothing): none holds it alone meanwhile, and one waiting to comes first."""
        return _SyncShare(self._sync, thread_id)

    @contextmanager
    def hold_or_share(self, thread_id: str, shared_if: Callable[[], bool] | None) -> Iterator[None]:
        """Hold `thread_id`'s sync lock shared where `shared_if` is given and holds once it
        is; else alone."""
        if shared_if is not None:
            with self.share(thread_id):
                if shared_if():
                    yield
                    return
        with self.hold(thread_id):
            yield

    @contextmanager
    def try_hold(self, thread_id: str) -> Iterator[bool]:
        """Hold `thread_id`'s sync lock alone if it is free; yields whether it was."""
        with (
            self._sync.using(thread_id) as entry,
            _held_if(entry.lock, _acquire_unshared(entry)) as got,
        ):
            yield got

    @asynccontextmanager
    async def atry_hold(self, thread_id: str) -> AsyncIterator[bool]:
        """Hold `thread_id`'s lock for the running event loop if it is free (`async with`);
        yields whether it was."""
        with self._loop_registry().using(thread_id) as entry:
            # A free lock with no waiters is taken without suspending: nobody can slip in.
            if got := not (entry.lock.locked() or entry.sharers):
                await entry.lock.acquire()
            with _held_if(entry.lock, got):
                yield got

    def ahold(self, thread_id: str) -> _AsyncHold:
        """Hold `thread_id`'s lock for the running event loop alone (`async with`): once its
        sharers (`ashare`) have left."""
        return _AsyncHold(self._loop_registry(), thread_id)

    def ashare(self, thread_id: str) -> _AsyncShare:
        """`share`, for the running event loop (`async with`)."""
        return _AsyncShare(self._loop_registry(), thread_id)

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
        try:
            while entry.sharers:  # no sharer comes in while the lock is held
                if entry.drained is None:
                    entry.drained = asyncio.Event()
                entry.drained.clear()
                await entry.drained.wait()
        except BaseException:
            await self.__aexit__()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._entry.lock.release()
        self._registry.leave(self._thread_id, self._entry)


@contextmanager
def _alone(entry: _Entry[threading.Lock], guard: threading.Lock) -> Iterator[None]:
    """`entry`'s lock held, and (no sharer comes in meanwhile) its sharers gone. The
    condition they are waited on is made on the registry's `guard`, which a leaving sharer
    holds as it counts itself out: it cannot leave unseen between the check and the wait."""
    with entry.lock:
        if entry.sharers:
            with guard:
                if entry.drained is None:
                    entry.drained = threading.Condition(guard)
                while entry.sharers:
                    entry.drained.wait()
        yield


def _acquire_unshared(entry: _Entry[threading.Lock]) -> bool:
    """Take `entry`'s lock if it is free and nobody shares it; whether it was taken."""
    if not entry.lock.acquire(blocking=False):
        return False
    if entry.sharers:
        entry.lock.release()
        return False
    return True


class _Share:
    """A hold on a thread's lock shared with other sharers (`ThreadLocks.share`, `ashare`):
    the lock is taken and given back at once (behind any holder alone, in turn), and
    the entry counts one sharer more, with `SHARING` set, until the block ends."""

    __slots__ = ("_entry", "_registry", "_thread_id", "_token")

    def __init__(self, registry: _Registry[Any], thread_id: str) -> None:
        self._registry = registry
        self._thread_id = thread_id
        self._entry: _Entry[Any]
        self._token: contextvars.Token[bool]

    def _count(self, entry: _Entry[Any]) -> None:
        entry.sharers += 1
        self._token = SHARING.set(True)

    def _uncount(self) -> bool:
        """One sharer less; whether it was the last."""
        SHARING.reset(self._token)
        self._entry.sharers -= 1
        return not self._entry.sharers


class _SyncShare(_Share):
    __slots__ = ()

    def __enter__(self) -> None:
        self._entry = entry = self._registry.enter(self._thread_id)
        try:
            with entry.lock, self._registry.guard:
                self._count(entry)
        except BaseException:
            self._registry.leave(self._thread_id, entry)
            raise

    def __exit__(self, *exc_info: object) -> None:
        with self._registry.guard:
            # Only a holder waiting for the sharers to leave made the condition (`_alone`).
            if self._uncount() and self._entry.drained is not None:
                self._entry.drained.notify_all()
        self._registry.leave(self._thread_id, self._entry)


class _AsyncShare(_Share):
    __slots__ = ()

    async def __aenter__(self) -> None:
        self._entry = entry = self._registry.enter(self._thread_id)
        try:
            await entry.lock.acquire()
        except BaseException:
            self._registry.leave(self._thread_id, entry)
            raise
        self._count(entry)
        entry.lock.release()

    async def __aexit__(self, *exc_info: object) -> None:
        if self._uncount() and self._entry.drained is not None:
            self._entry.drained.set()
        self._registry.leave(self._thread_id, self._entry)
