"""Two processes on one Postgres thread, both with `retention=` on (issue #21).

Each worker process (tests/bounding_worker.py) runs chat turns on the thread
through `RetainingSaver(inner, retention=RetentionPolicy(history_keep_runs=2,
...))`, each run after winning the thread's reservation (an advisory lock held
for the whole run, as the README's deployment requirement says), so their
runs interleave and each process's admissions run history passes over runs the
other wrote. Then: no run failed and nothing was logged, no history pass
failed, no row dangles, and the thread reads as a twin thread on the bare
saver, written with the same turns in the same order, reads where its newest
checkpoints are: the same final state, every kept checkpoint the same. The
thread holds about the horizon's runs, where the twin holds every run.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bounding_kit import runs_on_head_line
from bounding_worker import RESERVATION_KEY
from psycopg import AsyncConnection
from savers import open_async_at

from retaining_saver._rooms import slack_runs
from retaining_saver.testing.checks import aintegrity
from retaining_saver.testing.graphs import chat_graph, thread, turn
from retaining_saver.testing.views import visible_state

PROCESSES = 2
TURNS = 12  # per process
KEEP_RUNS = 2
KEPT, TWIN = "kept", "twin"
WORKER = Path(__file__).parents[1] / "bounding_worker.py"
REPO = WORKER.parent.parent
TIMEOUT = 120.0
# Both workers wait on the reservation: a lock request not granted yet, on its key.
WAITING_SQL = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s"
)


async def _worker(dsn: str, worker: int, stderr: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    args = [dsn, KEPT, str(worker), str(TURNS), str(KEEP_RUNS)]
    with stderr.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), *args, stdout=asyncio.subprocess.PIPE, stderr=err, env=env
        )
    out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode == 0 and out, stderr.read_text(errors="replace")
    reply: dict[str, Any] = json.loads(out)
    return reply


async def test_two_processes_bound_one_postgres_thread(pg_dsn: str, tmp_path: Path) -> None:
    async with open_async_at("postgres", pg_dsn) as bare:
        async with await AsyncConnection.connect(pg_dsn, autocommit=True) as held:
            # The coordinator holds the reservation until both workers wait for it.
            await held.execute("SELECT pg_advisory_lock(%s)", (RESERVATION_KEY,))
            workers = asyncio.gather(
                *(_worker(pg_dsn, n, tmp_path / f"worker-{n}.stderr") for n in range(PROCESSES))
            )
            deadline = time.monotonic() + TIMEOUT
            while (await (await held.execute(WAITING_SQL, (RESERVATION_KEY,))).fetchone()) != (
                PROCESSES,
            ):
                assert time.monotonic() < deadline and not workers.done(), "workers never waited"
                await asyncio.sleep(0.05)
            await held.execute("SELECT pg_advisory_unlock(%s)", (RESERVATION_KEY,))
            replies = await workers
        assert [reply["error"] for reply in replies] == [None] * PROCESSES
        assert [reply["logs"] for reply in replies] == [[]] * PROCESSES
        counters = [reply["counters"] for reply in replies]
        assert [c["history_failed"] for c in counters] == [0] * PROCESSES
        assert all(c["history_reclaimed"] > 0 for c in counters), counters
        done = sorted((t for reply in replies for t in reply["turns"]), key=lambda t: t["won"])
        assert len(done) == PROCESSES * TURNS
        # The runs interleaved: the thread changed hands between the processes (the
        # reservation's waiters are served in turn).
        owners = [t["turn"] // 1000 for t in done]
        switches = sum(a != b for a, b in itertools.pairwise(owners))
        assert switches >= TURNS // 2, owners

        twin_graph = chat_graph(bare)
        for t in done:
            await twin_graph.ainvoke(turn(t["turn"]), thread(TWIN))
        assert (await aintegrity(bare, KEPT)).clean
        kept = [s async for s in twin_graph.aget_state_history(thread(KEPT))]
        twin = [s async for s in twin_graph.aget_state_history(thread(TWIN))]
    assert visible_state(kept[0]) == visible_state(twin[0])
    assert [visible_state(s) for s in kept] == [visible_state(s) for s in twin[: len(kept)]]
    # Each process counts only its own admissions (README): between two passes of one, the
    # other may add as many runs as it.
    bound = KEEP_RUNS + PROCESSES * (slack_runs(KEEP_RUNS) + 1)
    assert runs_on_head_line(kept) <= bound < runs_on_head_line(twin) == PROCESSES * TURNS
