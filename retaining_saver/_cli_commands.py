"""What each command of the command line does, as a function filling its output document.

Each command fills `doc` as it goes, so a failure partway can show what was
done. A command that walks threads reports its progress through `Progress`.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, fields

from retaining_saver._cli_output import Doc
from retaining_saver._cli_progress import Progress
from retaining_saver._cli_targets import CliError, Store, UsageError
from retaining_saver._effects import run
from retaining_saver._engine import RetentionReport
from retaining_saver._maintenance import keep_latest_policy
from retaining_saver._rules import RetentionPolicy
from retaining_saver._rules._legend import explain
from retaining_saver.backends._base import Mode
from retaining_saver.backends._sqlite_compaction import Pages, measure
from retaining_saver.backends._stats import ChannelStats, SpaceStats, StorageStats, TableStats

DRY_RUN_ENFORCE = "dry run: nothing changed; pass --apply to delete"
DRY_RUN_PRUNE = "dry run: nothing changed; pass --apply to prune"
DRY_RUN_COMPACT = "dry run: nothing changed; pass --apply to vacuum"
PLAN_ONLY = "plan only: nothing changed; enforce --apply carries it out"


def known_threads(store: Store, thread_ids: Sequence[str] | None) -> list[str] | None:
    """`thread_ids` without repeats, once each is known to hold checkpoints.

    Raises:
        CliError: Naming every id that holds none, before anything is done.
    """
    if thread_ids is None:
        return None
    unique = list(dict.fromkeys(thread_ids))
    unknown = [t for t in unique if _checkpoint_rows(store.saver.storage_stats(t)) == 0]
    if unknown:
        names = ", ".join(repr(t) for t in unknown)
        raise CliError(f"no checkpoints for thread{'s' if len(unknown) > 1 else ''} {names}")
    return unique


def _checkpoint_rows(stats: StorageStats) -> int:
    found = [t.rows for name, t in stats.tables.items() if name in ("checkpoints", "storage")]
    return sum(found)


# Passes: plan, enforce, prune


def plan(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    """Per thread, each checkpoint a pass would delete (and why) and keep (and what keeps it)."""
    threads: list[Doc] = []
    doc.update(dry_run=True, threads=threads)
    reports = _passes(store, args, dry_run=True)
    for report in _spaced(reports, doc):
        threads.append(plan_of(report))
    doc.update(totals=totals(threads), legend=legend(threads), message=PLAN_ONLY)


def enforce(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    """A retention pass per thread, a dry run without `--apply`."""
    dry_run = not args.apply
    threads: list[Doc] = []
    doc.update(dry_run=dry_run, threads=threads)
    for report in _spaced(_passes(store, args, dry_run=dry_run), doc):
        threads.append(pass_of(report))
    doc.update(totals=totals(threads), legend=legend(threads))
    if dry_run:
        doc["message"] = DRY_RUN_ENFORCE
    else:
        deleted = sum(len(t["deleted"]) for t in threads)
        doc["message"] = f"deleted {many(deleted, 'checkpoint')} in {many(len(threads), 'thread')}"


def _passes(store: Store, args: argparse.Namespace, *, dry_run: bool) -> Iterator[RetentionReport]:
    """Each thread's pass under `args.policy` (which the command's `prepare` set)."""
    ids = known_threads(store, args.thread)
    policy: RetentionPolicy = args.policy
    channels: bool = args.channels
    reports = store.saver.enforce_retention(ids, policy, dry_run=dry_run, channels=channels)
    yield from Progress.of(args).over(reports, total=None if ids is None else len(ids))


def _spaced(reports: Iterable[RetentionReport], doc: Doc) -> Iterator[RetentionReport]:
    """`reports`, with the store's space on disk before the first pass and after the
    last (None: unknown, as after a dry run that deletes) in `doc["space"]`."""
    space: Doc = {"before": None, "after": None}
    for report in reports:
        if "space" not in doc:
            doc["space"] = space
            space["before"] = space_doc(report.before.space)
        space["after"] = None if report.after is None else space_doc(report.after.space)
        yield report


def prune(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    """Upstream's `prune` per thread: a dry run of what it would delete without `--apply`."""
    ids = known_threads(store, args.thread) or []
    strategy: str = args.strategy
    dry_run = not args.apply
    threads: list[Doc] = []
    doc.update(dry_run=dry_run, strategy=strategy, threads=threads)
    for thread_id in Progress.of(args).over(ids, total=len(ids)):
        threads.append(_pruned(store, thread_id, strategy, dry_run))
    doc.update(totals=totals(threads), legend=legend(threads))
    if dry_run:
        doc["message"] = DRY_RUN_PRUNE
    else:
        doc["message"] = f"pruned {many(len(threads), 'thread')} ({strategy})"


