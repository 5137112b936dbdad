"""The one driver pair from an operation to its store: `run` and `arun` open the
backend's transaction for a mode and feed it every statement the operation yields.

An operation (`Op`) is the unit of a transaction: nothing else (the thread's lock, a
history cache, a read through the saver, the app's code) runs between its first
statement and its end, which is why its statements are a sub-generator of one `Run`
effect rather than effects of the flow (`_effects` hands each `Run` here). Backends
supply only the transaction and its executor, never a loop over an operation.
"""

from __future__ import annotations

from functools import partial
from typing import TypeVar, cast

from retaining_saver.backends._base import Backend, Mode, Op, on_saver_loop

T = TypeVar("T")


def run(backend: Backend, op: Op[T], mode: Mode = Mode.WRITE) -> T:
    """Carry out `op` in the transaction `mode` calls for, as `_effects.drive` carries out a `Run`.

    An async saver's transaction runs on its loop (`Backend.loop`), by `arun`.

    Raises:
        asyncio.InvalidStateError: If called on that loop's own thread.
    """
    if backend.loop is not None:
        return on_saver_loop(backend.loop, None, lambda: arun(backend, op, mode))
    return _transact(backend, op, mode)


async def arun(backend: Backend, op: Op[T], mode: Mode = Mode.WRITE) -> T:
    """`run`, for `_effects.adrive`: each statement awaited where the backend is `awaited`, else the
    sync transaction run whole in one `Backend.hop`.

    The statements are fed to the executor right here: a statement climbs no frame
    of ours between the flow's driver and the cursor (`scripts/statement_frames.py`).
    """
    if (awaited := backend.awaited) is None:
        return await backend.hop(partial(_transact, backend, op, mode))
    async with awaited.atransaction(mode) as aexecute:
        try:
            statement = next(op)
            while True:
                statement = op.send(await aexecute(statement))
        except StopIteration as done:
            return cast(T, done.value)
        finally:
            op.close()


def _transact(backend: Backend, op: Op[T], mode: Mode) -> T:
    """`op`'s statements fed to the executor of the backend's sync transaction, on this
    thread."""
    with backend.transaction(mode) as execute:
        try:
            statement = next(op)
            while True:
                statement = op.send(execute(statement))
        except StopIteration as done:
            return cast(T, done.value)
        finally:
            op.close()
