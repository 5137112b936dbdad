"""`retaining-saver`: storage statistics, retention plans and passes, and compaction from a shell.

    retaining-saver stats   TARGET [--thread ID]
    retaining-saver plan    TARGET [--thread ID ...] [POLICY]
    retaining-saver enforce TARGET [--thread ID ...] [POLICY] [--apply]
    retaining-saver compact TARGET [--min-free-ratio R] [--apply]
    retaining-saver index   TARGET

    TARGET  sqlite:///PATH, postgresql://... or postgres://... (or --target URL),
            or --sqlite PATH, or --postgres DSN (any libpq DSN, key=value too)
    POLICY  [--prune-branches [--min-age-hours H]] [--graft-links] [--max-delete N]
    Every command also takes --json and --debug.

Nothing is deleted or vacuumed without --apply: enforce and compact are dry
runs otherwise and say so. --dry-run is still accepted, as a no-op: it names
the default. plan lists, per thread, each checkpoint a pass would delete (and
why) and each it keeps (and what protects it). enforce and plan walk every
thread unless --thread names some.

stats, plan, and enforce/compact without --apply change nothing: a SQLite file
is opened read-only (a missing file is an error, never a new database), a
Postgres session is read-only, and the saver's setup() never runs, so no table,
migration, journal mode or index is created. A store without the LangGraph
tables is an error. SQLite itself may leave -wal/-shm files beside a WAL-mode
database that a reader opened; the database file stays byte-identical.

With --apply the CLI still never runs setup() (set a store up from your
application), but the backend creates what it keeps beside the saver's tables,
as an application's first cleanup would: the reclaim records' table, and on
SQLite the parent index. On Postgres, index creates both (the index
concurrently); creating them is all it does, so it needs no --apply.

Output is a table per command; when stdout is not a terminal it is plain
tab-separated text. With --json it is one JSON document on stdout instead.
Passwords are masked (as ***) in everything printed, in every DSN form.

Errors are one line on stderr, "retaining-saver: error: ..."; --debug adds the
(masked) traceback before it. With --json an error also prints one JSON
document on stdout, {"error": "..."}, so stdout always parses; when plan or
enforce had finished some threads, it carries them as "partial". Exit status:
0 done, 1 the store or the command failed, 2 the command line is wrong (an
option, a number, or a target that does not parse).
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

from retaining_saver._cli_output import (
    PROG,
    Doc,
    Redactor,
    masked_logs,
    print_document,
    report_failure,
)
from retaining_saver._cli_sweep import SWEEP_SUMMARY, add_sweep_options, run_sweep
from retaining_saver._cli_targets import Store, Target, UsageError, open_store, resolve_target
from retaining_saver._engine import RetentionReport
from retaining_saver._rules import RetentionPolicy

DRY_RUN_ENFORCE = "dry run: nothing changed; pass --apply to delete"
DRY_RUN_COMPACT = "dry run: nothing changed; pass --apply to vacuum"
PLAN_ONLY = "plan only: nothing changed; enforce --apply carries it out"


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line as a `UsageError`, so it is one masked line like any error."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _hours(text: str) -> float:
    """`--min-age-hours`: finite, not negative, and small enough for a `timedelta`."""
    hours = _finite(text)
    if hours < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 hours, got {text!r}")
    try:
        timedelta(hours=hours)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"too many hours: {text!r}") from None
    return hours


def _ratio(text: str) -> float:
    """`--min-free-ratio`: a finite share of the file, within [0, 1]."""
    ratio = _finite(text)
    if not 0 <= ratio <= 1:
        raise argparse.ArgumentTypeError(f"must be within [0, 1], got {text!r}")
    return ratio


def _count(text: str) -> int:
    """`--max-delete`: a whole number, not negative."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if count < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return count


