"""Every benchmark in one command, at sizes that finish in a few minutes.

    python benchmarks/run_all.py [--out docs/benchmarks] [--doc docs/benchmarks.md] [--quick]
    python benchmarks/run_all.py --render    # redraw plots and page from results.json

Runs, in one process and one after another:

- storage: `bench_storage`'s plain chat at 10/20/40/60/80 turns (`--quick`: 5/10/20),
  on SQLite and Postgres, one engine pass per rule on a copy of the bare thread;
- admission: `bench_admission`'s side-by-side reads on memory, SQLite and
  Postgres (1,000 repetitions; `--quick`: 60);
- engine: `bench_engine`'s passes over a stamped 20-turn chat with regenerates;
- prune: `bench_prune`'s `aprune(keep_latest)` against upstream's over 1,000
  Postgres threads, 3 rounds (`--quick`: 60 threads, 2 rounds), and the
  DeltaChannel threads upstream refuses.

About 3.5 minutes on a 2-CPU machine. Writes `results.json` (every figure,
the machine and the package versions), `growth.png`, `admission.png` and
`prune.png` into `--out`, and `--doc` (a Markdown page with the tables and
plots). Every timing is a ratio of two
things measured side by side in this run; storage figures are bytes as each
backend stores them. Postgres comes from RETAINING_SAVER_PG_DSN (default
postgresql://postgres@127.0.0.1:5432/test); when it is unreachable its parts
are skipped and say so.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import _common
import _plots
import _report
import bench_admission
import bench_engine
import bench_prune
import bench_storage

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "retaining-saver",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "aiosqlite",
    "psycopg",
    "matplotlib",
)


@dataclasses.dataclass(frozen=True)
class Sizes:
    turns: tuple[int, ...]
    reps: int
    prune_threads: int
    prune_rounds: int


FULL = Sizes(turns=(10, 20, 40, 60, 80), reps=1000, prune_threads=1000, prune_rounds=3)
QUICK = Sizes(turns=(5, 10, 20), reps=60, prune_threads=60, prune_rounds=2)


def machine(postgres: str | None) -> dict[str, Any]:
    """Where the figures were measured: CPUs, Python, platform, databases, versions."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "postgres": postgres,
        "commit": _commit(),
        "packages": versions,
    }


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def _postgres_version(server: str) -> str | None:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return None if row is None else str(row[0])


@contextmanager
def _postgres_database(server: str) -> Iterator[str]:
    dsn = _common.create_database(server)
    try:
        yield dsn
    finally:
        _common.drop_database(server, dsn)


def storage(kinds: list[str], server: str, turns: tuple[int, ...]) -> dict[str, Any]:
    """Bytes and rows per thread under each rule, per backend and turn count."""
    found: dict[str, Any] = {}
    for kind in kinds:
        with (
            tempfile.TemporaryDirectory() as directory,
            _opened(bench_storage, kind, directory, server) as (inner, copy),
        ):
            per_turns = {}
            for count in turns:
                stats, live, clean = bench_storage.measure(kind, inner, copy, count)
                per_turns[str(count)] = {
                    "live_state_bytes": live,
                    "integrity_clean": clean,
                    "rules": {
                        label: {"rows": s.rows, "bytes": s.bytes} for label, s in stats.items()
                    },
                }
            found[kind] = per_turns
    return found


@contextmanager
def _opened(bench: Any, kind: str, directory: str, server: str) -> Iterator[Any]:
    """`bench`'s `open_sqlite` in `directory`, or its `open_postgres` on a fresh database."""
    if kind == "sqlite":
        with bench.open_sqlite(directory) as opened:
            yield opened
        return
    with _postgres_database(server) as dsn, bench.open_postgres(dsn) as opened:
        yield opened


def admission(kinds: list[str], reps: int) -> list[dict[str, Any]]:
    """`bench_admission`'s figures (ratios of side-by-side medians) per backend."""
    figures: list[bench_admission.Figure] = []
    with tempfile.TemporaryDirectory() as directory:
        for kind in ["memory", *kinds]:
            figures += asyncio.run(bench_admission.bench_backend(kind, reps, directory))
    bench_admission.show(figures, reps)
    return [dataclasses.asdict(f) for f in figures]


def engine(kinds: list[str], server: str) -> list[dict[str, Any]]:
    """`bench_engine`'s passes: rows and bytes per table before and after each."""
    columns = ("backend", "pass", "table", "rows_before", "rows_after")
    columns += ("bytes_before", "bytes_after", "deleted", "integrity_clean")
    rows: list[list[Any]] = []
    for kind in kinds:
        with (
            tempfile.TemporaryDirectory() as directory,
            _opened(bench_engine, kind, directory, server) as inner,
        ):
            rows += bench_engine.run_backend(kind, inner, _common.TURNS)
    return [dict(zip(columns, row, strict=True)) for row in rows]


def prune(server: str, sizes: Sizes) -> dict[str, Any]:
    """`bench_prune`: ours against upstream's `aprune`, and the DeltaChannel threads."""
    keep_latest = asyncio.run(
        bench_prune.compare(server, sizes.prune_threads, 10, sizes.prune_rounds)
    )
    delta = asyncio.run(bench_prune.delta_threads(server, max(1, sizes.prune_threads // 10), 10))
    return {"keep_latest": keep_latest, "delta": delta}


def timed(name: str, run: Callable[[], Any], seconds: dict[str, float]) -> Any:
    print(f"\n== {name} ==", flush=True)
    start = time.perf_counter()
    result = run()
    seconds[name] = round(time.perf_counter() - start, 1)
    print(f"== {name}: {seconds[name]} s ==", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about a minute)")
    parser.add_argument(
        "--render", action="store_true", help="only redraw the plots and page from results.json"
    )
    args = parser.parse_args()
    if args.render:
        write_outputs(json.loads((args.out / "results.json").read_text()), args.out, args.doc)
        return
    sizes = QUICK if args.quick else FULL
    server = _common.pg_server_dsn()
    unreachable = _common.pg_unreachable(server)
    if unreachable is not None:
        print(f"postgres skipped: {unreachable}")
    kinds = ["sqlite"] + ([] if unreachable else ["postgres"])
    results: dict[str, Any] = {
        "machine": machine(None if unreachable else _postgres_version(server)),
        "sizes": dataclasses.asdict(sizes),
        "postgres_skipped": unreachable,
    }
    seconds: dict[str, float] = {}
    results["storage"] = timed("storage", lambda: storage(kinds, server, sizes.turns), seconds)
    results["admission"] = timed("admission", lambda: admission(kinds, sizes.reps), seconds)
    results["engine"] = timed("engine", lambda: engine(kinds, server), seconds)
    if not unreachable:
        results["prune"] = timed("prune", lambda: prune(server, sizes), seconds)
    results["seconds"] = seconds
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    write_outputs(results, args.out, args.doc)
    print(f"total: {sum(seconds.values()):.0f} s")


def write_outputs(results: dict[str, Any], out: Path, doc: Path) -> None:
    """The plots into `out` and the Markdown page at `doc`, from `results`."""
    figures = _plots.draw(results, out)
    doc.write_text(_report.markdown(results, figures, doc.parent))
    print(f"\nwrote {out / 'results.json'}, {', '.join(map(str, figures))} and {doc}")


if __name__ == "__main__":
    sys.exit(main())
