"""Subprocess entry point for tests/sweep/test_sweep_fleet.py: a fleet of sweepers.

Run as `python tests/sweep_worker.py CONFIG_JSON`; the config names `dsn` (a
Postgres database whose idle threads the test wrote), `processes`, `live` (per
process, the thread ids its runs go on), `turns` (runs per live thread),
`idle_days`, `sweep_limit`, `page_size` and `max_passes`.

This process imports everything once and forks `processes` children. Each
opens its own `AsyncPostgresSaver` and one `RetainingSaver` over it, and at
one wall-clock moment starts, side by side, chat turns on its live threads
and a `RetentionSweeper` (strategy "delete") running passes until a pass
that reached the last thread found nothing left to delete or skip. It
prints, per child, its pass results and the turns that completed, as
`{"exit_codes": [...], "summaries": [...]}`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import traceback
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from retaining_saver import IdleThreadPolicy, RetainingSaver, RetentionSweeper, SweepOutcome
from retaining_saver.testing.graphs import chat_graph, thread, turn

UNSETTLED = {SweepOutcome.DELETED, SweepOutcome.BUSY, SweepOutcome.CHANGED, SweepOutcome.FAILED}


async def _child(config: dict[str, Any], index: int, go: float) -> dict[str, Any]:
    live: list[str] = config["live"][index]
    summary: dict[str, Any] = {"pid": os.getpid(), "handled": [], "turns": Counter(), "errors": []}
    async with AsyncPostgresSaver.from_conn_string(config["dsn"]) as inner:
        saver = RetainingSaver(inner)
        graph = chat_graph(saver)
        policy = IdleThreadPolicy(timedelta(days=config["idle_days"]))
        sweeper = RetentionSweeper(
            saver, policy, sweep_limit=config["sweep_limit"], page_size=config["page_size"]
        )
        await asyncio.sleep(max(0.0, go - time.time()))

        async def runs() -> None:
            for n in range(config["turns"]):
                for thread_id in live:
                    try:
                        await graph.ainvoke(turn(n), thread(thread_id))
                        summary["turns"][thread_id] += 1
                    except Exception:
                        summary["errors"].append(traceback.format_exc())

        async def sweep() -> None:
            for _ in range(config["max_passes"]):
                done = await sweeper.arun_pass()
                summary["handled"] += [[r.thread_id, r.outcome.value] for r in done.results]
                settled = not any(r.outcome in UNSETTLED for r in done.results)
                if done.stopped_after is None and settled:
                    return

        await asyncio.gather(runs(), sweep())
        summary["failed"] = sweeper.counters.failed
        summary["passes"] = sweeper.counters.passes
    return summary


def _run_child(config: dict[str, Any], index: int, go: float, out: Path) -> None:
    try:
        summary = asyncio.run(_child(config, index, go))
        code = 0
    except BaseException:
        summary = {"pid": os.getpid(), "crash": traceback.format_exc()}
        code = 1
    out.write_text(json.dumps(summary))
    os._exit(code)


def main() -> None:
    config = json.loads(sys.argv[1])
    outdir = Path(config["outdir"])
    go = time.time() + 1.0
    pids = []
    for index in range(config["processes"]):
        pid = os.fork()
        if pid == 0:
            _run_child(config, index, go, outdir / f"{index}.json")
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    summaries = [json.loads((outdir / f"{i}.json").read_text()) for i in range(config["processes"])]
    sys.stdout.write(json.dumps({"exit_codes": codes, "summaries": summaries}) + "\n")


if __name__ == "__main__":
    main()
