"""What the wrapper costs each call of a sync saver: where a sync run's excess is when no
pass runs.

    python benchmarks/bench_call_cost.py [--backends sqlite,postgres] [--runs 300]
        [--replays 3000]

Three savers on one store, each on a thread of its own: the bare sync saver
(`SqliteSaver` on a file, `PostgresSaver` on a fresh database, `InMemorySaver`), the
drop-in (`RetainingSaver(inner)`), and `retention=` under a horizon no run reaches, so
that no pass runs and what is left is each call's own work.

Printed, per backend:

- in context: `--runs` runs of the chat of (c) on each saver, interleaved. Each call a
  run makes of its saver is timed in the CPU time of the thread that made it:
  LangGraph stores a sync run's checkpoints from a thread of its own, which a profile
  of the main thread never sees. Per run: what each kind of call cost on the bare
  saver and through each wrapper, the difference, and the run's CPU time (all of the
  process's threads) against the bare run's;
- alone: the calls of one run (its puts, its writes, then a read of the head) replayed
  `--replays` times through each saver on the main thread, interleaved, each
  replay's median over the bare one's. The store's durability is off for it (SQLite's
  `synchronous`, Postgres's `synchronous_commit`, on this connection), so that a
  disk flush does not hide the wrapper's code.

No goal: context for (c) sync (`bench_bounding.py`). Ratios are of figures measured side
by side in this run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import _common
from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver.testing.graphs import chat_graph, thread, turn

CALLS = ("put", "put_writes", "get_tuple")
NO_PASS = RetentionPolicy(history_keep_runs=10**6, history_min_age=timedelta(0))
"""A horizon no run reaches: `retention=`'s work on each call, and no pass."""
WARMUP = 30

Totals = dict[tuple[str, str], float]
"""CPU seconds by (saver, call)."""


