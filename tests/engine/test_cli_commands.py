"""What the command line's commands say and do: figures, legends, prune, history flags, stats.

Each runs the CLI as a subprocess on a real store made by a real graph (see cli_kit).
"""

from __future__ import annotations

import os
import pty
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_kit import (
    CLI,
    FIXTURES,
    PostgresStore,
    SqliteStore,
    cli,
    ids,
    pg_ids,
    snapshot,
)

from retaining_saver import Protection, Reason
from retaining_saver._cli_progress import Progress
from retaining_saver._rules._legend import PROTECTIONS, REASONS, explain

made_store, store, pg_store = FIXTURES  # pytest finds them here


def _copy_thread(path: Path, *thread_ids: str, ns: str = "") -> None:
    """Give each of `thread_ids` a copy of thread "cli"'s rows (in namespaces prefixed `ns`)."""
    conn = sqlite3.connect(path)
    with conn:
        for thread_id in thread_ids:
            conn.execute(
                "INSERT INTO checkpoints SELECT ?, ? || checkpoint_ns, checkpoint_id,"
                " parent_checkpoint_id, type, checkpoint, metadata FROM checkpoints"
                " WHERE thread_id = 'cli'",
                (thread_id, ns),
            )
            conn.execute(
                "INSERT INTO writes SELECT ?, ? || checkpoint_ns, checkpoint_id, task_id, idx,"
                " channel, type, value, task_path FROM writes WHERE thread_id = 'cli'",
                (thread_id, ns),
            )
    conn.close()


# Dry runs say what they would save


def _tables_after(doc: Any) -> dict[str, tuple[int, int]]:
    return {n: (t["rows_after"], t["bytes_after"]) for n, t in doc["totals"]["tables"].items()}


def test_a_dry_run_says_what_the_pass_then_leaves(store: SqliteStore) -> None:
    dry = cli("enforce", store.url, "--json")
    assert dry.code == 0, dry.err
    (thread,) = dry.json()["threads"]
    assert thread["rows_after"] == thread["rows_before"] - 1
    assert thread["bytes_after"] < thread["bytes_before"]
    applied = cli("enforce", store.url, "--apply", "--json")
    assert applied.code == 0, applied.err
    assert _tables_after(applied.json()) == _tables_after(dry.json())
    assert applied.json()["totals"]["rows_after"] == thread["rows_after"]


def test_postgres_dry_run_figures_are_what_apply_leaves(pg_store: PostgresStore) -> None:
    policy = ("--keep-runs", "0", "--min-age", "0")
    dry = cli("enforce", pg_store.url, *policy, "--json")
    assert dry.code == 0, dry.err
    totals = dry.json()["totals"]
    assert totals["tables"]["checkpoint_blobs"]["bytes_after"] < totals["bytes_before"]
    applied = cli("enforce", pg_store.url, *policy, "--apply", "--json")
    assert applied.code == 0, applied.err
    assert _tables_after(applied.json()) == _tables_after(dry.json())
    assert len(pg_ids(pg_store.dsn)) < totals["tables"]["checkpoints"]["rows_before"]


def test_plan_explains_every_value_it_names(store: SqliteStore) -> None:
    ran = cli("plan", store.url, "--json")
    assert ran.code == 0, ran.err
    legend = ran.json()["legend"]
    assert set(legend) == {"trailing-duration-leaf", "head", "ancestor"}
    assert legend["head"] == explain(Protection.HEAD)
    (thread,) = ran.json()["threads"]
    assert (thread["rows_before"] - thread["rows_after"], thread["bytes_after"] > 0) == (1, True)
    text = cli("plan", store.url).out.splitlines()
    assert f"trailing-duration-leaf\t{explain(Reason.TRAILING_DURATION_LEAF)}" in text
    totals = text.index("in all, 1 thread (after: as it would be)")
    assert text[totals + 1].startswith("table\trows before\trows after")


def test_every_reason_and_protection_has_one_line() -> None:
    assert set(REASONS) == set(Reason) and set(PROTECTIONS) == set(Protection)
    for line in [*REASONS.values(), *PROTECTIONS.values()]:
        assert line and "\n" not in line and len(line) < 120
    with pytest.raises(KeyError, match="no explanation"):
        explain("nope")


