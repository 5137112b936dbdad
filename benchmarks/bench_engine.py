"""Storage figures for the exhaustive retention engine on SQLite and PostgreSQL.

    python benchmarks/bench_engine.py [--backends sqlite,postgres] [--turns 20]

Builds two threads per backend on the bare saver, as an app writes them: a
20-turn chat with a duration leaf after every run (each next run forks from
the leaf: 19 duration-only chain links and one trailing leaf), and the same
chat plus 5 regenerates from older turns. Then runs engine passes and prints
rows and bytes per table before and after each, and the deletion count:

1. `chat`, default policy (`leaf`): only the trailing leaf goes.
2. `regen`, `leaf+branches` (`prune_leaf_sibling_branches`): superseded subtrees go too.
3. `chat` and `regen` again with `graft_duration_links`: the chain links go.

On SQLite it then runs `SqliteBackend.compact` and prints the file bytes.
Nothing here is timed.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _common
from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver import RetainingSaver, RetentionPolicy, RetentionReport
from retaining_saver.backends.sqlite import SqliteBackend
from retaining_saver.testing.checks import integrity

PASSES: tuple[tuple[str, str, RetentionPolicy], ...] = (
    ("chat", "leaf (default)", RetentionPolicy()),
    ("regen", "leaf+branches", RetentionPolicy(prune_leaf_sibling_branches=True)),
    ("chat", "leaf+graft", RetentionPolicy(graft_duration_links=True)),
    (
        "regen",
        "leaf+branches+graft",
        RetentionPolicy(prune_leaf_sibling_branches=True, graft_duration_links=True),
    ),
)


@contextmanager
def open_sqlite(directory: str) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(Path(directory) / "bench.sqlite"), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()


@contextmanager
def open_postgres(dsn: str) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        yield saver


def report_rows(backend: str, label: str, report: RetentionReport, clean: bool) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for table in report.before.tables:
        before = report.before.tables[table]
        after = report.after.tables.get(table, before)
        rows.append(
            [
                backend,
                f"{report.thread_id}: {label}",
                table,
                before.rows,
                after.rows,
                f"{before.bytes:,}",
                f"{after.bytes:,}",
                "",
                "",
            ]
        )
    rows.append(
        [
            backend,
            f"{report.thread_id}: {label}",
            "(all)",
            report.before.rows,
            report.after.rows,
            f"{report.before.bytes:,}",
            f"{report.after.bytes:,}",
            f"{len(report.deleted)} (+{len(report.grafts)} grafts, "
            f"{len(report.freed_blobs)} blobs)",
            "yes" if clean else "NO",
        ]
    )
    return rows


def run_backend(name: str, inner: BaseCheckpointSaver[Any], turns: int) -> list[list[Any]]:
    finals = _common.build_chat(inner, "chat", turns)
    del finals
    regen_finals = _common.build_chat(inner, "regen", turns)
    _common.regenerate(inner, "regen", regen_finals)
    saver = RetainingSaver(inner, admission="off")
    rows: list[list[Any]] = []
    for thread_id, label, policy in PASSES:
        report = saver.enforce_thread_retention(thread_id, policy)
        rows += report_rows(name, label, report, integrity(inner, thread_id).clean)
    return rows


def compaction_rows(inner: BaseCheckpointSaver[Any]) -> list[list[Any]]:
    backend = SqliteBackend(inner)
    rows = []
    for ratio in (0.25, 0.0):
        done = backend.compact(ratio)
        rows.append(
            [
                f"compact({ratio})",
                "yes" if done.ran else "no",
                f"{done.pages_before} ({done.free_pages_before} free)",
                f"{done.pages_after} ({done.free_pages_after} free)",
                f"{done.file_bytes_before:,}",
                f"{done.file_bytes_after:,}",
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--turns", type=int, default=_common.TURNS)
    args = parser.parse_args()
    kinds = [k.strip() for k in args.backends.split(",") if k.strip()]
    rows: list[list[Any]] = []
    compaction: list[list[Any]] = []
    if "sqlite" in kinds:
        with tempfile.TemporaryDirectory() as directory, open_sqlite(directory) as inner:
            rows += run_backend("sqlite", inner, args.turns)
            compaction = compaction_rows(inner)
    if "postgres" in kinds:
        server = _common.pg_server_dsn()
        reason = _common.pg_unreachable(server)
        if reason is not None:
            print(f"postgres skipped: {server} is unreachable ({reason})")
        else:
            dsn = _common.create_database(server)
            try:
                with open_postgres(dsn) as inner:
                    rows += run_backend("postgres", inner, args.turns)
            finally:
                _common.drop_database(server, dsn)
    _common.print_table(
        f"Engine passes: {args.turns}-turn chat with a duration leaf per run ('chat'), "
        f"plus {len(_common.REGENERATE_FROM)} regenerates ('regen'); passes run in order",
        [
            "backend",
            "thread: pass",
            "table",
            "rows before",
            "rows after",
            "bytes before",
            "bytes after",
            "deleted",
            "integrity clean",
        ],
        rows,
    )
    if compaction:
        _common.print_table(
            "SQLite compaction after the passes (main file + WAL)",
            ["call", "ran", "pages before", "pages after", "file bytes before", "file bytes after"],
            compaction,
        )


if __name__ == "__main__":
    main()