def timed(saver: BaseCheckpointSaver[Any], name: str, label: str, totals: Totals) -> None:
    """Time each call of `saver.name` (overridden on the instance) on `label`'s thread
    into `totals` under (`label`, `name`), in the CPU time of the thread that makes it.

    Only calls on `label`'s own thread count: the bare saver is also the one the
    wrappers call, on theirs."""
    call = getattr(saver, name)

    def timing(config: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return call(config, *args, **kwargs)
        finally:
            if config["configurable"]["thread_id"] == run_thread(label):
                totals[(label, name)] += time.thread_time() - started

    setattr(saver, name, timing)


def run_thread(label: str) -> str:
    """The thread `label`'s runs write."""
    return f"{label}-run"


def per_call_rows(totals: Totals, runs: int, cpu: dict[str, float]) -> list[list[str]]:
    """The in-context table: per run, each call's CPU on the bare saver and through each
    wrapper, and each wrapped saver's run over the bare run."""
    rows = []
    for saver in ("dropin", "retention"):
        excess = 0.0
        for name in CALLS:
            bare, wrapped = totals[("bare", name)] / runs, totals[(saver, name)] / runs
            excess += wrapped - bare
            rows.append([saver, name, _us(bare), _us(wrapped), _us(wrapped - bare), ""])
        share = f"{excess / cpu['bare']:.3f} of a bare run's CPU"
        ratio = f"run CPU {cpu[saver] / cpu['bare']:.3f}x the bare run's"
        rows.append([saver, "all", "", "", _us(excess), f"{share}; {ratio}"])
    return rows


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us"


@contextmanager
def sync_store(kind: str) -> Iterator[BaseCheckpointSaver[Any]]:
    """The bare sync saver of `kind`, set up, on a store of its own."""
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with tempfile.TemporaryDirectory() as directory:
            path = str(Path(directory) / "calls.sqlite")
            with SqliteSaver.from_conn_string(path) as saver:
                saver.setup()
                yield saver
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        server = _common.pg_server_dsn()
        dsn = _common.create_database(server)
        try:
            with PostgresSaver.from_conn_string(dsn) as saver:
                saver.setup()
                yield saver
        finally:
            _common.drop_database(server, dsn)


def savers(inner: BaseCheckpointSaver[Any]) -> dict[str, BaseCheckpointSaver[Any]]:
    return {
        "bare": inner,
        "dropin": RetainingSaver(inner),
        "retention": RetainingSaver(inner, retention=NO_PASS),
    }


def in_context(kind: str, runs: int) -> None:
    with sync_store(kind) as inner:
        arms = savers(inner)
        totals: Totals = defaultdict(float)
        graphs = {}
        for label, saver in arms.items():
            graphs[label] = chat_graph(saver)
            for name in CALLS:
                timed(saver, name, label, totals)
        cpu: dict[str, list[float]] = defaultdict(list)
        for i in range(WARMUP + runs):
            if i == WARMUP:
                totals.clear()
            for label, graph in graphs.items():
                started = time.process_time()
                graph.invoke(turn(i), thread(run_thread(label)))
                if i >= WARMUP:
                    cpu[label].append(time.process_time() - started)
        medians = {label: statistics.median(times) for label, times in cpu.items()}
        print(f"\n{kind}: a bare run's CPU time, median of {runs}: {_us(medians['bare'])}")
        columns = ["saver", "call", "bare", "through the wrapper", "excess", "per run"]
        _common.print_table(
            f"{kind}: CPU per run of the chat, by call, on the thread that made it",
            columns,
            per_call_rows(totals, runs, medians),
        )


def alone(kind: str, replays: int) -> None:
    with sync_store(kind) as inner:
        calls: list[tuple[str, tuple[Any, ...]]] = []
        with ExitStack() as recording:
            for name in ("put", "put_writes"):
                recording.enter_context(_recorded(inner, name, calls))
            graph = chat_graph(inner)
            for i in range(12):
                calls.clear()  # the calls of the last run, on a thread 11 runs long
                graph.invoke(turn(i), thread("recorded"))
        _durability_off(kind, inner)
        arms = savers(inner)
        head = thread("recorded")

        def replay(saver: BaseCheckpointSaver[Any]) -> Callable[[], None]:
            def run() -> None:
                for name, args in calls:
                    getattr(saver, name)(*args)
                saver.get_tuple(head)

            return run

        runs = {name: replay(saver) for name, saver in arms.items()}
        times: dict[str, list[float]] = defaultdict(list)
        for i in range(WARMUP + replays):
            for name, run in runs.items():
                started = time.perf_counter()
                run()
                if i >= WARMUP:
                    times[name].append(time.perf_counter() - started)
        bare = statistics.median(times["bare"])
        shape = ", ".join(name for name, _ in calls)
        print(f"{kind}: one run's calls ({shape}, get_tuple) replayed alone, median:")
        for name, taken in times.items():
            median = statistics.median(taken)
            print(f"  {name:10s} {_us(median):>8s}  {median / bare:.3f}x the bare replay")


@contextmanager
def _recorded(
    saver: BaseCheckpointSaver[Any], name: str, calls: list[tuple[str, tuple[Any, ...]]]
) -> Iterator[None]:
    """Record each call of `saver.name` (overridden on the instance) while the block runs."""
    call = getattr(saver, name)

    def recording(*args: Any) -> Any:
        calls.append((name, args))
        return call(*args)

    setattr(saver, name, recording)
    try:
        yield
    finally:
        delattr(saver, name)


def _durability_off(kind: str, inner: Any) -> None:
    if kind == "sqlite":
        inner.conn.execute("PRAGMA synchronous = OFF")
    elif kind == "postgres":
        inner.conn.execute("SET synchronous_commit = off")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--replays", type=int, default=3000)
    args = parser.parse_args()
    for kind in args.backends.split(","):
        if kind == "postgres" and (reason := _common.pg_unreachable(_common.pg_server_dsn())):
            print(f"postgres: skipped, the server is unreachable: {reason}")
            continue
        in_context(kind, args.runs)
        alone(kind, args.replays)


if __name__ == "__main__":
    main()
