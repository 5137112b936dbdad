"""`retaining-saver`: storage statistics, retention passes and compaction from a shell.

    retaining-saver stats   --sqlite PATH | --postgres DSN [--thread ID]
    retaining-saver enforce --sqlite PATH | --postgres DSN [--thread ID ...] [--dry-run]
                            [--prune-branches [--min-age-hours H]] [--graft-links]
                            [--max-delete N]
    retaining-saver compact --sqlite PATH [--min-free-ratio R]
    retaining-saver index   --postgres DSN

`index` creates the parent index that keeps admission cleanup flat on Postgres
(SQLite creates it on first use).

`enforce` streams over every thread unless `--thread` names some, and prints
one row per thread. Exit status 2 means bad arguments.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from retaining_saver._engine import RetentionReport
from retaining_saver._rules import RetentionPolicy
from retaining_saver._saver import RetainingSaver
from retaining_saver.backends._base import StorageStats


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retaining-saver", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("stats", "enforce", "compact", "index"):
        sub = commands.add_parser(name)
        store = sub.add_mutually_exclusive_group(required=True)
        if name != "index":
            store.add_argument("--sqlite", metavar="PATH", help="a SqliteSaver database file")
        if name != "compact":
            store.add_argument("--postgres", metavar="DSN", help="a PostgresSaver database")
        if name == "stats":
            sub.add_argument("--thread", help="one thread id; default: the whole store")
        if name == "enforce":
            sub.add_argument("--thread", action="append", help="thread id (repeatable)")
            sub.add_argument("--dry-run", action="store_true", help="report, change nothing")
            sub.add_argument(
                "--prune-branches", action="store_true", help="E2: superseded subtrees"
            )
            sub.add_argument("--min-age-hours", type=float, help="with --prune-branches: TTL")
            sub.add_argument("--graft-links", action="store_true", help="remove duration links")
            sub.add_argument("--max-delete", type=int, help="cap deletions per thread")
        if name == "compact":
            sub.add_argument("--min-free-ratio", type=float, default=0.25)
    return parser


@contextmanager
def _open(args: argparse.Namespace) -> Iterator[RetainingSaver]:
    if getattr(args, "sqlite", None):
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(args.sqlite, check_same_thread=False)
        try:
            yield RetainingSaver(SqliteSaver(conn), admission="off", strict=True)
        finally:
            conn.close()
        return
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(args.postgres) as saver:
        yield RetainingSaver(saver, admission="off", strict=True)


def _policy(args: argparse.Namespace) -> RetentionPolicy:
    age = None if args.min_age_hours is None else timedelta(hours=args.min_age_hours)
    return RetentionPolicy(
        prune_leaf_sibling_branches=args.prune_branches,
        sibling_branch_min_age=age,
        graft_duration_links=args.graft_links,
        max_delete_per_run=args.max_delete,
    )


def _table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        for row in [header, *rows]:
            print("\t".join(str(cell) for cell in row))
        return
    table = Table(title=title)
    for column in header:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console().print(table)


def _stats_rows(stats: StorageStats) -> list[list[Any]]:
    return [[name, t.rows, t.bytes] for name, t in stats.tables.items()]


def _report_row(report: RetentionReport) -> list[Any]:
    return [
        report.thread_id,
        len(report.deleted),
        len(report.deferred),
        len(report.kept),
        report.before.rows,
        report.after.rows,
        report.before.bytes,
        report.after.bytes,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        policy = _policy(args) if args.command == "enforce" else None
    except (TypeError, ValueError) as error:
        print(f"retaining-saver: {error}", file=sys.stderr)
        return 2
    with _open(args) as saver:
        if args.command == "stats":
            title = f"thread {args.thread}" if args.thread else "whole store"
            _table(title, ["table", "rows", "bytes"], _stats_rows(saver.storage_stats(args.thread)))
        elif args.command == "enforce":
            reports = saver.enforce_retention(args.thread, policy, dry_run=args.dry_run)
            header = [
                "thread",
                "deleted",
                "deferred",
                "kept",
                "rows before",
                "rows after",
                "bytes before",
                "bytes after",
            ]
            title = "retention (dry run)" if args.dry_run else "retention"
            _table(title, header, [_report_row(r) for r in reports])
        elif args.command == "index":
            saver.create_retention_indexes()
            print("parent index ready")
        else:
            done = saver.compact_storage(args.min_free_ratio)
            _table(
                "compaction",
                ["ran", "bytes before", "bytes after"],
                [[done.ran, done.file_bytes_before, done.file_bytes_after]],
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
