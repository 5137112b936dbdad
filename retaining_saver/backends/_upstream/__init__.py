"""Every upstream internal a fast path relies on, as audited, and the check against it.

The backends answer some reads themselves, running the saver's own statements
and building tuples as the saver does, because that costs less than the
saver's own call (see each backend's docstring). Those fast paths lean on names
and statement texts that upstream does not promise to keep. They are listed
here, with the versions they were audited against. At construction
`drift(saver)` compares the installed saver with this list; a backend that
drifted turns its fast paths off, with one warning, and answers through the
saver's own calls instead. Correctness never depends on an unaudited internal:
a fast path that fails at run time falls back too (see `RetainingSaver`).

The builders that copy the savers' private readers (`tuples`) live beside this
audit: every private name they touch is listed here (a test holds them to it).
Deletions and the lineage reads use only the tables' documented columns.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

AUDITED_VERSIONS = {
    "langgraph": "1.2.24",
    "langgraph-checkpoint": "4.3.2",
    "langgraph-checkpoint-sqlite": "3.1.2",
    "langgraph-checkpoint-postgres": "3.2.0",
    "aiosqlite": "0.22.1",
}
"""The newest versions whose internals below were read and tested (CI runs the pins and the
newest versions `pyproject.toml` admits)."""

# `BasePostgresSaver.SELECT_SQL`, which the Postgres backend runs to the letter and
# splices into its takes, and whose columns its tuple builder reads.
POSTGRES_SELECT_SQL_SHA256 = "30c981d76fc864fcd396bb0f887847ff884e866b754a11588a9a61c7f52c260f"

# Checkpoints written before migration 4 need the saver's pending-sends migration; a new
# migration may mean a new branch in the saver's read that the builder does not know.
POSTGRES_MIGRATIONS = 10

POSTGRES_ATTRIBUTES = ("_cursor", "_load_blobs", "_load_writes", "pipe")

# `pending_writes_sql(True)` and `(False)`, run by the SQLite head read and take.
SQLITE_PENDING_WRITES_SQL_SHA256 = (
    "5cc4e8454ca089bb21f7d697e0348d004f1f62812d0791b94776e3539a13f3eb"
)

SQLITE_ATTRIBUTES = ("_has_task_path", "lock", "conn")

# aiosqlite runs a callable on its connection thread with `_execute`; `_conn` is the
# `sqlite3.Connection` living there.
AIOSQLITE_ATTRIBUTES = ("_execute",)

MEMORY_ATTRIBUTES = ("storage", "writes", "blobs", "_load_blobs", "_ordered_writes")


def delta_snapshot(value: Any) -> Any:
    """`value` as LangGraph stores a DeltaChannel's value whole: its `_DeltaSnapshot`
    (langgraph-checkpoint's serde, a private name), which every saver serializes and
    every reader of the channel unwraps.

    Raises:
        ImportError: If the installed langgraph-checkpoint has no such type; values
            are then never materialised (see `Lineage.stores_whole`).
    """
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    return _DeltaSnapshot(value)


@functools.cache
def stores_delta_snapshots() -> bool:
    """Whether the installed langgraph-checkpoint has the type `delta_snapshot` stores a
    value as (a lineage's `stores_whole`)."""
    try:
        delta_snapshot(None)
    except ImportError:
        return False
    return True


def delta_value(spec: Any, history: Mapping[str, Any]) -> tuple[bool, Any]:
    """What a DeltaChannel `spec` holds once rebuilt from `history` (a saver's
    `get_delta_channel_history` entry), as LangGraph's loader rebuilds it: whether it
    holds a value, and the value. The empty seed is LangGraph's private `MISSING`."""
    from langgraph._internal._typing import MISSING
    from langgraph.errors import EmptyChannelError

    channel = spec.from_checkpoint(history.get("seed", MISSING))
    channel.replay_writes(history.get("writes", []))
    try:
        return True, channel.get()
    except EmptyChannelError:
        return False, None


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _missing(target: Any, names: tuple[str, ...], where: str) -> list[str]:
    return [f"{where}.{name} is gone" for name in names if not hasattr(target, name)]


def _postgres_drift(saver: Any) -> list[str]:
    from langgraph.checkpoint.postgres.base import MIGRATIONS, BasePostgresSaver

    found = _missing(saver, POSTGRES_ATTRIBUTES, type(saver).__name__)
    if _sha256(BasePostgresSaver.SELECT_SQL) != POSTGRES_SELECT_SQL_SHA256:
        found.append("BasePostgresSaver.SELECT_SQL changed")
    if len(MIGRATIONS) != POSTGRES_MIGRATIONS:
        found.append(f"the saver has {len(MIGRATIONS)} migrations, not {POSTGRES_MIGRATIONS}")
    return found


def _sqlite_drift(saver: Any) -> list[str]:
    import aiosqlite
    from langgraph.checkpoint.sqlite import utils

    found = _missing(saver, SQLITE_ATTRIBUTES, type(saver).__name__)
    found += _missing(aiosqlite.Connection, AIOSQLITE_ATTRIBUTES, "aiosqlite.Connection")
    make_sql = getattr(utils, "pending_writes_sql", None)
    if make_sql is None or not hasattr(utils, "load_pending_writes"):
        found.append("langgraph.checkpoint.sqlite.utils lost its pending-writes helpers")
    elif _sha256(make_sql(True) + "\n" + make_sql(False)) != SQLITE_PENDING_WRITES_SQL_SHA256:
        found.append("pending_writes_sql changed")
    return found


def _memory_drift(saver: Any) -> list[str]:
    return _missing(saver, MEMORY_ATTRIBUTES, type(saver).__name__)


_CHECKS: dict[str, Callable[[Any], list[str]]] = {
    "postgres": _postgres_drift,
    "sqlite": _sqlite_drift,
    "memory": _memory_drift,
}


def drift(kind: str, saver: Any) -> list[str]:
    """What no longer matches the audited internals of a `kind` saver; empty if all does."""
    try:
        return _CHECKS[kind](saver)
    except Exception as error:  # an import or attribute that moved is drift too
        return [f"checking the saver's internals failed: {error!r}"]


def installed_versions() -> dict[str, str | None]:
    """The installed version of each audited distribution (None if not installed)."""
    found: dict[str, str | None] = {}
    for name in AUDITED_VERSIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found
