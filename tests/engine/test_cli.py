"""The command line as an operator runs it: a subprocess on real SQLite files and Postgres."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_kit import (
    CLI,
    FIXTURES,
    PARENT_INDEX,
    PASSWORD,
    PostgresStore,
    Ran,
    SqliteStore,
    cli,
    ids,
    ours,
    pg_ids,
    pg_rows,
    read,
    rollback_journal,
    snapshot,
)

# Read-only commands

made_store, store, pg_store = FIXTURES  # pytest finds them here


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_read_only_commands_leave_every_byte_of_the_file(store: SqliteStore, journal: str) -> None:
    """In WAL mode (as SqliteSaver leaves a file) no -wal or -shm file appears either."""
    if journal == "delete":
        rollback_journal(store.path)
    before = snapshot(store.path)
    runs = [
        cli(*args)
        for args in (
            ["stats", store.url],
            ["stats", store.url, "--thread", "cli", "--json"],
            ["plan", "--sqlite", str(store.path), "--json"],
            ["enforce", "--target", store.url, "--prune-branches", "--min-age", "0"],
            ["enforce", store.url, "--keep-runs", "0", "--compact-steps", "--min-age", "0"],
            ["prune", store.url, "--thread", "cli"],
            ["prune", store.url, "--thread", "cli", "--strategy", "delete"],
            ["compact", store.url, "--min-free-ratio", "0"],
        )
    ]
    assert [(r.code, r.err) for r in runs] == [(0, "")] * len(runs)
    assert snapshot(store.path) == before
    assert runs[3].out.splitlines()[-1] == "dry run: nothing changed; pass --apply to delete"
    assert runs[5].out.splitlines()[-1] == "dry run: nothing changed; pass --apply to prune"
    assert runs[-1].out.splitlines()[-1] == "dry run: nothing changed; pass --apply to vacuum"
    _assert_plans_only_the_leaf(runs[2].json(), store)


def _assert_plans_only_the_leaf(plan: Any, store: SqliteStore) -> None:
    """The plan deletes the leaf, keeps the head as head and every other as its ancestor."""
    every_id = ids(store.path)
    (planned,) = plan["threads"]
    assert planned["thread_id"] == "cli"
    leaf = {"checkpoint_ns": "", "checkpoint_id": store.leaf, "reason": "trailing-duration-leaf"}
    assert planned["delete"] == [leaf]
    kept = {k["checkpoint_id"]: k["protection"] for k in planned["keep"]}
    assert sorted([*kept, store.leaf]) == every_id
    assert kept.pop(max(kept)) == "head"
    assert set(kept.values()) == {"ancestor"}


def test_plan_reads_a_wal_file_without_writing_a_page(store: SqliteStore) -> None:
    before = snapshot(store.path)
    ran = cli("plan", "--target", store.url, "--thread", "cli")
    assert snapshot(store.path) == before
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert lines[0] == "plan for thread cli: 1 to delete, 12 to keep"
    assert f"delete\t\t{store.leaf}\ttrailing-duration-leaf" in lines
    assert lines[-1] == "plan only: nothing changed; enforce --apply carries it out"
    assert not read(store.path, "SELECT name FROM sqlite_master WHERE name = ?", PARENT_INDEX)


def test_a_live_writer_s_wal_is_read_as_a_reader_does(store: SqliteStore) -> None:
    """With a writer holding the file open, its -wal is read (not the stale main file)."""
    writer = sqlite3.connect(store.path)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        with writer:
            writer.execute(
                "INSERT INTO checkpoints SELECT 'live', checkpoint_ns, checkpoint_id,"
                " parent_checkpoint_id, type, checkpoint, metadata FROM checkpoints"
            )
        assert Path(f"{store.path}-wal").stat().st_size > 0
        ran = cli("stats", store.url, "--thread", "live", "--json", "--no-channels")
    finally:
        writer.close()
    assert ran.code == 0, ran.err
    assert ran.json()["tables"]["checkpoints"]["rows"] == len(ids(store.path))


# Writes only with --apply


def test_enforce_deletes_only_with_apply(store: SqliteStore) -> None:
    alias = cli("enforce", store.url, "--dry-run", "--json")
    assert (alias.code, alias.json()["dry_run"]) == (0, True)
    assert alias.json()["message"] == "dry run: nothing changed; pass --apply to delete"
    assert store.leaf in ids(store.path)
    applied = cli("enforce", store.url, "--apply", "--json")
    assert applied.code == 0, applied.err
    (done,) = applied.json()["threads"]
    assert [d["checkpoint_id"] for d in done["deleted"]] == [store.leaf]
    assert done["rows_after"] < done["rows_before"]
    assert store.leaf not in ids(store.path)


def test_compact_vacuums_only_with_apply(store: SqliteStore) -> None:
    conn = sqlite3.connect(store.path)
    with conn:
        conn.execute("CREATE TABLE junk AS SELECT randomblob(400000) AS b")
        conn.execute("DROP TABLE junk")
    conn.close()
    size = store.path.stat().st_size
    dry = cli("compact", store.url, "--json").json()
    assert (dry["dry_run"], dry["would_run"], dry["ran"]) == (True, True, False)
    assert dry["message"] == "dry run: nothing changed; pass --apply to vacuum"
    assert store.path.stat().st_size == size
    done = cli("compact", store.url, "--apply", "--json").json()
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
    before = snapshot(path)
    ran = cli("stats", f"sqlite:///{path}")
    assert ran.code == 1
    assert problem in ran.error_line()
    assert snapshot(path) == before


# Runs that need no store, in one empty directory that must stay empty. Each
# costs an interpreter start, so they run three at a time, not one by one.

NEVER = "sqlite:///never-opened.sqlite"
MISSING = "missing.sqlite"
URL_DSN = f"postgresql://u:{PASSWORD}@127.0.0.1:1/db"

USAGE = {
    "age-inf": (["enforce", NEVER, "--prune-branches", "--min-age", "inf"], "a duration such"),
    "age-nan": (["plan", NEVER, "--prune-branches", "--min-age", "nan"], "a duration such"),
    "age-negative": (["enforce", NEVER, "--keep-runs", "1", "--min-age=-1d"], "duration"),
    "age-unit": (["enforce", NEVER, "--keep-runs", "1", "--min-age", "7w"], "7d, 12h, 30m"),
    "age-too-long": (["plan", NEVER, "--compact-steps", "--min-age", "9" * 12 + "d"], "too long"),
    "no-min-age": (
        ["enforce", NEVER, "--prune-branches", "--keep-runs", "3"],
        "--prune-branches, --keep-runs deletes checkpoints a client may still hold: give --min-age",
    ),
    "min-age-alone": (["plan", NEVER, "--min-age", "7d"], "--min-age does nothing without"),
    "top-with-thread": (["stats", NEVER, "--thread", "t", "--top", "3"], "without --thread"),
    "empty-thread": (["plan", NEVER, "--thread", ""], "a thread id cannot be empty"),
    "prune-no-thread": (["prune", NEVER], "the following arguments are required: --thread"),
    "prune-strategy": (["prune", NEVER, "--thread", "t", "--strategy", "x"], "invalid choice"),
    "apply-on-plan": (["plan", NEVER, "--apply"], "unrecognized arguments: --apply"),
    "ratio-on-enforce": (["enforce", NEVER, "--min-free-ratio", "0.5"], "unrecognized"),
    "old-hours-flag": (["enforce", NEVER, "--min-age-hours", "1"], "unrecognized"),
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
    "version": ["--version"],
    "module": ["--version"],
}

PROGRAMS = {"module": (sys.executable, "-m", "retaining_saver")}


@dataclass(frozen=True)
class Batch:
    """The directory every stateless run ran in, and each run by name."""

    cwd: Path
    runs: dict[str, Ran]


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Batch:
    cwd = tmp_path_factory.mktemp("stateless")
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = {
            name: pool.submit(cli, *args, cwd=cwd, program=PROGRAMS.get(name, CLI))
            for name, args in STATELESS.items()
        }
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
    for command in ("stats", "plan", "enforce", "prune", "compact", "index"):
        assert command in listed


def test_version_from_the_script_and_python_m(batch: Batch) -> None:
    from retaining_saver import __version__

    for name in ("version", "module"):
        ran = batch.runs[name]
        assert (ran.code, ran.out, ran.err) == (0, f"retaining-saver {__version__}\n", "")


def test_the_command_line_starts_without_building_graphs() -> None:
    """Only `demo` builds graphs: every other command starts without `langgraph.graph`
    (and what it pulls in), about 0.6 s of a 1.2 s start before."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, retaining_saver.cli; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "'retaining_saver.cli'" in loaded
    assert "'langgraph.graph'" not in loaded and "'retaining_saver._demo'" not in loaded


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
    ran = cli("enforce", store.url, "--apply", "--json")
    assert ran.code == 1
    report = ran.json()
    assert ran.error_line() == f"retaining-saver: error: {report['error']}"
    (done,) = report["partial"]["threads"]
    assert done["thread_id"] == "cli"
    assert [d["checkpoint_id"] for d in done["deleted"]] == [store.leaf]
    assert store.leaf not in ids(store.path)
    assert store.leaf in ids(store.path, "zzz")


