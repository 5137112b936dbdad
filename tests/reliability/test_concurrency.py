"""Admission races: two OS processes x 10 asyncio tasks admit one thread, 200 times.

The coordinator prepares a thread with real `chat_graph` runs on the bare saver,
then, round after round, stamps ONE duration leaf on the head and releases both
worker processes (tests/concurrency_worker.py) at the same wall-clock instant;
each runs 10 concurrent `aadmit` calls on its own saver(s) and connection(s).
Every round must delete its leaf exactly once, every call must hand back the
run checkpoint the leaf cloned as its head, nothing may fail, and afterwards
the thread must hold exactly the checkpoints it held before, with the same
state, an intact lineage and no orphan rows.

`shared` is the gateway shape (one `RetainingSaver` per process, its 10 tasks
serialised by the per-thread lock, the two processes racing); `per-task` gives
every task its own saver and connection, so 20 connections race at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from savers import open_async_at

from retaining_saver import Skip
from retaining_saver.testing import awrite_duration_leaf
from retaining_saver.testing.checks import aintegrity, awalk
from retaining_saver.testing.graphs import chat_graph, thread, turn

PROCESSES = 2
TASKS = 10
ROUNDS = 10
ADMISSIONS = PROCESSES * TASKS * ROUNDS
TURNS = 3
THREAD = "raced"
WORKER = Path(__file__).parents[1] / "concurrency_worker.py"  # tests/, beside the kits it imports
REPO = WORKER.parent.parent
REPLY_TIMEOUT = 30.0
LEAD_SECONDS = 0.05  # how far ahead of "now" a round's start instant is set

# A call that did not delete the leaf saw either the run checkpoint as head
# (the leaf was already gone) or the leaf, and lost the guarded deletion.
LOSER_SKIPS = {Skip.NOT_A_DURATION_LEAF.value, Skip.PRECONDITION_CHANGED.value}

SAVERS = ("shared", "per-task")


@asynccontextmanager
async def bare_postgres(dsn: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    async with open_async_at("postgres", dsn) as saver:
        yield saver


@asynccontextmanager
async def bare_sqlite(path: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    async with open_async_at("sqlite", path) as saver:
        await saver.setup()  # type: ignore[attr-defined]
        yield saver


class Worker:
    """One worker process, spoken to in JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process, stderr: Path) -> None:
        self.proc = proc
        self.stderr = stderr

    @classmethod
    async def start(cls, args: list[str], stderr: Path) -> Worker:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        with stderr.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(WORKER),
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                cwd=str(REPO),
                env=env,
            )
        return cls(proc, stderr)

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        await self.proc.stdin.drain()

    async def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), REPLY_TIMEOUT)
        except TimeoutError:
            line = b""
        if not line:
            raise AssertionError(
                f"worker {self.proc.pid} sent nothing (exit {self.proc.returncode}); stderr:\n"
                + self.stderr.read_text(errors="replace")
            )
        reply: dict[str, Any] = json.loads(line)
        return reply

    async def close(self) -> None:
        if self.proc.returncode is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def ids_of(saver: BaseCheckpointSaver[Any]) -> set[str]:
    return {t.checkpoint["id"] async for t in saver.alist(thread(THREAD))}


