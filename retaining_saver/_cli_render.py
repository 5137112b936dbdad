"""The command line's documents as tables: rich on a terminal, tab-separated elsewhere.

Each command's renderer reads the (already masked) document `print_document`
would print as JSON, so the tables and `--json` say the same.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from retaining_saver._cli_output import Doc

FIGURES = ("rows_before", "rows_after", "bytes_before", "bytes_after")


def stats(doc: Doc) -> None:
    """`stats`: the tables, channels, largest threads and space of each thread or the store."""
    for shown in doc.get("threads") or [doc]:
        _stats_of(shown)


def _stats_of(doc: Doc) -> None:
    title = "whole store" if doc["thread_id"] is None else f"thread {doc['thread_id']}"
    rows = [[name, t["rows"], t["bytes"]] for name, t in doc["tables"].items()]
    table(title, ["table", "rows", "bytes"], [*rows, ["total", doc["rows"], doc["bytes"]]])
    channels = sorted(
        doc["channels"].items(), key=lambda c: -(c[1]["value_bytes"] + c[1]["write_bytes"])
    )
    if channels:
        header = ["channel", "values", "value bytes", "writes", "write bytes"]
        lines = [
            [n, c["values"], c["value_bytes"], c["writes"], c["write_bytes"]] for n, c in channels
        ]
        table(f"channels, {title}", header, lines)
    if doc["top_threads"]:
        top = [[t["thread_id"], t["rows"], t["bytes"]] for t in doc["top_threads"]]
        table(f"largest {len(top)} threads", ["thread", "rows", "bytes"], top)
    _space(doc["space"])


def _space(space: Doc | None) -> None:
    if space is None:
        return
    if space["relations"]:
        rows = [[name, size] for name, size in space["relations"].items()]
        table("Postgres relations (with TOAST and indexes)", ["relation", "bytes"], rows)
        return
    measures = ("file_bytes", "page_size", "pages", "free_pages", "free_bytes")
    rows = [[m.replace("_", " "), space[m]] for m in measures if space[m] is not None]
    if rows:
        table("SQLite file (whole store)", ["measure", "value"], rows)


def plan(doc: Doc) -> None:
    """`plan`: per thread, each checkpoint's verdict; then what it saves, and the legend."""
    for thread in doc["threads"]:
        _plan_of(thread)
    _totals(doc, "would be")
    _legend(doc)


def _plan_of(thread: Doc) -> None:
    deletes, keeps = thread["delete"], thread["keep"]
    title = f"plan for thread {thread['thread_id']}: {len(deletes)} to delete, {len(keeps)} to keep"
    rows = [["delete", d["checkpoint_ns"], d["checkpoint_id"], d["reason"]] for d in deletes]
    rows += [
        ["defer", d["checkpoint_ns"], d["checkpoint_id"], "deferred"] for d in thread["deferred"]
    ]
    rows += [
        ["re-parent", g["checkpoint_ns"], g["checkpoint_id"], f"onto {g['new_parent_id']}"]
        for g in thread["grafts"]
    ]
    rows += [["keep", k["checkpoint_ns"], k["checkpoint_id"], k["protection"]] for k in keeps]
    header = ["action", "namespace", "checkpoint", "why"]
    if sys.stdout.isatty() and not any(row[1] for row in rows):
        # Only the root namespace: a terminal's width is better spent on the ids.
        header, rows = [header[0], *header[2:]], [[r[0], *r[2:]] for r in rows]
    table(title, header, rows)


def passes(doc: Doc) -> None:
    """`enforce` and `prune`: per thread what went (or would), rows and bytes, the legend."""
    header = ["thread", "deleted", "deferred", "kept", *(f.replace("_", " ") for f in FIGURES)]
    rows = [
        [
            t["thread_id"],
            _count(t.get("deleted")),
            _count(t.get("deferred")),
            _count(t.get("kept")),
            *(_figure(t[f]) for f in FIGURES),
        ]
        for t in doc["threads"]
    ]
    name = "prune" if doc["command"] == "prune" else "retention"
    table(f"{name} (dry run)" if doc["dry_run"] else name, header, rows)
    _totals(doc, "would be" if doc["dry_run"] else "after")
    _legend(doc)