# History flags, prune, unknown threads


def test_history_flags_delete_with_apply_only(store: SqliteStore) -> None:
    every = ids(store.path)
    policy = ("--keep-runs", "1", "--compact-steps", "--min-age", "0")
    dry = cli("enforce", store.url, *policy, "--json")
    assert dry.code == 0, dry.err
    assert ids(store.path) == every
    assert dry.json()["policy"]["keep_runs"] == 1
    reasons = {d["reason"] for t in dry.json()["threads"] for d in t["deleted"]}
    assert "beyond-history-horizon" in reasons
    young = cli("enforce", store.url, "--keep-runs", "1", "--min-age", "7d", "--json")
    (left,) = young.json()["threads"]
    assert {d["reason"] for d in left["deleted"]} == {"trailing-duration-leaf"}
    assert "too-young" in young.json()["legend"]
    applied = cli("enforce", store.url, *policy, "--apply")
    assert applied.code == 0, applied.err
    assert len(ids(store.path)) == len(every) - len(dry.json()["threads"][0]["deleted"])


def test_prune_keeps_the_latest_or_deletes_the_thread(store: SqliteStore) -> None:
    _copy_thread(store.path, "other")
    every = ids(store.path)
    dry = cli("prune", store.url, "--thread", "cli", "--json")
    assert (dry.code, dry.json()["dry_run"], ids(store.path)) == (0, True, every), dry.err
    (planned,) = dry.json()["threads"]
    kept = cli("prune", store.url, "--thread", "cli", "--apply", "--json")
    assert kept.code == 0, kept.err
    assert len(ids(store.path)) == len(every) - len(planned["deleted"]) < len(every)
    assert kept.json()["totals"]["rows_after"] == planned["rows_after"]
    gone = cli("prune", store.url, "--thread", "other", "--strategy", "delete", "--apply")
    assert gone.code == 0, gone.err
    assert gone.out.splitlines()[-1] == "pruned 1 thread (delete)"
    assert ids(store.path, "other") == []


def test_an_unknown_thread_is_named_and_nothing_is_done(store: SqliteStore) -> None:
    every = ids(store.path)
    for command in ("plan", "enforce", "prune", "stats"):
        args = ["--apply"] if command in ("enforce", "prune") else []
        ran = cli(command, store.url, "--thread", "cli", "--thread", "nope", *args)
        assert ran.code == 1
        assert ran.error_line() == "retaining-saver: error: no checkpoints for thread 'nope'"
    assert ids(store.path) == every


# Compaction says why


def test_compact_says_why_it_would_or_would_not_run(store: SqliteStore) -> None:
    none_free = cli("compact", store.url, "--json").json()
    assert none_free["would_run"] is False
    assert none_free["why"].startswith("no free pages (0 of ")
    conn = sqlite3.connect(store.path)
    with conn:
        conn.execute("CREATE TABLE junk (b)")
        conn.execute("DROP TABLE junk")
    idle = cli("compact", store.url, "--json").json()
    assert idle["would_run"] is False
    assert "of the file is free (1 of " in idle["why"]
    assert "under --min-free-ratio 0.25: not worth a VACUUM yet" in idle["why"]
    with conn:
        conn.execute("CREATE TABLE junk AS SELECT randomblob(400000) AS b")
        conn.execute("DROP TABLE junk")
    conn.close()
    due = cli("compact", store.url)
    assert due.code == 0, due.err
    why = next(line for line in due.out.splitlines() if line.startswith("why: "))
    assert "of the file is free" in why and "at least --min-free-ratio 0.25" in why


# Statistics


def test_stats_per_channel_thread_and_file(store: SqliteStore) -> None:
    _copy_thread(store.path, "big", "big2")
    _copy_thread(store.path, "big", ns="copy")
    ran = cli("stats", store.url, "--top", "2", "--json")
    assert ran.code == 0, ran.err
    doc = ran.json()
    assert [t["thread_id"] for t in doc["top_threads"]] == ["big", "big2"]
    assert doc["top_threads"][0]["bytes"] == 2 * doc["top_threads"][1]["bytes"]
    said = doc["channels"]["said"]
    assert said["values"] > 0 and said["value_bytes"] > 0
    assert doc["space"]["file_bytes"] == store.path.stat().st_size
    assert doc["space"]["pages"] * doc["space"]["page_size"] == store.path.stat().st_size
    two = cli("stats", store.url, "--thread", "big", "--thread", "cli", "--json").json()
    rows = [t["tables"]["checkpoints"]["rows"] for t in two["threads"]]
    assert rows == [2 * rows[1], rows[1]]
    text = cli("stats", store.url, "--thread", "cli").out.splitlines()
    assert "channels, thread cli" in text and "SQLite file (whole store)" in text


