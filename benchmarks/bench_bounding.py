"""Bounded storage with no job to run: `RetainingSaver(inner, retention=...)` (issue #21).

    python benchmarks/bench_bounding.py [--backends sqlite,postgres] [--turns 50,100,200]
                                        [--reps N] [--skip-storage] [--skip-admission]
                                        [--freeze] [--fleet N]

Storage: the three-node chat of bench_storage.py (about 6.5 KB of new text a
turn) written through `RetainingSaver(inner, retention=RetentionPolicy(
history_keep_runs=10, history_min_age=timedelta(0)))`, with no engine call, on
SQLite and Postgres. It prints rows and bytes per thread at each turn count,
and how bytes grow from the shortest thread to the longest against how the
live state (the head checkpoint, serialized) grows. Goal: within 1.2x.

Admission cost (async, bench_admission.py's side-by-side machinery, ratios of
medians; absolute times are context only), on every backend given:
(a) below the horizon: a thread of 5 runs under a horizon of 10; the wrapped
    admission read vs the bare read. Goal <= 1.05x.
(b) at the horizon: a thread held at 10 runs; before each repetition (untimed)
    one more run is written on the bare saver, so the thread grows a run per
    admission. The pass is amortised: a thread may hold `slack_runs(10)` = 5
    runs beyond the horizon, so one admission in 6 runs a pass, which deletes
    the 6 runs beyond the horizon in one transaction, and the other 5 skip it
    without a read. An async admission read answers before its pass, which
    runs after it under the thread's lock (`_bounding`): the timed read is the
    read alone, and each repetition first waits, untimed, for the pass the last
    one left (`asettle_history`), so that it never runs beside a timed call.
    Its cost is the run's: (c). Vs the bare read. Goal <= 1.5x.
(c) a whole run of the chat on a thread at the horizon, wrapped (one admission
    in 6 runs the pass) vs bare, side by side on two threads, as many repetitions
    as the others (a mean over fewer windows of 6 moves by a tenth from run to
    run). The wrapped run is timed until the pass its admission left has finished
    too. Goal <= 1.1x.

(c) sync: (c) on the store's sync saver (SqliteSaver, PostgresSaver: `invoke`, on a fresh
    pair of threads), whose admission runs its pass before it answers (only an async
    admission read leaves it until after), and whose runs LangGraph stores from a
    thread of its own. Ratio of means. Goal: (c)'s.

(b) and (c) print two rows each: the ratio of medians (the typical admission,
one that skips the pass) and the ratio of means (what admissions cost on
average, the passes included: the amortised figure). The mean row's paired
column is over windows of 6 consecutive repetitions (one pass each).
(e) a run whose one node awaits 20 ms (a model call), at a horizon of 4 runs:
    the median run whose admission ran a pass over the median of the others
    (the pass runs while the node does). No goal: context for (c).
(f) (c) for an `add_messages` chat (`build_chat_graph`) 100 turns in: every
    checkpoint holds the whole conversation, which a pass's lineage load reads
    (on SQLite, inside each payload, once per checkpoint: `_sqlite_lineage`) and
    a run reads once. Ratio of means, passes included. Goal: (c)'s. On a SQLite
    that zeroes deleted content (`PRAGMA secure_delete`, on in Debian's build), a
    pass also overwrites every page its deletes free: (f) is measured again with
    the setting off on the saver's connection, on a fresh pair of threads, then
    set back.
(g) (f) for the storage benchmark's chat itself (`chat_graph` with
    `bench_storage.user_turn`: about 6.5 KB of new text a turn, all of it kept in
    the state), 50 turns in, with a quarter of the repetitions (at least 30):
    each run writes the whole state four times, a few MB by the end. The chat
    the issue's goal names. Measured again with `secure_delete = 0` as (f) is.
(h) (c)'s chat under the README's example policy, `history_min_age` of an hour,
    300 turns in: every run is younger than the TTL, so no pass deletes and
    admissions skip it; what each run costs while a thread waits for its TTL
    (on SQLite, each put tells the backend the node it wrote, `_sqlite_lineage`,
    and hundreds wait for the first pass). Ratio of means. Goal: (c)'s.
(d) a legacy thread of 10,000 checkpoints (runs of 4, written straight to the
    store): how many `aadmit` calls bring it to the horizon, each capped at 64
    deletions, and the slowest of them over their median. Goal <= 5x. Twice: as
    the process runs, where one admission of the stretch may pay a full cyclic
    garbage collection of the whole process's heap (tens of ms here, whatever the
    thread), and on a second such thread with the process's objects frozen first
    (`gc.freeze()`, as long-running servers do), where a collection scans only
    what the admissions allocate. Each stretch prints the full collections it
    paid, beside one `gc.collect()` of the process's heap timed before it.

(c), (c) sync, (f), (g) and (h) also print where the excess comes from: the median of
the wrapped runs whose admission ran a pass, and of the others, each over the bare
runs' median (`pass_split`). A run's pass is the mean's excess over the others' (one
run in 6 pays it), wherever the pass runs: see README, *As threads are used*.

(c), (f), (g) and (h) print the full cyclic collections each side's timed runs paid: one of
the whole heap (the imports' objects) costs tens of ms, several runs' worth, on
whichever side it falls. With `--freeze` the process's objects are frozen before
their timed runs, so that a collection scans only what the runs keep alive.

The runs themselves, and how a figure is read from their times, are in
`_bounding_runs.py`.

The admission figures' store first holds `--fleet` (200) idle threads of 5 runs of the
chat, written by the bare saver, as a deployment's store holds many threads
(`write_fleet`): on Postgres, with only the timed threads in the tables, a generic
plan for a statement on one thread expects a large share of each table, so the
wrapped thread's small statements were planned anew at every execution. (b), (c),
(f), (g) and (h) grow the tables; on Postgres each VACUUMs and ANALYZEs a table
(untimed) once autovacuum would with its defaults (`_bench_stores.autovacuum_when_due`:
a fifth of its rows dead, a tenth changed since its last ANALYZE), as a server's
autovacuum keeps a growing table's statistics and clears what the passes delete
(`side_by_side(..., growing=)`; the server here runs none).

Nothing is asserted: the goals are printed next to the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Sequence
from typing import Any

import _bench_stores as stores
import _common
import bench_admission as admission
import bench_storage as storage
from _bounding_runs import (
    HORIZON,
    MESSAGES,
    RETENTION,
    STATE,
    UNDER_TTL,
    both,
    chat_figure,
    frozen_label,
    model_figure,
    sync_run_figure,
    unzeroed_chat_figure,
    whole_runs,
)
from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver import RetainingSaver, StorageStats
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import chat_graph, thread, turn

GROWTH_GOAL = 1.2

FLEET = 200
"""Idle threads the admission figures' store holds beside the timed ones (`--fleet`)."""

