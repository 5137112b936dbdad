"""Subprocess entry point for tests/reliability/test_load.py: one process of the load.

Run as `python tests/load_worker.py CONFIG_JSON`, where the config names
`kind` (`postgres`: `target` a DSN on 127.0.0.1; `sqlite`: `target` a local
file in WAL mode), `processes`, `threads` (the thread ids), `tasks` (asyncio
tasks per process), `seconds` and `max_ops` (whichever ends first stops a
process), `lockdir` (reservations and summaries) and `seed`.

This process imports everything once (two seconds of CPU that four spawned
interpreters would pay four times over) and forks `processes` load
processes. Each opens its own async saver and connection and one
`RetainingSaver` over it (a gateway's shape); once all are open this process
prints `{"ready": [pids]}`, reads `{"go": t}` from stdin, and every load
process runs its tasks from wall-clock time `t`. Each task loops over random
threads and operations:

- `turn`: a chat turn through `chat_graph` (admission reclaims stamps);
- `stamp`: a duration leaf stamped through the wrapper;
- `engine`: `aenforce_thread_retention` with `store_kit.ENGINE_POLICY`;
- `admit`: an explicit `aadmit`;
- `history`: a `get_state_history` walk, and a pinned read of every id it listed;
- `stats`: `astorage_stats` of the thread.

Writes and deletions of one thread run under a reservation of that thread
(an in-process lock, then an OS file lock in `lockdir`, shared by all the
processes), as the README's deployment requirement asks: no run is in flight
on a thread while another worker admits it or runs the engine on it. Reads
take no reservation, so they race with everything.

At the end it prints `{"exit_codes": [...], "summaries": [...]}`: per process
its operations by kind, errors, invariant violations, reclaims (admission
counters and engine reports), turns per thread, the saver's counters and
every warning `retaining_saver` logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from store_kit import ENGINE_POLICY  # tests/ is this script's directory

from retaining_saver import RetainingSaver, Skip
from retaining_saver.testing import awrite_duration_leaf
from retaining_saver.testing.checks import aintegrity
from retaining_saver.testing.graphs import chat_graph, thread

OPS = ("turn", "stamp", "engine", "admit", "history", "stats")
WEIGHTS = (30, 15, 8, 7, 30, 10)
MAX_ERRORS_KEPT = 50


class Stopped(Exception):
    """The load's time ran out while a task waited for its reservation."""


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def well_formed(said: list[str], next_nodes: tuple[str, ...]) -> bool:
    """Messages come in (X, echo X) pairs; a checkpoint inside a turn, before its reply,
    ends with the input alone."""
    if len(said) % 2:
        if next_nodes != ("reply",):
            return False
        said = said[:-1]
    return all(said[i + 1] == f"echo {said[i]}" for i in range(0, len(said), 2))


