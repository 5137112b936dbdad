"""Storage per thread under the history rules (issue #13), on SQLite and PostgreSQL.

    python benchmarks/bench_storage.py [--backends sqlite,postgres] [--turns 10,20,40] [--full]

Writes a plain three-node chat (no duration stamps) with about 6.5 KB of new
message text a turn, for each turn count, on the bare saver. Each thread is
copied row for row four times, and one engine pass runs on each copy:
step compaction, the history horizon at N=10, and at N=0, and
`prune(strategy="keep_latest")`. It prints rows and
bytes per thread against the bare thread, and how bytes grow from the shortest
thread to the longest under each rule against how the live state grows (the
head checkpoint's own bytes, serialized, uncompressed; Postgres's bytes are
`pg_column_size`, after TOAST compression). `--full` runs 50, 100 and 200
turns; that takes several minutes and a few GB of SQLite file. Nothing here is
timed.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import string
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common
from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver import RetainingSaver, RetentionPolicy, StorageStats
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import chat_graph, thread

TEXT_PER_TURN = 6500
QUICK_TURNS = (10, 20, 40)
FULL_TURNS = (50, 100, 200)
MIN_AGE = timedelta(hours=1)
LATER = datetime.now(UTC) + timedelta(days=1)  # every checkpoint is older than MIN_AGE
PRUNE = "keep_latest (prune)"
RULES: tuple[tuple[str, RetentionPolicy | None], ...] = (
    ("bare", None),
    ("compact", RetentionPolicy(compact_steps=True, history_min_age=MIN_AGE)),
    ("horizon N=10", RetentionPolicy(history_keep_runs=10, history_min_age=MIN_AGE)),
    ("horizon N=0", RetentionPolicy(history_keep_runs=0, history_min_age=MIN_AGE)),
    (PRUNE, None),
)
HORIZON_GOAL = 1.2
"""Under the horizon, bytes must grow at most this much faster than the live state."""


def user_turn(i: int) -> dict[str, Any]:
    """Half the turn's new text; the graph's reply echoes it, which makes the other half.

    Random words, not one repeated letter: Postgres compresses large values
    (TOAST), and a run of "x" would compress to nothing.
    """
    rng = random.Random(i)
    words = ("".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(800))
    return {"said": [f"user {i} " + " ".join(words)[: TEXT_PER_TURN // 2]]}


def build_chat(inner: BaseCheckpointSaver[Any], thread_id: str, turns: int) -> None:
    graph = chat_graph(inner)
    for i in range(turns):
        graph.invoke(user_turn(i), thread(thread_id))


# Copying a thread row for row, so that each rule starts from the same bytes


@contextmanager
def open_sqlite(directory: str) -> Iterator[tuple[BaseCheckpointSaver[Any], Callable[..., Any]]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(Path(directory) / "bench.sqlite"), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()

        def copy(source: str, target: str) -> None:
            for table in ("checkpoints", "writes"):
                columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
                _copy_rows(conn.execute, table, columns, "?", source, target)
            conn.commit()

        yield saver, copy
    finally:
        conn.close()


@contextmanager
def open_postgres(dsn: str) -> Iterator[tuple[BaseCheckpointSaver[Any], Callable[..., Any]]]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(dsn) as saver, psycopg.connect(dsn) as conn:
        saver.setup()

        def copy(source: str, target: str) -> None:
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                columns = _common.pg_columns(conn, table)
                _copy_rows(conn.execute, table, columns, "%s", source, target)
            conn.commit()

        yield saver, copy


def _copy_rows(
    execute: Callable[..., Any],
    table: str,
    columns: Sequence[str],
    placeholder: str,
    source: str,
    target: str,
) -> None:
    rest = [c for c in columns if c != "thread_id"]
    names = ", ".join(["thread_id", *rest])
    execute(
        f"INSERT INTO {table} ({names}) SELECT {placeholder}, {', '.join(rest)} "
        f"FROM {table} WHERE thread_id = {placeholder}",
        (target, source),
    )


# Measuring


def _newest_row_bytes(saver: RetainingSaver, thread_id: str) -> int:
    """The serialized head checkpoint with its values: the thread's live state."""
    inner = saver.inner
    head = inner.get_tuple(thread(thread_id))
    assert head is not None
    typed = inner.serde.dumps_typed(head.checkpoint)
    return len(typed[1])