FLEET_RUNS = 5


# Storage


def storage_rows(name: str, inner: BaseCheckpointSaver[Any], turns: Sequence[int]) -> list[Any]:
    """Per turn count: a fresh thread written through the wrapper; its rows and bytes."""
    saver = RetainingSaver(inner, retention=RETENTION)
    rows: list[list[Any]] = []
    found: dict[int, tuple[int, int]] = {}
    for count in turns:
        thread_id = f"bounded-{count}"
        storage.build_chat(saver, thread_id, count)
        stats = saver.storage_stats(thread_id)
        live = storage._newest_row_bytes(saver, thread_id)
        clean = integrity(inner, thread_id).clean
        found[count] = (stats.bytes, live)
        rows.append([name, count, stats.rows, f"{stats.bytes:,}", f"{live:,}", clean])
    (low, low_live), (high, high_live) = found[min(turns)], found[max(turns)]
    grows, live_grows = high / low, high_live / low_live
    meets = "yes" if grows <= GROWTH_GOAL * live_grows else "NO"
    growth = [name, f"{grows:.2f}", f"{live_grows:.2f}", f"{grows / live_grows:.2f}", meets]
    return [rows, growth, saver.counters]


def run_storage(kinds: Sequence[str], turns: Sequence[int]) -> None:
    rows: list[Any] = []
    growth: list[Any] = []
    for kind in kinds:
        if kind == "sqlite":
            with (
                tempfile.TemporaryDirectory() as directory,
                storage.open_sqlite(directory) as (
                    inner,
                    _,
                ),
            ):
                more, grown, counters = storage_rows(kind, inner, turns)
        elif kind == "postgres":
            server = _common.pg_server_dsn()
            if (reason := _common.pg_unreachable(server)) is not None:
                print(f"postgres skipped: {reason}")
                continue
            dsn = _common.create_database(server)
            try:
                with storage.open_postgres(dsn) as (inner, _):
                    more, grown, counters = storage_rows(kind, inner, turns)
            finally:
                _common.drop_database(server, dsn)
        else:
            continue
        rows += more
        growth.append(grown)
        print(f"{kind}: {counters}")
    _common.print_table(
        f"Rows and bytes per thread, the chat through retention=(history_keep_runs={HORIZON}), "
        "no engine call",
        ["backend", "turns", "rows", "bytes", "live state B", "integrity clean"],
        rows,
    )
    _common.print_table(
        f"Growth from {min(turns)} to {max(turns)} turns",
        ["backend", "bytes ratio", "live state ratio", "bytes / live", f"<= {GROWTH_GOAL}x"],
        growth,
    )