class Load:
    def __init__(self, config: dict[str, Any], saver: RetainingSaver) -> None:
        self.config = config
        self.saver = saver
        self.graph = chat_graph(saver)
        self.index = int(config["index"])
        self.threads: list[str] = list(config["threads"])
        self.deadline = 0.0
        self.max_ops = int(config["max_ops"])
        self.ops: Counter[str] = Counter()
        self.errors: list[str] = []
        self.error_count = 0
        self.violations: list[str] = []
        self.turns: Counter[str] = Counter()
        self.engine_reclaims = 0
        self.admit_reclaims = 0
        self.locks = {t: asyncio.Lock() for t in self.threads}
        self.lockdir = Path(config["lockdir"])

    @contextlib.asynccontextmanager
    async def reserved(self, thread_id: str) -> AsyncIterator[None]:
        """This process's lock on the thread, then every process's (a file lock)."""
        async with self.locks[thread_id]:
            fd = os.open(self.lockdir / f"{thread_id}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except OSError as error:
                        if error.errno not in (errno.EAGAIN, errno.EACCES):
                            raise
                        await asyncio.sleep(0.002)
                try:
                    if time.time() >= self.deadline:
                        raise Stopped
                    yield
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def violated(self, what: str) -> None:
        self.violations.append(what)

    async def said(self, thread_id: str) -> list[str]:
        said: list[str] = (await self.graph.aget_state(thread(thread_id))).values.get("said", [])
        return said

    async def turn(self, thread_id: str, tag: str, rng: random.Random) -> None:
        async with self.reserved(thread_id):
            before = await self.said(thread_id)
            result = await self.graph.ainvoke({"said": [tag]}, thread(thread_id))
            self.turns[thread_id] += 1
        expected = [*before, tag, f"echo {tag}"]
        if result["said"] != expected:
            got = len(result["said"])
            self.violated(f"turn {tag} on {thread_id}: {got} messages, not {len(expected)}")

    async def stamp(self, thread_id: str, tag: str, rng: random.Random) -> None:
        async with self.reserved(thread_id):
            await awrite_duration_leaf(self.saver, thread_id, tag, 0.5)

    async def engine(self, thread_id: str, tag: str, rng: random.Random) -> None:
        async with self.reserved(thread_id):
            before = await self.said(thread_id)
            report = await self.saver.aenforce_thread_retention(thread_id, ENGINE_POLICY)
            self.engine_reclaims += len(report.deleted)
            found = await aintegrity(self.saver, thread_id)
            after = await self.said(thread_id)
        if not found.clean:
            self.violated(f"engine on {thread_id}: {found}")
        if after != before:
            self.violated(f"engine on {thread_id} changed the state: {len(before)}->{len(after)}")

    async def admit(self, thread_id: str, tag: str, rng: random.Random) -> None:
        async with self.reserved(thread_id):
            result = await self.saver.aadmit(thread_id)
            self.admit_reclaims += len(result.reclaimed)
        if result.skipped is Skip.FAILED:
            self.violated(f"admit on {thread_id} failed")

    async def history(self, thread_id: str, tag: str, rng: random.Random) -> None:
        limit = rng.randint(1, 8)
        seen = [s async for s in self.graph.aget_state_history(thread(thread_id), limit=limit)]
        for snapshot in seen:
            if not well_formed(snapshot.values.get("said", []), tuple(snapshot.next)):
                self.violated(f"history of {thread_id}: malformed {snapshot.values}")
            # A listed id always answers, even once reclaimed (its record names its clone).
            if await self.saver.aget_tuple(snapshot.config) is None:
                cid = snapshot.config["configurable"]["checkpoint_id"]
                self.violated(f"pinned read of listed {cid} on {thread_id} found nothing")

    async def stats(self, thread_id: str, tag: str, rng: random.Random) -> None:
        found = await self.saver.astorage_stats(thread_id)
        if found.rows <= 0:
            self.violated(f"stats of {thread_id}: no rows")

    async def worker(self, task: int) -> None:
        rng = random.Random(f"{self.config['seed']}-{self.index}-{task}")
        n = 0
        while time.time() < self.deadline and sum(self.ops.values()) < self.max_ops:
            thread_id = rng.choice(self.threads)
            op = rng.choices(OPS, WEIGHTS)[0]
            tag = f"p{self.index}t{task}n{n}"
            n += 1
            try:
                await getattr(self, op)(thread_id, tag, rng)
            except Stopped:
                return
            except Exception as error:
                self.error_count += 1
                if len(self.errors) < MAX_ERRORS_KEPT:
                    self.errors.append(f"{op} {thread_id}: {error!r}")
            self.ops[op] += 1

    async def run(self, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.time()))
        self.deadline = time.time() + float(self.config["seconds"])
        await asyncio.gather(*(self.worker(t) for t in range(int(self.config["tasks"]))))


@contextlib.asynccontextmanager
async def opened(kind: str, target: str) -> AsyncIterator[Any]:
    if kind == "postgres":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(target) as pg_saver:
            yield pg_saver  # the coordinator ran setup()
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(target) as sqlite_saver:
        yield sqlite_saver


async def main(config: dict[str, Any], ready_fd: int, go_fd: int, out: Path) -> None:
    """One load process: open, say ready, wait for the start instant, load, report."""
    captured = _Captured()
    logging.getLogger("retaining_saver").addHandler(captured)
    async with opened(config["kind"], config["target"]) as inner:
        saver = RetainingSaver(inner, strict=True)
        load = Load(config, saver)
        os.write(ready_fd, b"r")
        loop = asyncio.get_running_loop()
        at = float(await loop.run_in_executor(None, os.read, go_fd, 64))
        started = time.time()
        await load.run(at)
        summary = {
            "index": load.index,
            "pid": os.getpid(),
            "seconds": round(time.time() - started, 2),
            "ops": dict(load.ops),
            "errors": load.errors,
            "error_count": load.error_count,
            "violations": load.violations,
            "turns": dict(load.turns),
            "engine_reclaims": load.engine_reclaims,
            "admit_reclaims": load.admit_reclaims,
            "counters": dataclasses.asdict(saver.counters),
            "warnings": captured.messages[:MAX_ERRORS_KEPT],
        }
    out.write_text(json.dumps(summary))


def serve(config: dict[str, Any]) -> None:
    """Fork the load processes (imports are paid once, here), start them together,
    and print their summaries."""
    assert threading.active_count() == 1, threading.enumerate()  # fork copies one thread
    ready_r, ready_w = os.pipe()
    children: list[tuple[int, int, Path]] = []
    for index in range(int(config["processes"])):
        go_r, go_w = os.pipe()
        out = Path(config["lockdir"]) / f"summary-{index}.json"
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(ready_r)
                asyncio.run(main({**config, "index": index}, ready_w, go_r, out))
                code = 0
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(go_r)
        children.append((pid, go_w, out))
    os.close(ready_w)
    got = b""
    while len(got) < len(children):
        chunk = os.read(ready_r, 64)
        if not chunk:
            break  # a child died before it was ready; its exit status says so below
        got += chunk
    if len(got) == len(children):
        _send({"ready": [pid for pid, _, _ in children]})
        at = json.loads(sys.stdin.readline())["go"]
        for _, go_w, _ in children:
            os.write(go_w, str(at).encode())
    for _, go_w, _ in children:
        os.close(go_w)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid, _, _ in children]
    summaries = [json.loads(out.read_text()) if out.exists() else None for _, _, out in children]
    _send({"exit_codes": codes, "summaries": summaries})


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
