"""Helpers the benchmark scripts share: databases, thread builders, tables, statistics."""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

# Run as `python benchmarks/x.py` from a checkout: make the package importable.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from retaining_saver.testing import awrite_duration_leaf, write_duration_leaf  # noqa: E402
from retaining_saver.testing.graphs import chat_graph, thread, turn  # noqa: E402

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
TURNS = 20
# 0-based indexes of the turns whose final checkpoint each regenerate forks from, in order.
REGENERATE_FROM = (15, 5, 12, 3, 9)


# PostgreSQL: a fresh database per run, dropped afterwards.


def pg_server_dsn() -> str:
    return os.environ.get("RETAINING_SAVER_PG_DSN", DEFAULT_PG_DSN)


def pg_unreachable(server: str) -> str | None:
    """Why the server cannot be used, or None."""
    try:
        import psycopg

        with psycopg.connect(server, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def required_pg_server() -> str:
    """The server DSN, or exit naming why it is unreachable (for Postgres-only benchmarks)."""
    server = pg_server_dsn()
    reason = pg_unreachable(server)
    if reason is not None:
        raise SystemExit(f"PostgreSQL is unreachable: {reason}")
    return server


def create_database(server: str) -> str:
    """Create an empty database on `server`; return its DSN."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"retaining_saver_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    params = conninfo_to_dict(server)
    params["dbname"] = name
    return make_conninfo(**params)


def drop_database(server: str, dsn: str) -> None:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def copy_database(server: str, template_dsn: str) -> str:
    """A new database on `server` made from `template_dsn`'s (its template), for an
    identical copy of a store."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    source = conninfo_to_dict(template_dsn)["dbname"]
    target = f"{source}_copy_{time.monotonic_ns() % 10**9}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{target}" TEMPLATE "{source}"')
    return make_conninfo(**{**conninfo_to_dict(server), "dbname": target})


def pg_columns(conn: Any, table: str) -> list[str]:
    """`table`'s column names, in order, on a psycopg connection."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        (table,),
    )
    return [row[0] for row in rows]


# Threads


def root(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def head_id(inner: BaseCheckpointSaver[Any], thread_id: str) -> str:
    head = inner.get_tuple(root(thread_id))
    assert head is not None
    return str(head.checkpoint["id"])


def build_chat(inner: BaseCheckpointSaver[Any], thread_id: str, turns: int = TURNS) -> list[str]:
    """`turns` chat turns on the bare saver, a duration leaf after each; the final ids.

    Each next turn reads "latest", which is the previous leaf, so it forks from
    it: `turns - 1` duration-only chain links and one trailing leaf.
    """
    graph = chat_graph(inner)
    finals = []
    for i in range(turns):
        graph.invoke(turn(i), thread(thread_id))
        finals.append(head_id(inner, thread_id))
        write_duration_leaf(inner, thread_id, f"run-{i}")
    return finals


def regenerate(inner: BaseCheckpointSaver[Any], thread_id: str, finals: Sequence[str]) -> None:
    """A new turn from each of REGENERATE_FROM's final checkpoints, a duration leaf after each."""
    graph = chat_graph(inner)
    for n, index in enumerate(REGENERATE_FROM):
        graph.invoke(turn(100 + n), thread(thread_id, finals[index]))
        write_duration_leaf(inner, thread_id, f"regen-{n}")


async def abuild_chat(inner: BaseCheckpointSaver[Any], thread_id: str, turns: int) -> None:
    """Async `build_chat`, without the trailing leaf after the last turn."""
    graph = chat_graph(inner)
    for i in range(turns):
        await graph.ainvoke(turn(i), thread(thread_id))
        if i < turns - 1:
            await awrite_duration_leaf(inner, thread_id, f"run-{i}")


# Output


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table with `rich` when it is installed, else aligned plain text."""
    cells = [[str(c) for c in row] for row in rows]
    try:
        from rich import box
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(columns)]
        print(f"\n{title}")
        print("  ".join(h.rjust(w) for h, w in zip(columns, widths, strict=True)))
        for row in cells:
            print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        return
    table = Table(title=title, box=box.SIMPLE_HEAVY, title_justify="left")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for row in cells:
        table.add_row(*row)
    Console(width=200, highlight=False).print(table)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


# Garbage collection


@contextmanager
def full_collections() -> Iterator[list[float]]:
    """The duration, in ms, of each full (oldest-generation) cyclic collection the
    interpreter runs inside the block: what a stretch of calls paid for the whole
    process's heap, whatever the calls themselves did."""
    durations: list[float] = []
    started: list[float] = []

    def record(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            durations.append((time.perf_counter() - started.pop()) * 1_000)

    gc.callbacks.append(record)
    try:
        yield durations
    finally:
        gc.callbacks.remove(record)


@contextmanager
def frozen_heap(frozen: bool) -> Iterator[None]:
    """With `frozen`, the process's objects frozen (`gc.freeze()`) for the block, as
    long-running servers do: a full collection then scans only what the block keeps
    alive, not the whole heap (the imports' objects, tens of ms a collection)."""
    if not frozen:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def full_collection_ms() -> float:
    """How long one full `gc.collect()` of this process's heap takes now, in ms."""
    start = time.perf_counter()
    gc.collect()
    return (time.perf_counter() - start) * 1_000


def collections_paid(paid: Sequence[float], one_collection: float) -> str:
    """What `full_collections` recorded, next to one `gc.collect()` of the same heap."""
    each = ", ".join(f"{ms:.0f}" for ms in paid) or "-"
    return (
        f"the stretch paid {len(paid)} full collection(s) ({each} ms); one gc.collect() of "
        f"this process's {len(gc.get_objects()):,} tracked objects took {one_collection:.0f} ms"
    )
