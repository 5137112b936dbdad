"""A settable clock for sweep tests, and threads written at chosen ages.

LangGraph makes checkpoint ids with `langgraph.checkpoint.base.id.uuid6`,
which reads `time.time_ns()`; `SweepClock` stands in for that module's
`time`, so a thread's checkpoints carry the time the test chose, and the
sweeper reads the same clock as "now". No test sleeps.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command

from retaining_saver.testing.graphs import (
    build_interrupt_graph,
    chat_graph,
    thread,
    turn,
)

# A day ahead of the wall clock: the rules age checkpoints by the `ts` LangGraph
# stamps from the wall clock, which must not be in the sweeper's future.
LEAD = timedelta(days=1)
IDLE_FOR = timedelta(days=7)

# Each thread of the scene: its age when the sweeper runs, and what it is.
OLD = ("old-a", "old-b", "old-c")
VETOED = "old-vetoed"
INTERRUPTED = "old-interrupted"
YOUNG = "young"


class SweepClock:
    """A clock the test moves; callable as the sweeper's clock, and `time_ns` for ids."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def time_ns(self) -> int:
        return int(self.now.timestamp() * 1_000_000) * 1000

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def set_clock(monkeypatch: pytest.MonkeyPatch) -> SweepClock:
    """A clock a day ahead of the wall clock, whose time the checkpoint ids made while
    the test runs carry (for the test's `clock` fixture)."""
    from langgraph.checkpoint.base import id as ids

    made = SweepClock(datetime.now(UTC) + LEAD)
    monkeypatch.setattr(ids, "time", made)
    # Ids only ever grow: forget the last one, so that the clock's past is usable.
    monkeypatch.setattr(ids, "_last_v6_timestamp", None)
    return made


def write_scene(saver: BaseCheckpointSaver[Any], clock: SweepClock) -> None:
    """Old threads (three plain, one to veto, one interrupted) now, a young one ten
    days later; the clock is left an hour after that."""
    chat = chat_graph(saver)
    for thread_id in (*OLD, VETOED):
        for i in range(2):
            chat.invoke(turn(i), thread(thread_id))
            clock.advance(timedelta(minutes=1))
    build_interrupt_graph(saver).invoke({"topic": "t"}, thread(INTERRUPTED))
    clock.advance(timedelta(days=10))
    chat.invoke(turn(0), thread(YOUNG))
    clock.advance(timedelta(hours=1))


async def awrite_scene(saver: BaseCheckpointSaver[Any], clock: SweepClock) -> None:
    """Async `write_scene`."""
    chat = chat_graph(saver)
    for thread_id in (*OLD, VETOED):
        for i in range(2):
            await chat.ainvoke(turn(i), thread(thread_id))
            clock.advance(timedelta(minutes=1))
    await build_interrupt_graph(saver).ainvoke({"topic": "t"}, thread(INTERRUPTED))
    clock.advance(timedelta(days=10))
    await chat.ainvoke(turn(0), thread(YOUNG))
    clock.advance(timedelta(hours=1))


def resume(saver: BaseCheckpointSaver[Any]) -> Any:
    """Answer the interrupted thread's question: it must still be answerable."""
    return build_interrupt_graph(saver).invoke(Command(resume="yes"), thread(INTERRUPTED))
