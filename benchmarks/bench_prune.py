"""`aprune(strategy="keep_latest")` over many threads on Postgres: ours against upstream's.

    python benchmarks/bench_prune.py [--threads 1000] [--turns 10] [--rounds 2]

A template database holds `--threads` copies of a chat thread written by a
real graph (`--turns` turns, then a regenerate from the second turn, so each
thread has a superseded branch). Each round copies it twice
(`CREATE DATABASE ... TEMPLATE`): upstream's `AsyncPostgresSaver.aprune` runs
on one copy and `RetainingSaver.aprune` on the other, in an order that flips
every round. Printed per side: threads per second (median of the rounds),
Python's peak traced memory during the call, and the rows left per table,
with integrity checked on a sample of threads. The ratio is of rates measured
in the same run; the absolute rates are context only.

Then a DeltaChannel chat, copied to `--threads // 10` threads: upstream
refuses the batch (it cannot rebuild the values it would cut), ours prunes it
and each head loads the same values.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import _common
import psycopg

from retaining_saver import RetainingSaver
from retaining_saver.testing.checks import aintegrity
from retaining_saver.testing.graphs import chat_graph, thread, turn

TEMPLATE = "template"
TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


async def build_template(dsn: str, threads: int, turns: int, flavor: str) -> None:
    """One thread written by the graph, then copied row for row to `threads` ids."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        graph = chat_graph(saver, flavor)  # type: ignore[arg-type]
        for i in range(turns):
            await graph.ainvoke(turn(i), thread(TEMPLATE))
        second = [s async for s in graph.aget_state_history(thread(TEMPLATE))][-5]
        await graph.ainvoke(turn(100), second.config)  # a regenerate: a superseded branch
        await RetainingSaver(saver).acreate_retention_indexes()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            columns = _common.pg_columns(conn, table)
            rest = ", ".join(c for c in columns if c != "thread_id")
            conn.execute(
                f"INSERT INTO {table} (thread_id, {rest}) "
                f"SELECT 't' || lpad(g::text, 6, '0'), {rest} FROM {table}, "
                "generate_series(1, %s) AS g WHERE thread_id = %s",
                (threads, TEMPLATE),
            )
        for table in TABLES:
            conn.execute(f"DELETE FROM {table} WHERE thread_id = %s", (TEMPLATE,))
        conn.execute("VACUUM ANALYZE")


def thread_ids(count: int) -> list[str]:
    return [f"t{g:06d}" for g in range(1, count + 1)]