# Postgres


def test_postgres_read_only_commands_run_no_setup_and_write_nothing(
    pg_store: PostgresStore,
) -> None:
    every_id = pg_ids(pg_store.dsn)
    stats = cli("stats", pg_store.url, "--thread", "cli", "--json")
    assert stats.code == 0, stats.err
    assert stats.json()["tables"]["checkpoints"]["rows"] == len(every_id)
    dry = cli("enforce", "--postgres", pg_store.dsn, "--json")
    assert (dry.code, dry.json()["dry_run"]) == (0, True), dry.err
    (planned,) = dry.json()["threads"]
    assert [d["checkpoint_id"] for d in planned["deleted"]] == [pg_store.leaf]
    assert dry.json()["message"] == "dry run: nothing changed; pass --apply to delete"
    assert PASSWORD not in stats.out + stats.err
    assert pg_ids(pg_store.dsn) == every_id
    recorded = pg_rows(
        pg_store.dsn, "SELECT 1 FROM checkpoint_migrations WHERE v = %s", pg_store.unrun_migration
    )
    assert recorded == []
    assert ours(pg_store.dsn) == []


def test_postgres_enforce_apply_then_index(pg_store: PostgresStore) -> None:
    applied = cli("enforce", "--target", pg_store.url, "--apply")
    assert applied.code == 0, applied.err
    assert applied.out.splitlines()[-1] == "deleted 1 checkpoint in 1 thread"
    assert pg_store.leaf not in pg_ids(pg_store.dsn)
    ready = cli("index", pg_store.url, "--json")
    assert (ready.code, ready.json()["ready"]) == (0, True)
    assert PARENT_INDEX in ours(pg_store.dsn)