# Admission cost


async def write_fleet(inner: BaseCheckpointSaver[Any], threads: int) -> None:
    """`threads` idle threads of `FLEET_RUNS` runs each of the chat, on the bare saver: a
    store holds many threads. On Postgres the planner's statistics then see many thread
    ids in every table, as in any deployment; with only the few timed threads in the
    tables, a generic plan for a statement on one thread expects a large share of each
    table, so Postgres plans every execution of the wrapped thread's (small) statements
    anew (`--fleet 0` measures that store)."""
    graph = chat_graph(inner)
    for k in range(threads):
        for i in range(FLEET_RUNS):
            await graph.ainvoke(turn(i), thread(f"fleet-{k}"))
    await stores.analyze(inner)


async def admission_figures(
    kind: str, reps: int, directory: str, frozen: bool = False, fleet: int = FLEET
) -> list[Any]:
    figures: list[Any] = []
    async with stores.open_saver(kind, directory) as inner:
        saver = RetainingSaver(inner, retention=RETENTION)
        await saver.acreate_retention_indexes()
        await write_fleet(inner, fleet)
        bare = chat_graph(inner)
        for thread_id, runs in (("below", HORIZON // 2), ("at", HORIZON), ("run-bare", HORIZON)):
            for i in range(runs):
                await bare.ainvoke(turn(i), thread(thread_id))
        # The wrapped run's thread: through the wrapper, so it is held at the horizon.
        wrapped = chat_graph(saver)
        for i in range(HORIZON):
            await wrapped.ainvoke(turn(i), thread("run-wrapped"))
        await stores.analyze(inner)

        times = await admission.admission_reads(saver, "below", reps, "attempted")
        what = f"(a) below the horizon ({HORIZON // 2} runs): admission read / bare read"
        figures.append(admission.figure(kind, what, times["wrapped"], times["bare"], 1.05))

        added = iter(range(HORIZON, 10**9))

        async def one_more_run() -> None:
            await saver.asettle_history()
            await bare.ainvoke(turn(next(added)), thread("at"))

        passes = saver.counters.history_passes
        times = await admission.admission_reads(
            saver, "at", reps, "attempted", before=one_more_run, growing=inner
        )
        ran = saver.counters.history_passes - passes
        if not ran:
            raise RuntimeError("no admission at the horizon ran a pass")
        what = f"(b) at the horizon ({HORIZON} runs, {ran} passes): admission read / bare read"
        figures += both(kind, what, times, 1.5, "mean (its passes ran after it)")

        runs = iter(range(HORIZON, 10**9))

        async def wrapped_run() -> None:
            await wrapped.ainvoke(turn(next(runs)), thread("run-wrapped"))
            await saver.asettle_history()  # the pass its admission left, if any

        await saver.asettle_history()
        label = f"(c) a whole run at the horizon{frozen_label(frozen)}"
        calls = {
            "wrapped": wrapped_run,
            "bare": lambda: bare.ainvoke(turn(next(runs)), thread("run-bare")),
        }
        times = await whole_runs(kind, label, reps, calls, inner, frozen, saver)
        figures += both(kind, f"{label}: wrapped / bare", times, 1.1)
        held = await saver.astorage_stats("run-wrapped")
        print(f"{kind}: run-wrapped holds {checkpoint_rows(held)} checkpoints")
        figures.append(await sync_run_figure(kind, inner, reps, frozen))
        for chat in (MESSAGES, STATE):
            figures.append(await chat_figure(kind, inner, reps, chat, frozen=frozen))
            unzeroed = await unzeroed_chat_figure(kind, inner, reps, chat, frozen)
            if unzeroed is not None:
                figures.append(unzeroed)
        figures.append(await chat_figure(kind, inner, reps, UNDER_TTL, frozen=frozen))
        figures.append(await model_figure(kind, inner))
        figures += await legacy_figure(kind, saver)
    return figures


def checkpoint_rows(held: StorageStats) -> int:
    """The rows of the thread's checkpoint table (`storage` in memory), by name."""
    return held.tables["storage" if "storage" in held.tables else "checkpoints"].rows


async def legacy_figure(kind: str, saver: RetainingSaver) -> list[Any]:
    """(d): admissions until a 10,000-checkpoint thread holds the horizon's runs; twice,
    on two such threads: as the process runs, and with its objects frozen first."""
    figures = []
    for frozen in (False, True):
        thread_id = f"legacy-{'frozen' if frozen else 'as-is'}"
        await stores.write_chain(saver.inner, thread_id, admission.BIG, run_length=4)
        await stores.analyze(saver.inner)
        one_collection = _common.full_collection_ms()
        with _common.frozen_heap(frozen), _common.full_collections() as paid:
            times = await _converge(saver, thread_id)
        how = frozen_label(frozen)
        print(f"{kind}: (d){how}: {_common.collections_paid(paid, one_collection)}")
        what = f"(d) legacy 10k{how}: {len(times)} admissions to the horizon; slowest / median"
        median = _common.median(times)
        figures.append(admission.figure(kind, what, [max(times)], [median], 5.0))
    return figures


async def _converge(saver: RetainingSaver, thread_id: str) -> list[float]:
    """Each admission's time, until the thread holds the horizon's runs."""
    times: list[float] = []
    while len(times) < admission.BIG:
        elapsed, _ = await admission.timed(lambda: saver.aadmit(thread_id))
        times.append(elapsed)
        if checkpoint_rows(await saver.astorage_stats(thread_id)) <= 4 * HORIZON:
            break
    return times


async def run_admission(kinds: Sequence[str], reps: int, frozen: bool, fleet: int) -> None:
    figures: list[Any] = []
    with tempfile.TemporaryDirectory() as directory:
        for kind in kinds:
            if kind == "postgres" and _common.pg_unreachable(_common.pg_server_dsn()):
                print("postgres skipped: unreachable")
                continue
            figures += await admission_figures(kind, reps, directory, frozen, fleet)
    admission.show(figures, reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backends", default="memory,sqlite,postgres")
    parser.add_argument("--turns", default="50,100,200")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--skip-storage", action="store_true")
    parser.add_argument("--skip-admission", action="store_true")
    parser.add_argument(
        "--freeze",
        action="store_true",
        help="freeze the process's objects (gc.freeze) before the whole runs of (c), (f), (g), (h)",
    )
    parser.add_argument(
        "--fleet",
        type=int,
        default=FLEET,
        help=f"idle threads of {FLEET_RUNS} runs in the admission figures' store (0: none)",
    )
    args = parser.parse_args()
    kinds = [k.strip() for k in args.backends.split(",") if k.strip()]
    if not args.skip_storage:
        run_storage(kinds, [int(t) for t in args.turns.split(",")])
    if not args.skip_admission:
        asyncio.run(run_admission(kinds, args.reps, args.freeze, args.fleet))


if __name__ == "__main__":
    main()