def rows_left(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        found = {}
        for table in TABLES:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            found[table] = int(row[0]) if row else 0
        return found


async def measured(call: Callable[[], Awaitable[Any]], *, memory: bool) -> float:
    """Seconds one call takes; with `memory`, the peak of Python's traced memory in MiB
    instead (tracing slows Python down, so the two are never measured together)."""
    if memory:
        tracemalloc.start()
    start = time.perf_counter()
    try:
        await call()
        if memory:
            return tracemalloc.get_traced_memory()[1] / 2**20
        return time.perf_counter() - start
    finally:
        if memory:
            tracemalloc.stop()


async def prune_once(
    dsn: str, ids: list[str], ours: bool, graph: Any = None, *, memory: bool = False
) -> float:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(dsn) as inner:
        if ours:
            saver = RetainingSaver(inner, admission="off")
            return await measured(lambda: saver.aprune(ids, delta_graph=graph), memory=memory)
        return await measured(lambda: inner.aprune(ids), memory=memory)


async def sample_integrity(dsn: str, ids: list[str]) -> bool:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(dsn) as inner:
        for thread_id in ids[:: max(1, len(ids) // 20)]:
            if not (await aintegrity(inner, thread_id)).clean:
                return False
    return True


async def compare(server: str, threads: int, turns: int, rounds: int) -> dict[str, Any]:
    """Time both sides over `rounds` copies of the template; print and return the figures."""
    template = _common.create_database(server)
    try:
        await build_template(template, threads, turns, "full")
        before = rows_left(template)
        ids = thread_ids(threads)
        seconds: dict[str, list[float]] = {"upstream": [], "retaining-saver": []}
        peaks: dict[str, float] = {}
        left: dict[str, dict[str, int]] = {}
        clean: dict[str, bool] = {}
        # The last round traces memory instead of timing.
        for index in range(rounds + 1):
            sides = ["upstream", "retaining-saver"]
            for side in sides if index % 2 == 0 else sides[::-1]:
                dsn = _common.copy_database(server, template)
                try:
                    ours, memory = side != "upstream", index == rounds
                    found = await prune_once(dsn, ids, ours, memory=memory)
                    if memory:
                        peaks[side] = found
                    else:
                        seconds[side].append(found)
                    left[side] = rows_left(dsn)
                    clean[side] = await sample_integrity(dsn, ids)
                finally:
                    _common.drop_database(server, dsn)
        rows = []
        rates = {}
        for side, runs in seconds.items():
            rates[side] = threads / statistics.median(runs)
            peak = peaks[side]
            tables = " / ".join(f"{left[side][t]}" for t in TABLES)
            rows.append([side, f"{rates[side]:.0f}", f"{peak:.1f}", tables, clean[side]])
        rows.append(["(before)", "", "", " / ".join(f"{before[t]}" for t in TABLES), ""])
        _common.print_table(
            f"aprune(keep_latest) over {threads} threads of {turns} turns + a regenerate, "
            f"{rounds} rounds each",
            [
                "side",
                "threads/s (median)",
                "peak MiB (traced, last round)",
                "rows left: checkpoints / blobs / writes",
                "integrity",
            ],
            rows,
        )
        ratio = rates["retaining-saver"] / rates["upstream"]
        print(f"retaining-saver / upstream, threads per second: {ratio:.2f}x (goal >= 1.0x)")
        return {
            "threads": threads,
            "turns": turns,
            "rounds": rounds,
            "seconds": seconds,
            "threads_per_second": rates,
            "ratio": ratio,
            "peak_mib": peaks,
            "rows_before": before,
            "rows_left": left,
            "integrity_clean": clean,
        }
    finally:
        _common.drop_database(server, template)


async def delta_threads(server: str, threads: int, turns: int) -> dict[str, Any]:
    """Upstream against ours on DeltaChannel threads; print and return what each did."""
    template = _common.create_database(server)
    try:
        await build_template(template, threads, turns, "delta")
        ids = thread_ids(threads)
        dsn = _common.copy_database(server, template)
        try:
            try:
                await prune_once(dsn, ids, ours=False)
                upstream = "pruned"
                print("upstream pruned the DeltaChannel threads")
            except NotImplementedError as error:
                upstream = "refused"
                print(f"upstream on {threads} DeltaChannel threads: refused ({str(error)[:60]}...)")
        finally:
            _common.drop_database(server, dsn)
        dsn = _common.copy_database(server, template)
        try:
            graph = chat_graph(None, "delta")
            heads_before = await head_values(dsn, ids)
            seconds = await prune_once(dsn, ids, ours=True, graph=graph)
            same = await head_values(dsn, ids) == heads_before
            left = rows_left(dsn)
            clean = await sample_integrity(dsn, ids)
            print(
                f"retaining-saver on {threads} DeltaChannel threads: {threads / seconds:.0f} "
                f"threads/s, {left['checkpoints']} checkpoints left, "
                f"every head's values unchanged: {same}, integrity: {clean}"
            )
            return {
                "threads": threads,
                "upstream": upstream,
                "checkpoints_left": left["checkpoints"],
                "heads_unchanged": same,
                "integrity_clean": clean,
            }
        finally:
            _common.drop_database(server, dsn)
    finally:
        _common.drop_database(server, template)


async def head_values(dsn: str, ids: list[str]) -> list[Any]:
    """Each thread's head values, as the DeltaChannel graph loads them."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(dsn) as inner:
        graph = chat_graph(inner, "delta")
        return [(await graph.aget_state(thread(t))).values for t in ids]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    server = _common.required_pg_server()
    await compare(server, args.threads, args.turns, args.rounds)
    await delta_threads(server, max(1, args.threads // 10), args.turns)


if __name__ == "__main__":
    asyncio.run(main())
