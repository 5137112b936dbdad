"""Subprocess entry point for tests/reliability/test_bounding_processes.py: chat turns on one
Postgres thread through `RetainingSaver(inner, retention=...)`, each run after a reservation.

Run as `python tests/bounding_worker.py DSN THREAD_ID WORKER TURNS KEEP_RUNS`:
WORKER names this process's turns (turn `WORKER * 1000 + i`), KEEP_RUNS is the
policy's `history_keep_runs`. The coordinator holds the reservation until both
processes wait for it, so that their runs interleave from the first.

The reservation is the deployment requirement's: before each run the worker
wins the thread with a Postgres advisory lock on a connection of its own,
held until the run has returned, so that no run is in flight on the thread
while another process admits it. Each run is a real `chat_graph` turn whose
first read is the automatic admission (the stamps, then the history pass).

Prints one JSON line: per turn its label and the wall-clock time its reservation
was won (the coordinator replays the turns in that order on a twin), any
exception's repr, the saver's counters and every warning `retaining_saver` logged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
import time
from datetime import timedelta
from logging.handlers import BufferingHandler
from typing import Any

from psycopg import AsyncConnection

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver.testing.graphs import chat_graph, thread, turn

RESERVATION_KEY = 21  # the advisory lock that reserves the test's one thread


async def main(dsn: str, thread_id: str, worker: int, turns: int, keep: int) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    captured = BufferingHandler(10_000)  # flushed (emptied) only at that many
    captured.setLevel(logging.WARNING)
    logging.getLogger("retaining_saver").addHandler(captured)
    policy = RetentionPolicy(history_keep_runs=keep, history_min_age=timedelta(0))
    done: list[dict[str, Any]] = []
    error = None
    async with (
        AsyncPostgresSaver.from_conn_string(dsn) as inner,
        await AsyncConnection.connect(dsn, autocommit=True) as reservations,
    ):
        saver = RetainingSaver(inner, retention=policy)
        graph = chat_graph(saver)
        try:
            for i in range(turns):
                label = worker * 1000 + i
                await reservations.execute("SELECT pg_advisory_lock(%s)", (RESERVATION_KEY,))
                try:
                    won = time.time()
                    await graph.ainvoke(turn(label), thread(thread_id))
                finally:
                    await reservations.execute("SELECT pg_advisory_unlock(%s)", (RESERVATION_KEY,))
                done.append({"turn": label, "won": won})
        except Exception as failure:  # reported, and failed on, by the coordinator
            error = repr(failure)
        counters = dataclasses.asdict(saver.counters)
    logs = [record.getMessage() for record in captured.buffer]
    message = {"turns": done, "error": error, "counters": counters, "logs": logs}
    sys.stdout.write(json.dumps(message) + "\n")


if __name__ == "__main__":
    dsn, thread_id, worker, turns, keep = sys.argv[1:6]
    asyncio.run(main(dsn, thread_id, int(worker), int(turns), int(keep)))
