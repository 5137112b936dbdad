"""One way from a flow to a statement (issue #20).

A backend supplies a transaction per mode and the executor of its statements;
only the drivers feed a generator its answers: the effect drivers in
`retaining_saver/_effects.py`, and the transaction drivers in
`retaining_saver/_transact.py`, which alone feed an operation's statements to
it. A `Run` is one transaction: every statement its operation yields goes, in
order, through the executor of the one transaction it opens.
"""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from savers import KINDS, open_async, open_sync

import retaining_saver
from retaining_saver._effects import Performer, Run, adrive, answer, drive
from retaining_saver.backends import backend_for
from retaining_saver.backends._base import Backend, Mode, Op

ROOT = Path(retaining_saver.__file__).parent
DRIVERS = (ROOT / "_effects.py", ROOT / "_transact.py")
THREAD = "one-way"


def _sends(path: Path) -> Iterator[str]:
    """Where `path` feeds a generator (`x.send(...)`), as `file:line`."""
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "send"
        ):
            yield f"{path.relative_to(ROOT.parent)}:{node.lineno}"


def test_only_the_drivers_feed_statements() -> None:
    """Feeding a generator its answers is the drivers' alone: no backend has a loop of its
    own over an operation."""
    elsewhere = [
        where for path in ROOT.rglob("*.py") if path not in DRIVERS for where in _sends(path)
    ]
    assert elsewhere == []
    assert all(list(_sends(path)) for path in DRIVERS)  # the check reads what it means to


class Spy:
    """What a backend's transactions were opened for, and the statements their
    executors ran."""

    def __init__(self) -> None:
        self.opened: list[Mode] = []
        self.executed: list[Any] = []
        self.yielded: list[Any] = []

    def watch(self, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
        real, areal = backend.transaction, getattr(backend, "atransaction", None)

        @contextmanager
        def transaction(mode: Mode) -> Iterator[Any]:
            with real(mode) as execute:
                self.opened.append(mode)
                yield lambda statement: execute(self._ran(statement))

        @asynccontextmanager
        async def atransaction(mode: Mode) -> AsyncIterator[Any]:
            async with areal(mode) as aexecute:
                self.opened.append(mode)
                yield lambda statement: aexecute(self._ran(statement))

        monkeypatch.setattr(backend, "transaction", transaction)
        if areal is not None:  # a backend whose statements are awaited
            monkeypatch.setattr(backend, "atransaction", atransaction)

    def _ran(self, statement: Any) -> Any:
        self.executed.append(statement)
        return statement

    def recorded(self, op: Op[Any]) -> Op[Any]:
        """`op`, each statement it yields kept in `yielded`."""
        result: Any = None
        try:
            while True:
                statement = op.send(result)
                self.yielded.append(statement)
                result = yield statement
        except StopIteration as done:
            return done.value


def _write(backend: Backend) -> Op[tuple[int, bool]]:
    """Two primitives in one operation: the lineage and whether the thread exists."""
    lineage = yield from backend.load_lineage(THREAD)
    exists = yield from backend.thread_exists(THREAD)
    return len(lineage.nodes), exists


def _watched(
    saver: BaseCheckpointSaver[Any], monkeypatch: pytest.MonkeyPatch
) -> tuple[Spy, Performer, Run]:
    backend = backend_for(saver)
    assert backend is not None
    spy = Spy()
    spy.watch(backend, monkeypatch)
    performer = Performer(inner=saver, backend=backend, caches=())
    return spy, performer, Run(spy.recorded(_write(backend)), Mode.WRITE)


def _root() -> RunnableConfig:
    return {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}


@pytest.mark.parametrize("kind", KINDS)
def test_a_sync_run_is_one_transaction(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_sync(kind, request) as saver:
        saver.put(_root(), empty_checkpoint(), {"source": "input", "step": -1}, {})
        spy, performer, run = _watched(saver, monkeypatch)
        assert drive(answer(run), performer) == (1, True)
    assert spy.opened == [Mode.WRITE]
    assert spy.executed == spy.yielded and len(spy.yielded) >= 2


@pytest.mark.parametrize("kind", KINDS)
async def test_an_async_run_is_one_transaction(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_async(kind, request) as saver:
        await saver.aput(_root(), empty_checkpoint(), {"source": "input", "step": -1}, {})
        spy, performer, run = _watched(saver, monkeypatch)
        assert await adrive(answer(run), performer) == (1, True)
    assert spy.opened == [Mode.WRITE]
    assert spy.executed == spy.yielded and len(spy.yielded) >= 2
