"""A run's writes share the thread's lock; deletions hold it alone (`_locks`, `_writes`).

Writes that delete and record nothing first (every write of a run but the first after a
stamp or on a resumed checkpoint) run beside each other, as on the bare saver, where
LangGraph overlaps them. Whatever deletes waits until they are done, and none starts
while it runs: no write lands on a checkpoint being deleted.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from retaining_saver import RetainingSaver
from retaining_saver._effects import drive
from retaining_saver._locks import ThreadLocks
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, thread, thread_config

ALONE_BETWEEN_THE_WRITES = [
    "write early in",
    "write early out",
    "alone in",
    "alone out",
    "write late in",
    "write late out",
]
"""A holder alone comes in after the write that shared the lock first, and before the one
that came after it: it waited for the first, and kept the second out."""


def _written(saver: RetainingSaver, thread_id: str) -> list[str]:
    """Two checkpoints of `thread_id`, written through `saver`: the targets of writes."""
    ids = []
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for step in range(2):
        checkpoint = empty_checkpoint()
        config = saver.put(config, checkpoint, {"source": "loop", "step": step}, {})
        ids.append(checkpoint["id"])
    return ids


async def test_a_runs_async_writes_run_beside_each_other() -> None:
    saver = RetainingSaver(InMemorySaver())
    ids = _written(saver, "t")
    inside, most = 0, 0
    own = saver.inner.aput_writes

    async def overlapping(*args: Any) -> None:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0.01)  # the other write starts meanwhile, if it may
        inside -= 1
        await own(*args)

    saver.inner.aput_writes = overlapping  # type: ignore[method-assign]
    await asyncio.gather(
        *(saver.aput_writes(thread("t", i), [("said", i)], f"task-{i}") for i in ids)
    )
    assert most == 2
    for i in ids:
        found = await saver.aget_tuple(thread("t", i))
        assert found is not None and found.pending_writes == [(f"task-{i}", "said", i)]


async def test_a_holder_alone_waits_for_the_writes_and_keeps_new_ones_out() -> None:
    saver = RetainingSaver(InMemorySaver())
    first, second = _written(saver, "t")
    release = asyncio.Event()
    order: list[str] = []
    own = saver.inner.aput_writes

    async def held_write(*args: Any) -> None:
        order.append(f"write {args[2]} in")
        if args[2] == "early":
            await release.wait()
        await own(*args)
        order.append(f"write {args[2]} out")

    saver.inner.aput_writes = held_write  # type: ignore[method-assign]
    early = asyncio.create_task(saver.aput_writes(thread("t", first), [("said", 1)], "early"))
    await asyncio.sleep(0)

    async def alone() -> None:
        async with saver._locks.ahold("t"):
            order.append("alone in")
            await asyncio.sleep(0)
            order.append("alone out")

    holder = asyncio.create_task(alone())
    await asyncio.sleep(0)
    late = asyncio.create_task(saver.aput_writes(thread("t", second), [("said", 2)], "late"))
    await asyncio.sleep(0.01)
    assert order == ["write early in"]  # the holder waits; the late write queues behind it
    release.set()
    await asyncio.gather(early, holder, late)
    assert order == ALONE_BETWEEN_THE_WRITES


def test_a_runs_sync_writes_run_beside_each_other() -> None:
    saver = RetainingSaver(InMemorySaver())
    ids = _written(saver, "t")
    both_in = threading.Barrier(2, timeout=5)  # broken unless both writes are inside at once
    own = saver.inner.put_writes

    def meeting(*args: Any) -> None:
        both_in.wait()
        own(*args)

    saver.inner.put_writes = meeting  # type: ignore[method-assign]
    failures: list[BaseException] = []

    def write(checkpoint_id: str) -> None:
        try:
            saver.put_writes(thread("t", checkpoint_id), [("said", 1)], f"task-{checkpoint_id}")
        except BaseException as error:
            failures.append(error)

    workers = [threading.Thread(target=write, args=(i,)) for i in ids]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []


def test_a_sync_holder_alone_waits_for_the_writes_and_keeps_new_ones_out() -> None:
    # The condition a holder waits on is made only when it must wait (`_locks._alone`):
    # here it must, and the writer leaving wakes it.
    saver = RetainingSaver(InMemorySaver())
    first, second = _written(saver, "t")
    early_in, release = threading.Event(), threading.Event()
    order: list[str] = []
    own = saver.inner.put_writes

    def held_write(*args: Any) -> None:
        order.append(f"write {args[2]} in")
        if args[2] == "early":
            early_in.set()
            assert release.wait(5)
        own(*args)
        order.append(f"write {args[2]} out")

    def alone() -> None:
        with saver._locks.hold("t"):
            order.append("alone in")
            order.append("alone out")

    saver.inner.put_writes = held_write  # type: ignore[method-assign]
    early = threading.Thread(
        target=saver.put_writes, args=(thread("t", first), [("said", 1)], "early"), daemon=True
    )
    early.start()
    assert early_in.wait(5)
    holder = threading.Thread(target=alone, daemon=True)  # a failure must not hang the run
    holder.start()
    while not saver._locks._sync.entries["t"].lock.locked():
        threading.Event().wait(0.001)  # the holder has the lock, and waits for the writer
    late = threading.Thread(
        target=saver.put_writes, args=(thread("t", second), [("said", 2)], "late"), daemon=True
    )
    late.start()
    threading.Event().wait(0.02)
    assert order == ["write early in"]  # the holder waits; the late write queues behind it
    release.set()
    for worker in (early, holder, late):
        worker.join(5)
    assert order == ALONE_BETWEEN_THE_WRITES
    assert len(saver._locks) == 0


def test_a_shared_lock_is_not_free_to_hold_alone() -> None:
    locks = ThreadLocks()
    with locks.share("t"), locks.share("t"), locks.try_hold("t") as got:
        assert not got
    with locks.try_hold("t") as got:
        assert got
    assert len(locks) == 0


async def test_an_async_shared_lock_is_not_free_to_hold_alone() -> None:
    locks = ThreadLocks()
    async with locks.ashare("t"), locks.atry_hold("t") as got:
        assert not got
    async with locks.atry_hold("t") as got:
        assert got
    assert len(locks) == 0


@pytest.mark.parametrize("turns", [3])
async def test_a_chat_through_shared_writes_is_the_bare_chat(turns: int) -> None:
    """Whole runs, their writes sharing the lock, store what the bare saver stores."""
    bare, saver = InMemorySaver(), RetainingSaver(InMemorySaver())
    for checkpointer in (bare, saver):
        graph = build_chat_graph(checkpointer)
        for turn in range(turns):
            await graph.ainvoke(chat_turn(turn), thread_config("chat"))
    wrapped = [t.checkpoint["channel_values"] async for t in saver.alist(thread_config("chat"))]
    alone = [t.checkpoint["channel_values"] async for t in bare.alist(thread_config("chat"))]
    assert wrapped == alone


def test_a_shared_write_that_finds_a_stamp_keeps_it() -> None:
    """A write checked as deleting nothing, then taught otherwise by a read in another
    thread before it lands, lands on the stamp and keeps it: nothing is deleted while the
    lock is shared (nor recorded: a resume found so is left unrecorded)."""
    saver = RetainingSaver(InMemorySaver())
    graph = build_chat_graph(saver)
    graph.invoke(chat_turn(0), thread_config("stamped"))
    leaf = write_duration_leaf(saver, "stamped")
    assert leaf is not None
    on_stamp = thread("stamped", leaf)
    with saver._locks.share("stamped"):
        landed = drive(saver._landing("stamped", on_stamp, checkpoint=False), saver._performer)
    assert landed["configurable"]["checkpoint_id"] == leaf
    assert saver.inner.get_tuple(on_stamp) is not None
    assert saver.counters.reclaimed == 0
    landed = drive(saver._landing("stamped", on_stamp, checkpoint=False), saver._performer)
    assert saver.counters.reclaimed == 0 or saver.inner.get_tuple(on_stamp) is None
    assert landed["configurable"]["checkpoint_id"] != leaf  # held alone: reclaimed first