def measure(
    name: str, inner: BaseCheckpointSaver[Any], copy: Callable[[str, str], None], turns: int
) -> tuple[dict[str, StorageStats], int, bool]:
    base = f"t{turns}"
    build_chat(inner, base, turns)
    saver = RetainingSaver(inner, admission="off")
    found: dict[str, StorageStats] = {}
    clean = True
    for label, policy in RULES:
        if label == "bare":
            found[label] = saver.enforce_thread_retention(base, dry_run=True).before
            continue
        target = f"{base}-{label}"
        copy(base, target)
        if policy is None:  # prune(strategy="keep_latest")
            saver.prune([target])
            found[label] = saver.storage_stats(target)
            clean = clean and integrity(inner, target).clean
            continue
        report = saver.enforce_thread_retention(target, policy, now=LATER)
        assert report.after is not None and not report.dropped, (name, label)
        found[label] = report.after
        clean = clean and integrity(inner, target).clean
    return found, _newest_row_bytes(saver, base), clean


def run_backend(
    name: str,
    inner: BaseCheckpointSaver[Any],
    copy: Callable[[str, str], None],
    turns: Sequence[int],
) -> tuple[list[list[Any]], list[list[Any]]]:
    rows: list[list[Any]] = []
    by_turns: dict[int, tuple[dict[str, StorageStats], int]] = {}
    for count in turns:
        found, live, clean = measure(name, inner, copy, count)
        by_turns[count] = (found, live)
        bare = found["bare"]
        for label, stats in found.items():
            rows.append(
                [
                    name,
                    count,
                    label,
                    stats.rows,
                    f"{stats.bytes:,}",
                    f"{stats.bytes / bare.bytes:.3f}",
                    f"{live:,}",
                    "yes" if clean else "NO",
                ]
            )
    first, last = min(turns), max(turns)
    (low, low_live), (high, high_live) = by_turns[first], by_turns[last]
    growth = []
    for label, _ in RULES:
        ratio, live = high[label].bytes / low[label].bytes, high_live / low_live
        goal = "" if label != "horizon N=10" else ("yes" if ratio <= HORIZON_GOAL * live else "NO")
        growth.append([name, label, f"{ratio:.2f}", f"{live:.2f}", f"{ratio / live:.2f}", goal])
    return rows, growth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--turns", default=",".join(map(str, QUICK_TURNS)))
    parser.add_argument("--full", action="store_true", help="50, 100 and 200 turns")
    args = parser.parse_args()
    turns = FULL_TURNS if args.full else tuple(int(t) for t in args.turns.split(","))
    kinds = [k.strip() for k in args.backends.split(",") if k.strip()]
    rows: list[list[Any]] = []
    growth: list[list[Any]] = []
    if "sqlite" in kinds:
        with tempfile.TemporaryDirectory() as directory, open_sqlite(directory) as (inner, copy):
            more, grown = run_backend("sqlite", inner, copy, turns)
            rows, growth = rows + more, growth + grown
    if "postgres" in kinds:
        server = _common.pg_server_dsn()
        reason = _common.pg_unreachable(server)
        if reason is not None:
            print(f"postgres skipped: {server} is unreachable ({reason})")
        else:
            dsn = _common.create_database(server)
            try:
                with open_postgres(dsn) as (inner, copy):
                    more, grown = run_backend("postgres", inner, copy, turns)
                    rows, growth = rows + more, growth + grown
            finally:
                _common.drop_database(server, dsn)
    _common.print_table(
        f"Rows and bytes per thread: a plain chat, ~{TEXT_PER_TURN:,} B of new text a turn, "
        "one engine pass per rule on a copy of the bare thread",
        ["backend", "turns", "rule", "rows", "bytes", "x bare", "live state B", "integrity clean"],
        rows,
    )
    _common.print_table(
        f"Growth from {min(turns)} to {max(turns)} turns: bytes under each rule vs live state",
        [
            "backend",
            "rule",
            "bytes ratio",
            "live state ratio",
            "bytes / live",
            f"horizon <= {HORIZON_GOAL}x",
        ],
        growth,
    )


if __name__ == "__main__":
    main()