def _finite(text: str) -> float:
    # float() takes "inf" and "nan"; neither is a usable bound.
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=(__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # `--app` must not quietly mean `--apply`
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, summary in (
        ("stats", "rows and bytes per table, for one thread or the whole store"),
        ("plan", "per checkpoint, what a retention pass would delete or keep, and why"),
        ("enforce", "run retention per thread (a dry run without --apply)"),
        ("compact", "SQLite: vacuum once enough of the file is free (with --apply)"),
        ("index", "Postgres: create the parent index and reclaim records' table"),
        ("sweep", SWEEP_SUMMARY),
    ):
        sub = commands.add_parser(name, help=summary, description=summary, allow_abbrev=False)
        _add_target(sub)
        _add_command_options(name, sub)
        sub.add_argument("--json", action="store_true", help="print one JSON document")
        sub.add_argument("--debug", action="store_true", help="print a traceback on error")
    return parser


def _add_target(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("target", nargs="?", metavar="TARGET", help="sqlite:///PATH or postgresql://")
    sub.add_argument("--target", dest="target_url", metavar="URL", help="as TARGET")
    sub.add_argument("--sqlite", metavar="PATH", help="a SqliteSaver database file")
    sub.add_argument("--postgres", metavar="DSN", help="a PostgresSaver database (libpq DSN)")


def _add_command_options(name: str, sub: argparse.ArgumentParser) -> None:
    if name == "sweep":
        add_sweep_options(sub)
    if name == "stats":
        sub.add_argument("--thread", metavar="ID", help="one thread id; default: the whole store")
    if name in ("plan", "enforce"):
        sub.add_argument("--thread", action="append", metavar="ID", help="thread id (repeatable)")
        sub.add_argument(
            "--prune-branches", action="store_true", help="delete superseded sibling subtrees"
        )
        sub.add_argument(
            "--min-age-hours", type=_hours, metavar="H", help="with --prune-branches: TTL"
        )
        sub.add_argument("--graft-links", action="store_true", help="remove duration links")
        sub.add_argument("--max-delete", type=_count, metavar="N", help="cap deletions per thread")
    if name == "compact":
        sub.add_argument("--min-free-ratio", type=_ratio, default=0.25, metavar="R")
    if name in ("enforce", "compact"):
        verb = "delete" if name == "enforce" else "vacuum"
        apply = sub.add_mutually_exclusive_group()
        apply.add_argument("--apply", action="store_true", help=f"really {verb}")
        apply.add_argument(
            "--dry-run", action="store_true", help="the default (kept for old calls)"
        )


def _target(args: argparse.Namespace) -> Target:
    target = resolve_target(args.target, args.target_url, args.sqlite, args.postgres)
    if args.command == "compact" and target.kind != "sqlite":
        raise UsageError("compact is for SQLite files; Postgres reclaims space with VACUUM")
    if args.command == "index" and target.kind != "postgres":
        raise UsageError("index is for Postgres; SQLite creates it on the first enforce --apply")
    return target


def _writes(args: argparse.Namespace) -> bool:
    return args.command == "index" or bool(getattr(args, "apply", False))


def _policy(args: argparse.Namespace) -> RetentionPolicy:
    age = None if args.min_age_hours is None else timedelta(hours=args.min_age_hours)
    return RetentionPolicy(
        prune_leaf_sibling_branches=args.prune_branches,
        sibling_branch_min_age=age,
        graft_duration_links=args.graft_links,
        max_delete_per_run=args.max_delete,
    )


def _policy_doc(args: argparse.Namespace) -> Doc:
    return {
        "trailing_duration_leaves": True,
        "prune_branches": args.prune_branches,
        "min_age_hours": args.min_age_hours,
        "graft_links": args.graft_links,
        "max_delete": args.max_delete,
    }


# Commands: each fills the output document as it goes, so a failure can show what was done.


def _stats(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    stats = store.saver.storage_stats(args.thread)
    tables = {name: {"rows": t.rows, "bytes": t.bytes} for name, t in stats.tables.items()}
    doc.update(thread_id=args.thread, tables=tables, rows=stats.rows, bytes=stats.bytes)


def _plan(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    threads: list[Doc] = []
    doc.update(dry_run=True, policy=_policy_doc(args), threads=threads)
    for report in store.saver.enforce_retention(args.thread, _policy(args), dry_run=True):
        threads.append(_plan_of(report))
    doc["message"] = PLAN_ONLY


def _plan_of(report: RetentionReport) -> Doc:
    delete = [{**_key(k), "reason": str(r)} for k, r in sorted(report.deleted.items())]
    keep = [{**_key(k), "protection": str(p)} for k, p in sorted(report.kept.items())]
    grafts = [
        {
            "checkpoint_ns": g.checkpoint_ns,
            "checkpoint_id": g.child_id,
            "new_parent_id": g.new_parent_id,
            "via": list(g.via),
        }
        for g in report.grafts
    ]
    return {"thread_id": report.thread_id, "delete": delete, "keep": keep, "grafts": grafts}


def _enforce(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    dry_run = not args.apply
    threads: list[Doc] = []
    doc.update(dry_run=dry_run, policy=_policy_doc(args), threads=threads)
    for report in store.saver.enforce_retention(args.thread, _policy(args), dry_run=dry_run):
        threads.append(_pass_of(report))
    if dry_run:
        doc["message"] = DRY_RUN_ENFORCE
    else:
        deleted = sum(len(t["deleted"]) for t in threads)
        doc["message"] = (
            f"deleted {_many(deleted, 'checkpoint')} in {_many(len(threads), 'thread')}"
        )


def _many(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _pass_of(report: RetentionReport) -> Doc:
    return {
        "thread_id": report.thread_id,
        "deleted": [{**_key(k), "reason": str(r)} for k, r in sorted(report.deleted.items())],
        "dropped": [_key(k) for k in report.dropped],
        "deferred": [_key(k) for k in report.deferred],
        "kept": len(report.kept),
        "rows_before": report.before.rows,
        "rows_after": None if report.after is None else report.after.rows,
        "bytes_before": report.before.bytes,
        "bytes_after": None if report.after is None else report.after.bytes,
    }


def _key(key: tuple[str, str]) -> Doc:
    return {"checkpoint_ns": key[0], "checkpoint_id": key[1]}


def _compact(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    ratio = args.min_free_ratio
    doc.update(dry_run=not args.apply, min_free_ratio=ratio)
    if not args.apply:
        assert store.sqlite is not None  # `_target` lets only SQLite through
        before = _file_pages(store.sqlite)
        # As `SqliteBackend.compact` decides, without vacuuming.
        would = before["free_pages"] > 0 and before["free_pages"] / before["pages"] >= ratio
        doc.update(would_run=would, ran=False, before=before, message=DRY_RUN_COMPACT)
        return
    done = store.saver.compact_storage(ratio)
    doc.update(
        would_run=done.ran,
        ran=done.ran,
        before=_pages(done.pages_before, done.free_pages_before, done.file_bytes_before),
        after=_pages(done.pages_after, done.free_pages_after, done.file_bytes_after),
    )


def _file_pages(conn: sqlite3.Connection) -> Doc:
    """Pages, free pages and bytes on disk (main file plus WAL), read without writing."""
    pages, free, file = conn.execute(
        "SELECT p.page_count, f.freelist_count, d.file FROM pragma_page_count() AS p,"
        " pragma_freelist_count() AS f, pragma_database_list() AS d WHERE d.name = 'main'"
    ).fetchone()
    wal = Path(f"{file}-wal")
    on_disk = Path(file).stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return _pages(int(pages), int(free), on_disk)


def _pages(pages: int, free: int, file_bytes: int) -> Doc:
    return {"pages": pages, "free_pages": free, "file_bytes": file_bytes}


def _index(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    store.saver.create_retention_indexes()
    doc.update(ready=True, message="retention indexes ready")


_COMMANDS: Mapping[str, Callable[[Store, argparse.Namespace, Doc], None]] = {
    "stats": _stats,
    "plan": _plan,
    "enforce": _enforce,
    "compact": _compact,
    "index": _index,
    "sweep": run_sweep,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 done, 1 failed, 2 bad usage)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    # Built before parsing: even a usage error may quote a DSN back.
    redact = Redactor.of_arguments(arguments)
    doc: Doc = {}
    with masked_logs(redact):
        try:
            args = _parser().parse_args(arguments)
            target = _target(args)
            doc.update(command=args.command, store=target.kind)
            with open_store(target, writable=_writes(args)) as store:
                _COMMANDS[args.command](store, args, doc)
        except (Exception, KeyboardInterrupt) as error:
            return report_failure(error, doc, arguments, redact)
        print_document(doc, as_json=args.json, redact=redact)
    return 0


if __name__ == "__main__":
    sys.exit(main())