def _count(value: Any) -> Any:
    if value is None:
        return ""
    return len(value) if isinstance(value, list) else value


def _figure(value: int | None) -> Any:
    # After a pass, a figure may be unknown: its deletions committed, the read failed.
    return "?" if value is None else value


def _totals(doc: Doc, after: str) -> None:
    totals = doc.get("totals")
    if not totals or not totals["threads"]:
        return
    rows = [
        [name, *(_figure(t[f]) for f in FIGURES), _saved(t)] for name, t in totals["tables"].items()
    ]
    rows.append(["total", *(_figure(totals[f]) for f in FIGURES), _saved(totals)])
    header = ["table", "rows before", "rows after", "bytes before", "bytes after", "saved"]
    threads = totals["threads"]
    title = f"in all, {threads} thread{'' if threads == 1 else 's'}"
    title = f"{title} (after: as it {after})" if after != "after" else title
    table(title, header, rows)
    if totals.get("channels"):
        figures = ("values_before", "values_after", "bytes_before", "bytes_after")
        lines = [
            [name, *(_figure(c[f]) for f in figures), _saved(c)]
            for name, c in totals["channels"].items()
        ]
        header = ["channel", "values before", "values after", *header[3:]]
        table(f"per channel, {title}", header, lines)
    _space_change(doc.get("space"))


def _space_change(space: Doc | None) -> None:
    """The store's space on disk before the first pass and after the last."""
    if not space or space["before"] is None:
        return
    before, after = space["before"], space["after"] or {}
    if before["relations"]:
        names = dict.fromkeys([*before["relations"], *after.get("relations", {})])
        rows = [
            [n, before["relations"].get(n, ""), _figure(after.get("relations", {}).get(n))]
            for n in names
        ]
        table("Postgres relations (whole store)", ["relation", "bytes before", "after"], rows)
        return
    measures = ("file_bytes", "pages", "free_pages", "free_bytes")
    rows = [[m.replace("_", " "), before[m], _figure(after.get(m))] for m in measures]
    table("SQLite file (whole store)", ["measure", "before", "after"], rows)


def _saved(figures: Mapping[str, Any]) -> str:
    before, after = figures["bytes_before"], figures["bytes_after"]
    if before is None or after is None:
        return "?"
    share = f" ({(before - after) / before:.0%})" if before else ""
    return f"{before - after}{share}"


def _legend(doc: Doc) -> None:
    if doc.get("legend"):
        table("legend", ["value", "meaning"], list(doc["legend"].items()))


def compaction(doc: Doc) -> None:
    """`compact`: pages and bytes before (and after), and why it would or would not run."""
    verdict = "ran" if doc["ran"] else "would run" if doc["would_run"] else "not needed"
    after = doc.get("after", {})
    rows = [
        [name.replace("_", " "), value, after.get(name, "")]
        for name, value in doc["before"].items()
    ]
    table(f"compaction ({verdict})", ["measure", "before", "after"], rows)
    print(f"why: {doc['why']}")


def nothing(doc: Doc) -> None:
    """A command whose message says it all."""


def table(title: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A rich table on a terminal; tab-separated lines anywhere else, for scripts."""
    if sys.stdout.isatty():
        try:
            from rich import box
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            pass
        else:
            lines = [list(row) for row in rows]
            shown = Table(title=title, box=box.SIMPLE_HEAD)
            for index, column in enumerate(header):
                numbers = bool(lines) and all(isinstance(r[index], int) for r in lines)
                # Names and ids are never cut (up to 36, a checkpoint id); the last column wraps.
                last = index == len(header) - 1
                widest = 0 if last else max((len(str(r[index])) for r in lines), default=0)
                shown.add_column(
                    column, justify="right" if numbers else "left", min_width=min(widest, 36)
                )
            for line in lines:
                shown.add_row(*(str(cell) for cell in line))
            Console().print(shown)
            return
    print(title)
    for row in [header, *rows]:
        print("\t".join(str(cell) for cell in row))
