"""What admission costs a run, as ratios measured side by side.

    python benchmarks/bench_admission.py [--quick] [--reps N] [--backends memory,sqlite,postgres]

Async savers: InMemorySaver, AsyncSqliteSaver (a temp file) and
AsyncPostgresSaver (a fresh database on RETAINING_SAVER_PG_DSN, default
postgresql://postgres@127.0.0.1:5432/test, dropped afterwards). Wrapped and
bare calls alternate inside one loop (their order flips every repetition), so
machine noise hits both alike; each ratio is of medians. Absolute times are
printed for context only; they say nothing across machines or runs.

(i)   admission read, nothing to reclaim: `RetainingSaver.aget_tuple` with a
      fresh `__pregel_runtime` object (root ns, unpinned), vs the bare
      `inner.aget_tuple` of the same thread. Goal <= 1.05x.
(ii)  admission read that reclaims a leaf (a fresh leaf is written before each
      repetition, untimed) vs the bare read. Goal < 1.5x. Twice: the leaf
      stamped by another process (written straight to the store), and stamped
      through this saver. On Postgres both take it in the statement that reads
      the head.
(iii) cleanup (`aadmit` reclaiming one leaf) on a 10,000-checkpoint thread vs
      a 10-checkpoint one, raw, and divided by the bare read at each size
      (bare reads are not flat on every backend). Goal <= 1.2x.
(iv)  the admission read itself (`aget_tuple` of a run, as in (i)) on the
      10,000-checkpoint thread vs the 10-checkpoint one (goal <= 1.2x), and at
      10 vs the bare read (goal <= 1.05x): once with a run checkpoint at the head,
      once with a fresh leaf to take written before each repetition (untimed).

Nothing is asserted: the goals are printed next to the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import _common
from _bench_stores import analyze, autovacuum_when_due, open_saver, write_chain
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
)

from retaining_saver import RetainingSaver
from retaining_saver._run_reads import RUNTIME_KEY
from retaining_saver.testing import awrite_duration_leaf

SMALL, BIG = 10, 10_000
WARMUP = 20


@dataclass
class Figure:
    backend: str
    what: str
    ratio: float
    paired: tuple[float, float, float]  # p25, median, p75 of per-repetition ratios
    top: float  # median of the numerator, in microseconds (context only)
    bottom: float  # median of the denominator, in microseconds (context only)
    goal: float | None
    reps: int
    unit: str = "us"


# Measurement


def run_config(thread_id: str) -> RunnableConfig:
    """A LangGraph run's first read: a new runtime object, root namespace, unpinned."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", RUNTIME_KEY: object()}}


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter_ns()
    result = await call()
    return (time.perf_counter_ns() - start) / 1_000, result


async def side_by_side(
    reps: int,
    calls: dict[str, Callable[[], Awaitable[Any]]],
    before: Callable[[], Awaitable[None]] | None = None,
    check: Callable[[str, Any], None] | None = None,
    growing: BaseCheckpointSaver[Any] | None = None,
    paid: dict[str, list[float]] | None = None,
    frozen: bool = False,
) -> dict[str, list[float]]:
    """Time each call once per repetition, rotating their order; discard the warmup.

    `growing`: the store the calls write to, whose Postgres tables are VACUUMed and
    ANALYZEd (untimed) before a repetition once autovacuum would
    (`autovacuum_when_due`). These calls grow the tables many times over within a
    minute, faster than autovacuum's first look, so without it the plans would be
    the ones made for the small tables of the set-up (sequential scans per lookup, a
    cost that grows with every run). Analyzing more often than that (every 20
    repetitions, as this did before) also drops every prepared statement's plan each
    time, so a statement a pass runs once in six runs never reaches the generic plan
    Postgres picks after five executions, and is planned anew each time.
    `paid`: filled with the full cyclic collections (ms) inside each call's timed
    repetitions, by name. `frozen`: the repetitions run in `_common.frozen_heap`.
    """
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    with _common.frozen_heap(frozen):
        for rep in range(WARMUP + reps):
            if growing is not None:
                await autovacuum_when_due(growing)
            if before is not None:
                await before()
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                # Recorded only where asked: the recorder's callback is a cost of its own.
                recorder = nullcontext([]) if paid is None else _common.full_collections()
                with recorder as collected:
                    elapsed, result = await timed(calls[name])
                if check is not None:
                    check(name, result)
                if rep >= WARMUP:
                    times[name].append(elapsed)
                    if paid is not None:
                        paid.setdefault(name, []).extend(collected)
    return times