def _pruned(store: Store, thread_id: str, strategy: str, dry_run: bool) -> Doc:
    saver = store.saver
    if strategy == "keep_latest":
        if dry_run:
            return pass_of(
                saver.enforce_thread_retention(thread_id, keep_latest_policy(), dry_run=True)
            )
        before = saver.storage_stats(thread_id)
        saver.prune([thread_id], strategy="keep_latest")
        return _figures(thread_id, before, saver.storage_stats(thread_id))
    before = saver.storage_stats(thread_id)
    if dry_run:
        gone = StorageStats(thread_id, {name: TableStats(0, 0) for name in before.tables})
        return _figures(thread_id, before, gone)
    saver.prune([thread_id], strategy="delete")
    return _figures(thread_id, before, saver.storage_stats(thread_id))


def _figures(thread_id: str, before: StorageStats, after: StorageStats | None) -> Doc:
    return {"thread_id": thread_id, **figures(before, after)}


def plan_of(report: RetentionReport) -> Doc:
    """A plan as the output shows it: each checkpoint with its verdict."""
    delete = [{**key(k), "reason": str(r)} for k, r in sorted(report.deleted.items())]
    keep = [{**key(k), "protection": str(p)} for k, p in sorted(report.kept.items())]
    grafts = [
        {
            "checkpoint_ns": g.checkpoint_ns,
            "checkpoint_id": g.child_id,
            "new_parent_id": g.new_parent_id,
            "via": list(g.via),
        }
        for g in report.grafts
    ]
    return {
        "thread_id": report.thread_id,
        "delete": delete,
        "deferred": [key(k) for k in report.deferred],
        "keep": keep,
        "grafts": grafts,
        **figures(report.before, report.after),
    }


def pass_of(report: RetentionReport) -> Doc:
    """A pass as the output shows it: counts, and rows and bytes before and after."""
    return {
        "thread_id": report.thread_id,
        "deleted": [{**key(k), "reason": str(r)} for k, r in sorted(report.deleted.items())],
        "dropped": [key(k) for k in report.dropped],
        "deferred": [key(k) for k in report.deferred],
        "kept": len(report.kept),
        "protections": sorted({str(p) for p in report.kept.values()}),
        **figures(report.before, report.after),
    }


def figures(before: StorageStats, after: StorageStats | None) -> Doc:
    """Rows and bytes before and after (None: unknown), per table and in all; per
    channel too when they were measured per channel."""
    tables = {
        name: {
            "rows_before": t.rows,
            "rows_after": None if after is None else _table(after, name).rows,
            "bytes_before": t.bytes,
            "bytes_after": None if after is None else _table(after, name).bytes,
        }
        for name, t in before.tables.items()
    }
    shown = {
        "rows_before": before.rows,
        "rows_after": None if after is None else after.rows,
        "bytes_before": before.bytes,
        "bytes_after": None if after is None else after.bytes,
        "tables": tables,
    }
    if before.channels:
        shown["channels"] = channel_figures(before, after)
    return shown


CHANNEL_FIGURES = (
    "values_before",
    "values_after",
    "writes_before",
    "writes_after",
    "bytes_before",
    "bytes_after",
)


def channel_figures(before: StorageStats, after: StorageStats | None) -> Doc:
    """Per channel (the most bytes before first), its values, writes and bytes before and
    after (None: unknown)."""
    shown: Doc = {}
    for name in dict.fromkeys([*before.channels, *(after.channels if after else {})]):
        was = before.channels.get(name, ChannelStats())
        now = None if after is None else after.channels.get(name, ChannelStats())
        shown[name] = {
            "values_before": was.values,
            "values_after": None if now is None else now.values,
            "writes_before": was.writes,
            "writes_after": None if now is None else now.writes,
            "bytes_before": was.bytes,
            "bytes_after": None if now is None else now.bytes,
        }
    return shown


def _table(stats: StorageStats, name: str) -> TableStats:
    return stats.tables.get(name, TableStats(0, 0))


FIGURES = ("rows_before", "rows_after", "bytes_before", "bytes_after")


def totals(threads: Iterable[Doc]) -> Doc:
    """The threads' figures added up, per table and in all; None where any is unknown."""
    done = list(threads)
    total: Doc = {"threads": len(done), **{name: _sum(done, name) for name in FIGURES}}
    names = dict.fromkeys(name for t in done for name in t["tables"])
    total["tables"] = {
        name: {
            f: _sum([t["tables"][name] for t in done if name in t["tables"]], f) for f in FIGURES
        }
        for name in names
    }
    if any("channels" in t for t in done):
        channels = dict.fromkeys(name for t in done for name in t.get("channels", {}))
        summed = {
            name: {
                f: _sum([t["channels"][name] for t in done if name in t.get("channels", {})], f)
                for f in CHANNEL_FIGURES
            }
            for name in channels
        }
        total["channels"] = dict(sorted(summed.items(), key=lambda c: -(c[1]["bytes_before"] or 0)))
    return total