def test_postgres_stats_name_the_channels_blobs_and_relations(pg_store: PostgresStore) -> None:
    ran = cli("stats", pg_store.url, "--json")
    assert ran.code == 0, ran.err
    doc = ran.json()
    blobs = doc["tables"]["checkpoint_blobs"]
    assert sum(c["value_bytes"] for c in doc["channels"].values()) >= blobs["bytes"]
    assert doc["channels"]["said"]["value_bytes"] > 0
    assert doc["top_threads"] == [{"thread_id": "cli", "rows": doc["rows"], "bytes": doc["bytes"]}]
    relations = doc["space"]["relations"]
    assert {"checkpoints", "checkpoint_blobs", "checkpoint_writes"} <= set(relations)
    assert all(size > 0 for size in relations.values())


# The terminal


def test_a_reader_that_stops_early_gets_no_traceback(store: SqliteStore) -> None:
    _copy_thread(store.path, *(f"t{i:03}" for i in range(150)))
    before = snapshot(store.path)
    with subprocess.Popen(
        [*CLI, "plan", store.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    ) as ran:
        assert ran.stdout is not None and ran.stderr is not None
        first = ran.stdout.readline()
        ran.stdout.close()  # as `| head -1` does
        err = ran.stderr.read()
        code = ran.wait(timeout=60)
    assert first == "plan for thread cli: 1 to delete, 12 to keep\n"
    assert (code, err) == (0, "")
    assert snapshot(store.path) == before


def test_progress_passes_every_item_through() -> None:
    assert list(Progress(shown=True).over(iter(range(5)), total=None)) == list(range(5))
    assert list(Progress(shown=False).over(["a"], total=1)) == ["a"]


def test_the_readme_legend_is_the_legend() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z0-9-]+)` \| (.+?) \|$", readme, flags=re.M))
    expected = {str(v): explain(v) for v in [*Reason, *Protection, "dropped", "deferred"]}
    assert {k: rows.get(k) for k in expected} == expected


def _on_a_terminal(*args: str) -> str:
    """What the CLI prints to a terminal (stdout and stderr both on one pseudo-terminal)."""
    leader, follower = pty.openpty()
    with subprocess.Popen(
        [*CLI, *args], stdout=follower, stderr=follower, stdin=subprocess.DEVNULL
    ) as ran:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed its end
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert ran.wait(timeout=60) == 0
    os.close(leader)
    return b"".join(chunks).decode()


def test_progress_shows_on_a_terminal_only_without_json(store: SqliteStore) -> None:
    bar = "━"  # rich's progress bar
    shown = _on_a_terminal("enforce", store.url)
    assert bar in shown and "threads" in shown
    assert bar not in _on_a_terminal("enforce", store.url, "--json")
    piped = cli("enforce", store.url)
    assert bar not in piped.out + piped.err


def test_postgres_prune_with_apply_only(pg_store: PostgresStore) -> None:
    every = pg_ids(pg_store.dsn)
    nope = cli("prune", pg_store.url, "--thread", "nope", "--apply")
    assert (nope.code, nope.error_line()) == (
        1,
        "retaining-saver: error: no checkpoints for thread 'nope'",
    )
    dry = cli("prune", pg_store.url, "--thread", "cli", "--json")
    assert (dry.code, pg_ids(pg_store.dsn)) == (0, every), dry.err
    (planned,) = dry.json()["threads"]
    assert planned["deleted"]
    done = cli("prune", pg_store.url, "--thread", "cli", "--apply", "--json")
    assert done.code == 0, done.err
    assert len(pg_ids(pg_store.dsn)) == len(every) - len(planned["deleted"])
    assert _tables_after(done.json()) == _tables_after(dry.json())
