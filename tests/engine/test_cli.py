"""The command line as an operator runs it: a subprocess on real SQLite files and Postgres.

Each store is made by running a real graph, then a duration leaf stamped on
it, so there is exactly one checkpoint a default pass may delete.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from savers import open_sync, open_sync_at

from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import chat_graph, thread, turn

CLI = (sys.executable, "-m", "retaining_saver.cli")
PASSWORD = "hunter2-Xq9"
PARENT_INDEX = "retaining_saver_checkpoints_parent_idx"


@dataclass(frozen=True)
class Ran:
    """One finished run of the command line."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def error_line(self) -> str:
        """The one stderr line an error prints; fails on anything more."""
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        return lines[0]


def _cli(*args: str, program: tuple[str, ...] = CLI, cwd: Path | None = None) -> Ran:
    done = subprocess.run(
        [*program, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


# Stores


@dataclass(frozen=True)
class SqliteStore:
    """A SQLite file holding thread "cli" and the id of its one deletable leaf."""

    path: Path
    leaf: str

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"


def _run_graph(saver: Any, thread_id: str = "cli") -> str:
    graph = chat_graph(saver)
    for i in range(3):
        graph.invoke(turn(i), thread(thread_id))
    leaf = write_duration_leaf(saver, thread_id)
    assert leaf is not None
    return leaf


@pytest.fixture(scope="module")
def made_store(tmp_path_factory: pytest.TempPathFactory) -> SqliteStore:
    """One store made by a real graph run; each test gets its own copy."""
    path = tmp_path_factory.mktemp("made") / "checkpoints.sqlite"
    with open_sync_at("sqlite", str(path)) as saver:
        leaf = _run_graph(saver)
    return SqliteStore(path, leaf)


@pytest.fixture
def store(made_store: SqliteStore, tmp_path: Path) -> SqliteStore:
    """A copy of the made store, in WAL mode as SqliteSaver leaves it; the name needs quoting."""
    path = tmp_path / "store #1 (copy).sqlite"
    shutil.copy(made_store.path, path)
    return SqliteStore(path, made_store.leaf)


def _read(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _ids(path: Path, thread_id: str = "cli") -> list[str]:
    sql = "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? ORDER BY 1"
    return [r[0] for r in _read(path, sql, thread_id)]


def _snapshot(path: Path) -> tuple[str, int, list[str]]:
    """The file's hash and mtime, and every name in its directory (no -wal/-journal appears)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest, path.stat().st_mtime_ns, sorted(os.listdir(path.parent))


def _rollback_journal(path: Path) -> None:
    """Leave WAL mode: setup() would switch back, and a reader leaves no -wal/-shm files."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()


# Read-only commands


def test_read_only_commands_leave_every_byte_of_the_file(store: SqliteStore) -> None:
    _rollback_journal(store.path)
    before = _snapshot(store.path)
    runs = [
        _cli(*args)
        for args in (
            ["stats", store.url],
            ["plan", "--sqlite", str(store.path), "--json"],
            ["enforce", "--target", store.url, "--prune-branches", "--graft-links"],
            ["compact", store.url, "--min-free-ratio", "0"],
        )
    ]
    assert [(r.code, r.err) for r in runs] == [(0, "")] * 4
    assert _snapshot(store.path) == before
    assert runs[2].out.splitlines()[-1] == "dry run: nothing changed; pass --apply to delete"
    assert runs[3].out.splitlines()[-1] == "dry run: nothing changed; pass --apply to vacuum"
    _assert_plans_only_the_leaf(runs[1].json(), store)


def _assert_plans_only_the_leaf(plan: Any, store: SqliteStore) -> None:
    """The plan deletes the leaf, keeps the head as head and every other as its ancestor."""
    every_id = _ids(store.path)
    (planned,) = plan["threads"]
    assert planned["thread_id"] == "cli"
    leaf = {"checkpoint_ns": "", "checkpoint_id": store.leaf, "reason": "trailing-duration-leaf"}
    assert planned["delete"] == [leaf]
    kept = {k["checkpoint_id"]: k["protection"] for k in planned["keep"]}
    assert sorted([*kept, store.leaf]) == every_id
    assert kept.pop(max(kept)) == "head"
    assert set(kept.values()) == {"ancestor"}


def test_plan_reads_a_wal_file_without_writing_a_page(store: SqliteStore) -> None:
    every_id = _ids(store.path)
    ran = _cli("plan", "--target", store.url, "--thread", "cli")
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert lines[0] == "plan for thread cli: 1 to delete, 12 to keep"
    assert f"delete\t\t{store.leaf}\ttrailing-duration-leaf" in lines
    assert lines[-1] == "plan only: nothing changed; enforce --apply carries it out"
    assert _ids(store.path) == every_id
    assert not _read(store.path, "SELECT name FROM sqlite_master WHERE name = ?", PARENT_INDEX)
    # SQLite's reader of a WAL file may create an empty -wal; a write would fill it.
    wal = Path(f"{store.path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0


# Writes only with --apply


def test_enforce_deletes_only_with_apply(store: SqliteStore) -> None:
    alias = _cli("enforce", store.url, "--dry-run", "--json")
    assert (alias.code, alias.json()["dry_run"]) == (0, True)
    assert alias.json()["message"] == "dry run: nothing changed; pass --apply to delete"
    assert store.leaf in _ids(store.path)
    applied = _cli("enforce", store.url, "--apply", "--json")
    assert applied.code == 0, applied.err
    (done,) = applied.json()["threads"]
    assert [d["checkpoint_id"] for d in done["deleted"]] == [store.leaf]
    assert done["rows_after"] < done["rows_before"]
    assert store.leaf not in _ids(store.path)


def test_compact_vacuums_only_with_apply(store: SqliteStore) -> None:
    conn = sqlite3.connect(store.path)
    with conn:
        conn.execute("CREATE TABLE junk AS SELECT randomblob(400000) AS b")
        conn.execute("DROP TABLE junk")
    conn.close()
    size = store.path.stat().st_size
    dry = _cli("compact", store.url, "--json").json()
    assert (dry["dry_run"], dry["would_run"], dry["ran"]) == (True, True, False)
    assert dry["message"] == "dry run: nothing changed; pass --apply to vacuum"
    assert store.path.stat().st_size == size
    done = _cli("compact", store.url, "--apply", "--json").json()
    assert done["ran"] is True
    assert done["after"]["file_bytes"] < done["before"]["file_bytes"]
    assert store.path.stat().st_size < size


# Stores that are not LangGraph's


def _other_tables(path: Path) -> None:
    sqlite3.connect(path).execute("CREATE TABLE other (x)").connection.close()


def _text(path: Path) -> None:
    path.write_text("not a database, but an operator's notes\n" * 200)


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (_other_tables, "is not a LangGraph SQLite store: no checkpoints, writes tables"),
        (_text, "as a SQLite database: file is not a database"),
    ],
    ids=["other-tables", "text"],
)
def test_a_file_that_is_not_a_langgraph_store_is_named_and_untouched(
    tmp_path: Path, make: Any, problem: str
) -> None:
    path = tmp_path / "other.db"
    make(path)
    before = _snapshot(path)
    ran = _cli("stats", f"sqlite:///{path}")
    assert ran.code == 1
    assert problem in ran.error_line()
    assert _snapshot(path) == before


# Runs that need no store, in one empty directory that must stay empty. Each
# costs an interpreter start, so they run three at a time, not one by one.

NEVER = "sqlite:///never-opened.sqlite"
MISSING = "missing.sqlite"
URL_DSN = f"postgresql://u:{PASSWORD}@127.0.0.1:1/db"

USAGE = {
    "hours-inf": (["enforce", NEVER, "--prune-branches", "--min-age-hours", "inf"], "finite"),
    "hours-nan": (["plan", NEVER, "--prune-branches", "--min-age-hours", "nan"], "finite"),
    "hours-negative": (["enforce", NEVER, "--min-age-hours", "-1"], ">= 0 hours"),
    "ratio-nan": (
        ["compact", NEVER, "--min-free-ratio", "nan"],
        "--min-free-ratio: must be a finite",
    ),
    "ratio-2": (["compact", NEVER, "--min-free-ratio", "2"], "within [0, 1]"),
    "max-delete-negative": (["enforce", NEVER, "--max-delete", "-1"], "--max-delete: must be >= 0"),
    "memory": (["stats", "sqlite:///:memory:"], "in-memory SQLite database"),
    "apply-and-dry-run": (["enforce", NEVER, "--apply", "--dry-run"], "not allowed with"),
    "compact-postgres": (["compact", "postgresql://u@127.0.0.1:1/db"], "compact is for SQLite"),
}

KEY_VALUE_DSN = f"host=127.0.0.1 port=1 password={PASSWORD}"
QUERY_DSN = f"postgresql://u@127.0.0.1:1/db?password={PASSWORD}"
BARE_DSN = f"u:{PASSWORD}@127.0.0.1:1/db"

PASSWORDS = {
    "unreachable": (["--postgres", URL_DSN], 1, "cannot connect to Postgres"),
    "echoed-by-driver": (["--postgres", BARE_DSN], 2, "after u:***@127.0.0.1:1/db"),
    "positional": ([BARE_DSN], 2, "what store 'u:***@127.0.0.1:1/db'"),
    # argparse quotes every extra argument back: each DSN form, once.
    "echoed-by-argparse": (
        [URL_DSN, KEY_VALUE_DSN, QUERY_DSN, BARE_DSN],
        2,
        "arguments: host=127.0.0.1 port=1 password=*** postgresql://u@127.0.0.1:1/db?password=***"
        " u:***@127.0.0.1:1/db",
    ),
}

STATELESS = {
    **{f"usage-{name}": args for name, (args, _) in USAGE.items()},
    **{f"password-{name}": ["stats", *args, "--json"] for name, (args, _, _) in PASSWORDS.items()},
    "missing": ["enforce", "--sqlite", MISSING],
    "debug": ["plan", f"postgres://u:{PASSWORD}@[::1/db", "--debug"],
    "help": ["--help"],
}


@dataclass(frozen=True)
class Batch:
    """The directory every stateless run ran in, and each run by name."""

    cwd: Path
    runs: dict[str, Ran]


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Batch:
    cwd = tmp_path_factory.mktemp("stateless")
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = {name: pool.submit(_cli, *args, cwd=cwd) for name, args in STATELESS.items()}
        return Batch(cwd, {name: run.result() for name, run in runs.items()})


@pytest.mark.parametrize("name", USAGE)
def test_a_bad_command_line_exits_2_in_one_line(batch: Batch, name: str) -> None:
    ran = batch.runs[f"usage-{name}"]
    assert (ran.code, ran.out) == (2, "")
    assert ran.error_line().startswith("retaining-saver: error: ")
    assert USAGE[name][1] in ran.error_line()
    assert os.listdir(batch.cwd) == []


def test_a_missing_file_is_an_error_never_a_new_database(batch: Batch) -> None:
    ran = batch.runs["missing"]
    assert ran.code == 1
    assert ran.error_line() == f"retaining-saver: error: no such SQLite file: {MISSING}"
    assert os.listdir(batch.cwd) == []


@pytest.mark.parametrize("name", PASSWORDS)
def test_a_password_never_reaches_the_output(batch: Batch, name: str) -> None:
    ran = batch.runs[f"password-{name}"]
    _, code, problem = PASSWORDS[name]
    assert ran.code == code
    assert PASSWORD not in ran.out + ran.err
    line = ran.error_line()
    assert problem in line.replace('"', "")
    # With --json the error is also one document on stdout.
    assert ran.json() == {"error": line.removeprefix("retaining-saver: error: ")}


def test_debug_prints_a_masked_traceback_then_the_error_line(batch: Batch) -> None:
    ran = batch.runs["debug"]
    assert ran.code == 2
    assert ran.err.startswith("Traceback (most recent call last):")
    # The driver's own error, chained, quotes the DSN: it is masked there too.
    assert "psycopg.ProgrammingError" in ran.err and "postgres://u:***@[::1/db" in ran.err
    assert ran.err.splitlines()[-1].startswith("retaining-saver: error: bad Postgres DSN")
    assert PASSWORD not in ran.out + ran.err


def test_help_lists_every_command_and_exits_0(batch: Batch) -> None:
    ran = batch.runs["help"]
    assert (ran.code, ran.err) == (0, "")
    listed = [line.split()[0] for line in ran.out.splitlines() if line.startswith("    ")]
    for command in ("stats", "plan", "enforce", "compact", "index"):
        assert command in listed


# A failure partway


def test_a_failure_partway_reports_the_threads_already_done(store: SqliteStore) -> None:
    conn = sqlite3.connect(store.path)
    with conn:
        # Thread "zzz", walked after "cli", holds checkpoints no serde can read.
        conn.execute(
            "INSERT INTO checkpoints SELECT 'zzz', checkpoint_ns, checkpoint_id,"
            " parent_checkpoint_id, 'no-such-serde', checkpoint, metadata FROM checkpoints"
        )
    conn.close()
    ran = _cli("enforce", store.url, "--apply", "--json")
    assert ran.code == 1
    report = ran.json()
    assert ran.error_line() == f"retaining-saver: error: {report['error']}"
    (done,) = report["partial"]["threads"]
    assert done["thread_id"] == "cli"
    assert [d["checkpoint_id"] for d in done["deleted"]] == [store.leaf]
    assert store.leaf not in _ids(store.path)
    assert store.leaf in _ids(store.path, "zzz")


# Postgres


@dataclass(frozen=True)
class PostgresStore:
    """A Postgres database holding thread "cli", with its leaf and a newest migration unrun."""

    dsn: str
    url: str
    leaf: str
    unrun_migration: int


def _pg(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def _url(dsn: str) -> str:
    """`dsn` as a postgresql:// URL, with a password the trust-auth server never asks for."""
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(dsn)
    host, port = p.get("host", "127.0.0.1"), p.get("port", "5432")
    return f"postgresql://{p.get('user', 'postgres')}:{PASSWORD}@{host}:{port}/{p['dbname']}"


FORGET_NEWEST_MIGRATION_SQL = """
DELETE FROM checkpoint_migrations WHERE v = (SELECT max(v) FROM checkpoint_migrations) RETURNING v
"""


@pytest.fixture
def pg_store(pg_dsn: str, request: pytest.FixtureRequest) -> Iterator[PostgresStore]:
    with open_sync("postgres", request) as saver:
        leaf = _run_graph(saver)
    # With its newest migration unrecorded, setup() would run it again and record it.
    ((newest,),) = _pg(pg_dsn, FORGET_NEWEST_MIGRATION_SQL)
    yield PostgresStore(pg_dsn, _url(pg_dsn), leaf, newest)


def _pg_ids(dsn: str) -> list[str]:
    return [r[0] for r in _pg(dsn, "SELECT checkpoint_id FROM checkpoints ORDER BY 1")]


def _ours(dsn: str) -> list[str]:
    """Every relation retaining-saver created: its index and its tables."""
    sql = "SELECT relname FROM pg_class WHERE relname LIKE %s ORDER BY 1"
    return [r[0] for r in _pg(dsn, sql, "retaining\\_saver\\_%")]


def test_postgres_read_only_commands_run_no_setup_and_write_nothing(
    pg_store: PostgresStore,
) -> None:
    every_id = _pg_ids(pg_store.dsn)
    stats = _cli("stats", pg_store.url, "--thread", "cli", "--json")
    assert stats.code == 0, stats.err
    assert stats.json()["tables"]["checkpoints"]["rows"] == len(every_id)
    dry = _cli("enforce", "--postgres", pg_store.dsn, "--json")
    assert (dry.code, dry.json()["dry_run"]) == (0, True), dry.err
    (planned,) = dry.json()["threads"]
    assert [d["checkpoint_id"] for d in planned["deleted"]] == [pg_store.leaf]
    assert dry.json()["message"] == "dry run: nothing changed; pass --apply to delete"
    assert PASSWORD not in stats.out + stats.err
    assert _pg_ids(pg_store.dsn) == every_id
    recorded = _pg(
        pg_store.dsn, "SELECT 1 FROM checkpoint_migrations WHERE v = %s", pg_store.unrun_migration
    )
    assert recorded == []
    assert _ours(pg_store.dsn) == []


def test_postgres_enforce_apply_then_index(pg_store: PostgresStore) -> None:
    applied = _cli("enforce", "--target", pg_store.url, "--apply")
    assert applied.code == 0, applied.err
    assert applied.out.splitlines()[-1] == "deleted 1 checkpoint in 1 thread"
    assert pg_store.leaf not in _pg_ids(pg_store.dsn)
    ready = _cli("index", pg_store.url, "--json")
    assert (ready.code, ready.json()["ready"]) == (0, True)
    assert PARENT_INDEX in _ours(pg_store.dsn)


def test_postgres_without_langgraph_tables_is_an_error_and_stays_empty(pg_dsn: str) -> None:
    ran = _cli("plan", "--postgres", pg_dsn, "--json")
    assert ran.code == 1
    assert "no checkpoints, checkpoint_blobs, checkpoint_writes tables" in ran.json()["error"]
    tables = "SELECT 1 FROM information_schema.tables WHERE table_schema = 'public'"
    assert _pg(pg_dsn, tables) == []


# Log records


def test_log_records_reach_stderr_masked_one_line_each(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process, as no real store makes the engine or a driver log on demand."""
    from retaining_saver import cli

    stats = cli._COMMANDS["stats"]

    def logging_stats(*args: Any) -> None:
        logging.getLogger("retaining_saver").warning("read failed: %s\nretried", URL_DSN)
        stats(*args)

    monkeypatch.setitem(cli._COMMANDS, "stats", logging_stats)
    assert cli.main(["stats", store.url, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["tables"]["checkpoints"]["rows"] == len(_ids(store.path))
    line = "retaining-saver: warning: read failed: postgresql://u:***@127.0.0.1:1/db; retried"
    assert err.splitlines() == [line]


# Entry points


def test_the_installed_console_script_runs(store: SqliteStore) -> None:
    script = Path(sys.executable).with_name("retaining-saver")
    if not script.exists():
        pytest.skip(f"no console script at {script}: install the package")
    ran = _cli("stats", store.url, "--json", program=(str(script),))
    assert ran.code == 0, ran.err
    assert ran.json()["tables"]["checkpoints"]["rows"] == len(_ids(store.path))