def _table_totals(threads: Sequence[Doc], name: str) -> Doc:
    found = [t["tables"][name] for t in threads if name in t["tables"]]
    return {figure: _sum(found, figure) for figure in FIGURES}


def _sum(docs: Sequence[Doc], name: str) -> int | None:
    values = [d[name] for d in docs]
    return None if None in values else sum(values)


def legend(threads: Iterable[Doc]) -> dict[str, str]:
    """A line for each reason, protection and outcome the threads name, in a stable order."""
    named: set[str] = set()
    for thread in threads:
        deletions: list[Doc] = thread.get("delete") or thread.get("deleted") or []
        named.update(d["reason"] for d in deletions)
        named.update(k["protection"] for k in thread.get("keep", []))
        named.update(thread.get("protections", []))
        named.update(o for o in ("dropped", "deferred") if thread.get(o))
    return {value: explain(value) for value in sorted(named)}


def key(node: tuple[str, str]) -> Doc:
    return {"checkpoint_ns": node[0], "checkpoint_id": node[1]}


def many(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


# Storage: stats, compact, index


def check_stats(args: argparse.Namespace, doc: Doc) -> None:
    """`--top` ranks the whole store: with `--thread` it would do nothing."""
    if args.thread is not None and args.top is not None:
        raise UsageError("--top ranks the whole store's threads: give it without --thread")


def stats(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    """Rows and bytes per table, channel and thread, and the store's space on disk."""
    channels = not args.no_channels
    named = known_threads(store, args.thread)
    if named is None:
        top = TOP_THREADS if args.top is None else args.top
        doc.update(stats_doc(store.saver.storage_stats(channels=channels, top_threads=top)))
        return
    shown = [
        stats_doc(store.saver.storage_stats(t, channels=channels))
        for t in Progress.of(args).over(named, total=len(named))
    ]
    if len(shown) == 1:
        doc.update(shown[0])
    else:
        doc["threads"] = shown


TOP_THREADS = 10
"""How many of the largest threads `stats` lists by default."""


def stats_doc(stats: StorageStats) -> Doc:
    """A `StorageStats` as the output shows it."""
    return {
        "thread_id": stats.thread_id,
        "tables": {n: {"rows": t.rows, "bytes": t.bytes} for n, t in stats.tables.items()},
        "rows": stats.rows,
        "bytes": stats.bytes,
        "channels": {
            n: {
                "values": c.values,
                "value_bytes": c.value_bytes,
                "writes": c.writes,
                "write_bytes": c.write_bytes,
            }
            for n, c in stats.channels.items()
        },
        "top_threads": [
            {"thread_id": t.thread_id, "rows": t.rows, "bytes": t.bytes} for t in stats.top_threads
        ],
        "space": space_doc(stats.space),
    }


def space_doc(space: SpaceStats | None) -> Doc | None:
    """A `SpaceStats` as the output shows it (None: not measured)."""
    if space is None:
        return None
    measures = {f.name: getattr(space, f.name) for f in fields(space)}
    return {**measures, "relations": dict(space.relations), "free_bytes": space.free_bytes}


def compact(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    """SQLite: vacuum once enough of the file is free; without `--apply`, whether it would."""
    min_ratio: float = args.min_free_ratio
    doc.update(dry_run=not args.apply, min_free_ratio=min_ratio)
    if args.apply:
        done = store.saver.compact_storage(min_ratio)
        size = done.page_size
        before = Pages(done.pages_before, done.free_pages_before, size, done.file_bytes_before)
        after = Pages(done.pages_after, done.free_pages_after, size, done.file_bytes_after)
        doc.update(would_run=done.ran, ran=done.ran, before=_pages(before), after=_pages(after))
        doc["why"] = why_compact(before, min_ratio)
        return
    backend = store.saver._backend
    assert backend is not None  # the command line opens supported savers only
    found = run(backend, measure(), Mode.READ)
    doc.update(would_run=found.worth_vacuum(min_ratio), ran=False, before=_pages(found))
    doc.update(why=why_compact(found, min_ratio), message=DRY_RUN_COMPACT)


def _pages(pages: Pages) -> Doc:
    return asdict(pages)


def why_compact(found: Pages, min_ratio: float) -> str:
    """Why a compaction would (or did) run or not, in the figures it decides by."""
    pages = f"{found.free_pages} of {found.pages} pages"
    if found.free_pages == 0:
        return f"no free pages ({pages}): nothing to give back"
    share = f"{found.free_ratio:.1%} of the file is free ({pages})"
    if found.worth_vacuum(min_ratio):
        freed = found.free_pages * found.page_size
        return f"{share}, at least --min-free-ratio {min_ratio:g}: gives back about {freed} bytes"
    return f"{share}, under --min-free-ratio {min_ratio:g}: not worth a VACUUM yet"


def index(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    """Postgres: the parent index and the reclaim records' table."""
    store.saver.create_retention_indexes()
    doc.update(ready=True, message="retention indexes ready")
