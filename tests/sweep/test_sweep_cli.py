"""`retaining-saver sweep` as an operator runs it: a subprocess on a SQLite file and on
Postgres. A dry run changes nothing; --apply deletes exactly the idle threads."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from savers import open_sync, store
from sweep_kit import INTERRUPTED, OLD, VETOED, YOUNG, SweepClock, set_clock, write_scene

from retaining_saver.testing.graphs import thread

CLI = (sys.executable, "-m", "retaining_saver.cli")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SweepClock:
    return set_clock(monkeypatch)


def _sweep(target: str, *args: str) -> tuple[int, Any, str]:
    done = subprocess.run(
        [*CLI, "sweep", target, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    parsed = json.loads(done.stdout) if "--json" in args and done.stdout else done.stdout
    return done.returncode, parsed, done.stderr


def _url(dsn: str) -> str:
    """A key=value DSN as the postgresql:// URL an operator gives as TARGET."""
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(dsn)
    user = p.get("user", "postgres")
    return f"postgresql://{user}@{p.get('host')}:{p.get('port', 5432)}/{p['dbname']}"


def _present(kind: str, request: pytest.FixtureRequest) -> set[str]:
    with open_sync(kind, request) as bare:
        threads = (*OLD, VETOED, INTERRUPTED, YOUNG)
        return {t for t in threads if bare.get_tuple(thread(t)) is not None}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_sweep_is_a_dry_run_until_apply(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    # The subprocess reads the wall clock: old threads three weeks back, young one ten
    # days after them.
    clock.advance(-timedelta(days=22))
    with open_sync(kind, request) as bare:
        write_scene(bare, clock)
    target = store(kind, request)
    url = f"sqlite:///{target}" if kind == "sqlite" else _url(target)
    idle_for = "15d"
    code, doc, err = _sweep(url, "--idle-for", idle_for, "--json")
    assert code == 0, err
    assert doc["dry_run"] and doc["message"].startswith("dry run")
    would = {t["thread_id"] for t in doc["threads"] if t["outcome"] == "would-delete"}
    assert would == {*OLD, VETOED}  # no veto from a shell
    assert _present(kind, request) == {*OLD, VETOED, INTERRUPTED, YOUNG}
    code, doc, err = _sweep(url, "--idle-for", idle_for, "--limit", "2", "--apply", "--json")
    assert code == 0, err
    assert [t["outcome"] for t in doc["threads"]] == ["deleted", "deleted"]
    code, text, err = _sweep(url, "--idle-for", idle_for, "--apply")
    assert code == 0, err
    assert "swept 2 idle threads" in text
    assert _present(kind, request) == {INTERRUPTED, YOUNG}


def test_sweep_refuses_a_bad_duration(sqlite_path: str) -> None:
    code, _, err = _sweep(f"sqlite:///{sqlite_path}", "--idle-for", "7 days")
    assert code == 2 and "--idle-for" in err and "7d" in err


@pytest.mark.parametrize("bad", ["-1", "inf", "fast"])
def test_sweep_refuses_a_bad_pace(sqlite_path: str, bad: str) -> None:
    code, _, err = _sweep(f"sqlite:///{sqlite_path}", "--idle-for", "7d", f"--pace={bad}")
    assert code == 2 and "--pace" in err and bad in err


def test_sweep_takes_a_pace(sqlite_path: str) -> None:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    with sqlite3.connect(sqlite_path) as conn:
        SqliteSaver(conn).setup()
    code, doc, err = _sweep(f"sqlite:///{sqlite_path}", "--idle-for", "7d", "--pace", "9", "--json")
    assert code == 0, err
    assert doc["dry_run"]