async def admission_reads(
    saver: RetainingSaver,
    thread_id: str,
    reps: int,
    counter: str,
    *,
    control: bool = False,
    before: Callable[[], Awaitable[None]] | None = None,
    check: Callable[[str, Any], None] | None = None,
    growing: BaseCheckpointSaver[Any] | None = None,
) -> dict[str, list[float]]:
    """The wrapped admission read of `thread_id` side by side with the bare read (and,
    with `control`, the bare read again); each wrapped read must move `counter`
    (`growing`: as in `side_by_side`, where `before` writes)."""
    inner = saver.inner
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "wrapped": lambda: saver.aget_tuple(run_config(thread_id)),
        "bare": lambda: inner.aget_tuple(run_config(thread_id)),
    }
    if control:
        calls["bare again"] = lambda: inner.aget_tuple(run_config(thread_id))
    start = getattr(saver.counters, counter)
    times = await side_by_side(reps, calls, before=before, check=check, growing=growing)
    if getattr(saver.counters, counter) - start != WARMUP + reps:
        raise RuntimeError(f"not every wrapped read of {thread_id} counted as {counter}")
    return times


def figure(
    backend: str,
    what: str,
    top: Sequence[float],
    bottom: Sequence[float],
    goal: float | None = None,
    unit: str = "us",
) -> Figure:
    paired = [t / b for t, b in zip(top, bottom, strict=True)]
    return Figure(
        backend,
        what,
        _common.median(top) / _common.median(bottom),
        (_common.quantile(paired, 0.25), _common.median(paired), _common.quantile(paired, 0.75)),
        _common.median(top),
        _common.median(bottom),
        goal,
        len(paired),
        unit,
    )


async def bench_backend(kind: str, reps: int, directory: str) -> list[Figure]:
    figures: list[Figure] = []
    async with open_saver(kind, directory) as inner:
        saver = RetainingSaver(inner)
        # As deployed: SQLite builds the parent index on first use, Postgres on request.
        await saver.acreate_retention_indexes()
        await _common.abuild_chat(inner, "read", _common.TURNS)
        await _common.abuild_chat(inner, "reclaim", _common.TURNS)
        await analyze(inner)
        read_head = await inner.aget_tuple(_common.root("read"))
        assert read_head is not None

        # (i) Nothing to reclaim.
        def same_head(name: str, result: Any) -> None:
            if result is None or result.checkpoint["id"] != read_head.checkpoint["id"]:
                raise RuntimeError(f"{name} read the wrong head")

        times = await admission_reads(
            saver, "read", reps, "attempted", control=True, check=same_head
        )
        figures.append(
            figure(
                kind,
                "(i) admission read, nothing to reclaim / bare read",
                times["wrapped"],
                times["bare"],
                1.05,
            )
        )
        figures.append(
            figure(kind, "    control: bare read / bare read", times["bare again"], times["bare"])
        )

        # (ii) Reclaiming the leaf written before each repetition: by another
        # process (straight to the store), then by this one (through the saver).
        for stamper, label in ((inner, "another process"), (saver, "this saver")):

            async def fresh_leaf(stamper: Any = stamper) -> None:
                await awrite_duration_leaf(stamper, "reclaim")

            times = await admission_reads(saver, "reclaim", reps, "reclaimed", before=fresh_leaf)
            figures.append(
                figure(
                    kind,
                    f"(ii) admission read reclaiming a leaf stamped by {label} / bare read",
                    times["wrapped"],
                    times["bare"],
                    1.5,
                )
            )

        # (iii) Cleanup at 10 vs 10,000 checkpoints.
        await write_chain(inner, "small", SMALL)
        await write_chain(inner, "big", BIG)
        for thread_id, n in (("small", SMALL), ("big", BIG)):
            rows = (await saver.astorage_stats(thread_id)).tables
            stored = next(iter(rows.values())).rows
            if stored != n:
                raise RuntimeError(f"{thread_id} holds {stored} checkpoints, not {n}")

        async def two_leaves() -> None:
            await awrite_duration_leaf(inner, "small")
            await awrite_duration_leaf(inner, "big")

        def one_reclaimed(name: str, result: Any) -> None:
            if name.startswith("admit") and len(result.reclaimed) != 1:
                raise RuntimeError(f"{name} reclaimed {result.reclaimed}")

        times = await side_by_side(
            reps,
            {
                "admit small": lambda: saver.aadmit("small"),
                "admit big": lambda: saver.aadmit("big"),
                "read small": lambda: inner.aget_tuple(_common.root("small")),
                "read big": lambda: inner.aget_tuple(_common.root("big")),
            },
            before=two_leaves,
            check=one_reclaimed,
        )
        big, small = times["admit big"], times["admit small"]
        read_big, read_small = times["read big"], times["read small"]
        figures += [
            figure(kind, "(iii) cleanup 10k / cleanup 10 (raw)", big, small, 1.2),
            figure(kind, "(iii) bare read 10k / bare read 10", read_big, read_small),
            figure(kind, "(iii) cleanup / bare read at 10", small, read_small),
            figure(kind, "(iii) cleanup / bare read at 10k", big, read_big),
            figure(
                kind,
                "(iii) (cleanup/bare @10k) / (cleanup/bare @10)",
                [a / r for a, r in zip(big, read_big, strict=True)],
                [a / r for a, r in zip(small, read_small, strict=True)],
                1.2,
                unit="x",
            ),
        ]
        figures += await flat_reads(kind, saver, reps, two_leaves)
    return figures