def test_postgres_without_langgraph_tables_is_an_error_and_stays_empty(pg_dsn: str) -> None:
    ran = cli("plan", "--postgres", pg_dsn, "--json")
    assert ran.code == 1
    assert "no checkpoints, checkpoint_blobs, checkpoint_writes tables" in ran.json()["error"]
    tables = "SELECT 1 FROM information_schema.tables WHERE table_schema = 'public'"
    assert pg_rows(pg_dsn, tables) == []


# Log records


def test_log_records_reach_stderr_masked_one_line_each(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process, as no real store makes the engine or a driver log on demand."""
    from retaining_saver import cli as module

    stats = module.COMMANDS["stats"]

    def logging_stats(*args: Any) -> None:
        logging.getLogger("retaining_saver").warning("read failed: %s\nretried", URL_DSN)
        stats.run(*args)

    monkeypatch.setitem(module.COMMANDS, "stats", dataclasses.replace(stats, run=logging_stats))
    assert module.main(["stats", store.url, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["tables"]["checkpoints"]["rows"] == len(ids(store.path))
    line = "retaining-saver: warning: read failed: postgresql://u:***@127.0.0.1:1/db; retried"
    assert err.splitlines() == [line]


# Entry points


def test_the_installed_console_script_runs(store: SqliteStore) -> None:
    script = Path(sys.executable).with_name("retaining-saver")
    if not script.exists():
        pytest.skip(f"no console script at {script}: install the package")
    ran = cli("stats", store.url, "--json", program=(str(script),))
    assert ran.code == 0, ran.err
    assert ran.json()["tables"]["checkpoints"]["rows"] == len(ids(store.path))