async def race(
    kind: str,
    target: str,
    open_bare: AbstractAsyncContextManager[BaseCheckpointSaver[Any]],
    savers: str,
    tmp_path: Path,
) -> Counter[str]:
    """Run the rounds; assert per round and at the end; return the outcome counts."""
    outcomes: Counter[str] = Counter()
    async with open_bare as bare:
        graph = chat_graph(bare)
        for i in range(TURNS):
            await graph.ainvoke(turn(i), thread(THREAD))
        before = (await graph.aget_state(thread(THREAD))).values
        ids_before = await ids_of(bare)
        head = await bare.aget_tuple(thread(THREAD))
        assert head is not None
        head_id = head.checkpoint["id"]

        args = [kind, target, THREAD, str(TASKS), savers]
        workers = [
            await Worker.start(args, tmp_path / f"worker-{n}.stderr") for n in range(PROCESSES)
        ]
        try:
            for worker in workers:
                assert "ready" in await worker.receive()
            overlapped = 0
            for r in range(ROUNDS):
                leaf_id = await awrite_duration_leaf(bare, THREAD, f"run-{r}", 0.5 + r)
                assert leaf_id is not None
                at = time.time() + LEAD_SECONDS
                for worker in workers:
                    await worker.send({"round": r, "at": at})
                replies = [await worker.receive() for worker in workers]
                assert [reply["round"] for reply in replies] == [r] * PROCESSES
                assert [reply["logs"] for reply in replies] == [[]] * PROCESSES
                calls = [call for reply in replies for call in reply["calls"]]
                assert len(calls) == PROCESSES * TASKS
                assert [c["error"] for c in calls] == [None] * len(calls)
                reclaimed = [i for c in calls for i in c["reclaimed"]]
                assert reclaimed == [leaf_id], f"round {r}: leaf {leaf_id} deleted as {reclaimed}"
                for call in calls:
                    outcome = "reclaimed" if call["reclaimed"] else call["skipped"]
                    assert outcome == "reclaimed" or outcome in LOSER_SKIPS, call
                    assert (call["skipped"] is None) == bool(call["reclaimed"]), call
                    assert call["head"] == head_id, call
                    outcomes[outcome] += 1
                windows = [
                    (min(c["start"] for c in reply["calls"]), max(c["end"] for c in reply["calls"]))
                    for reply in replies
                ]
                overlapped += max(w[0] for w in windows) < min(w[1] for w in windows)
                assert await bare.aget_tuple(thread(THREAD, leaf_id)) is None
                now = await bare.aget_tuple(thread(THREAD))
                assert now is not None and now.checkpoint["id"] == head_id
            for worker in workers:
                await worker.send({"stop": True})
            counters = [c for worker in workers for c in (await worker.receive())["counters"]]
        finally:
            for worker in workers:
                await worker.close()
        assert [worker.proc.returncode for worker in workers] == [0] * PROCESSES

        assert sum(c["attempted"] for c in counters) == ADMISSIONS
        assert sum(c["reclaimed"] for c in counters) == ROUNDS
        assert sum(c["failed"] for c in counters) == 0
        skipped: Counter[str] = Counter()
        for c in counters:
            skipped.update(c["skipped"])
        assert skipped == Counter({k: v for k, v in outcomes.items() if k != "reclaimed"})
        # The processes really raced: their admission windows overlapped in most rounds.
        assert overlapped * 2 > ROUNDS, f"windows overlapped in {overlapped}/{ROUNDS} rounds"

        assert await ids_of(bare) == ids_before
        assert (await aintegrity(bare, THREAD)).clean
        assert (await graph.aget_state(thread(THREAD))).values == before
        lineage = await awalk(bare, thread(THREAD))
        assert lineage[0].checkpoint["id"] == head_id
        assert {t.checkpoint["id"] for t in lineage} <= ids_before
    print(f"\n{kind}/{savers}: {dict(outcomes)}, overlapped in {overlapped}/{ROUNDS} rounds")
    return outcomes


@pytest.mark.parametrize("savers", SAVERS)
async def test_concurrent_admission_postgres(pg_dsn: str, savers: str, tmp_path: Path) -> None:
    outcomes = await race("postgres", pg_dsn, bare_postgres(pg_dsn), savers, tmp_path)
    assert outcomes.total() == ADMISSIONS
    assert outcomes["reclaimed"] == ROUNDS


@pytest.mark.parametrize("savers", SAVERS)
async def test_concurrent_admission_sqlite(sqlite_path: str, savers: str, tmp_path: Path) -> None:
    outcomes = await race("sqlite", sqlite_path, bare_sqlite(sqlite_path), savers, tmp_path)
    assert outcomes.total() == ADMISSIONS
    assert outcomes["reclaimed"] == ROUNDS