async def flat_reads(
    kind: str, saver: RetainingSaver, reps: int, two_leaves: Callable[[], Awaitable[None]]
) -> list[Figure]:
    """(iv): the admission read (`aget_tuple` of a run) on the 10,000-checkpoint thread vs
    the 10-checkpoint one, and vs the bare read at 10: the head a run checkpoint, then a
    fresh leaf to take before each repetition."""
    inner, figures = saver.inner, []
    for shape, before in (("nothing to take", None), ("a leaf to take", two_leaves)):
        times = await side_by_side(
            reps,
            {
                "small": lambda: saver.aget_tuple(run_config("small")),
                "big": lambda: saver.aget_tuple(run_config("big")),
                "read small": lambda: inner.aget_tuple(_common.root("small")),
            },
            before=before,
        )
        big, small = times["big"], times["small"]
        figures += [
            figure(kind, f"(iv) admission read 10k / 10, {shape}", big, small, 1.2),
            figure(
                kind,
                f"(iv) admission read / bare read at 10, {shape}",
                times["small"],
                times["read small"],
                1.05,
            ),
        ]
    return figures


def show(figures: Sequence[Figure], reps: int) -> None:
    rows = []
    for f in figures:
        unit = f.unit
        meets = "" if f.goal is None else ("yes" if f.ratio <= f.goal else "MISSED")
        rows.append(
            [
                f.backend,
                f.what,
                f"{f.ratio:.3f}x",
                f"{f.paired[1]:.3f}x [{f.paired[0]:.2f}-{f.paired[2]:.2f}]",
                "-" if f.goal is None else f"<= {f.goal}x",
                meets,
                f"{f.top:.1f}{unit} / {f.bottom:.1f}{unit}",
            ]
        )
    _common.print_table(
        f"Admission cost, interleaved side by side, {reps} repetitions each "
        f"(+{WARMUP} warmup discarded)",
        [
            "backend",
            "measurement",
            "ratio of medians",
            "median paired ratio [p25-p75]",
            "goal",
            "meets",
            "medians (context only)",
        ],
        rows,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="200 repetitions instead of 1000")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--backends", default="memory,sqlite,postgres")
    args = parser.parse_args()
    reps = args.reps or (200 if args.quick else 1000)
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as directory:
        for kind in [k.strip() for k in args.backends.split(",") if k.strip()]:
            if kind == "postgres":
                reason = _common.pg_unreachable(_common.pg_server_dsn())
                if reason is not None:
                    print(f"postgres skipped: {reason}")
                    continue
            figures += await bench_backend(kind, reps, directory)
    show(figures, reps)


if __name__ == "__main__":
    asyncio.run(main())
