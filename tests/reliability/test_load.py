"""Load suite: 4 OS processes x 50 asyncio tasks on one store, stopping by themselves.

Each process (tests/load_worker.py forks them from one interpreter that
imported everything once) runs one `RetainingSaver` over its own
async saver and connection, on one Postgres database (127.0.0.1) or one
SQLite file in WAL mode, and its tasks mix chat turns, stamps, engine
passes, explicit admissions, history walks with pinned reads, and storage
statistics over a few threads, for `RETAINING_SAVER_LOAD_SECONDS` seconds
(default 3) or `RETAINING_SAVER_LOAD_MAX_OPS` operations per process
(default 1500), whichever ends first. Writes and deletions of a thread run
under a cross-process reservation of it, as the deployment requirement
asks; reads race with everything.

Long profile: `RETAINING_SAVER_LOAD_SECONDS=300 RETAINING_SAVER_LOAD_MAX_OPS=0
.venv/bin/pytest tests/reliability/test_load.py -s` (0: no cap on operations).

Goals: no errors, no invariant violations, no cleanup failures or warnings,
reclaims happened, and at the end every thread holds exactly the messages
its turns added, with clean integrity and an unbroken lineage.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from savers import open_sync

from retaining_saver import RetainingSaver
from retaining_saver.testing.checks import integrity, walk
from retaining_saver.testing.graphs import chat_graph, thread, turn

WORKER = Path(__file__).parents[1] / "load_worker.py"  # tests/, beside the kits it imports
REPO = WORKER.parent.parent
PROCESSES = 4
TASKS = 50
THREADS = [f"load-{i}" for i in range(6)]
SECONDS = float(os.environ.get("RETAINING_SAVER_LOAD_SECONDS", "3"))
MAX_OPS = int(os.environ.get("RETAINING_SAVER_LOAD_MAX_OPS", "1500")) or 10**9
START_TIMEOUT = 60.0
LEAD_SECONDS = 0.3


def _readline(proc: subprocess.Popen[bytes], timeout: float, stderr: Path) -> dict[str, Any]:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else b""
    if not line:
        raise AssertionError(
            f"load worker {proc.pid} sent nothing (exit {proc.poll()}); stderr:\n"
            + stderr.read_text(errors="replace")[-5000:]
        )
    reply: dict[str, Any] = json.loads(line)
    return reply


def prepare(bare: BaseCheckpointSaver[Any]) -> None:
    graph = chat_graph(bare)
    for thread_id in THREADS:
        graph.invoke(turn(0), thread(thread_id))


def run_load(kind: str, target: str, tmp_path: Path) -> list[dict[str, Any]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    lockdir = tmp_path / "reservations"
    lockdir.mkdir()
    config = {
        "kind": kind,
        "target": target,
        "processes": PROCESSES,
        "threads": THREADS,
        "tasks": TASKS,
        "seconds": SECONDS,
        "max_ops": MAX_OPS,
        "lockdir": str(lockdir),
        "seed": 14,
    }
    stderr = tmp_path / "load.stderr"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=str(REPO),
            env=env,
        )
    try:
        pids = _readline(proc, START_TIMEOUT, stderr)["ready"]
        assert len(set(pids)) == PROCESSES
        assert proc.stdin is not None
        proc.stdin.write((json.dumps({"go": time.time() + LEAD_SECONDS}) + "\n").encode())
        proc.stdin.flush()
        done = _readline(proc, SECONDS + START_TIMEOUT, stderr)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
    failed = stderr.read_text(errors="replace")[-5000:]
    assert done["exit_codes"] == [0] * PROCESSES, failed
    summaries: list[dict[str, Any]] = done["summaries"]
    assert len({s["pid"] for s in summaries}) == PROCESSES
    return summaries


def verify(kind: str, bare: BaseCheckpointSaver[Any], summaries: list[dict[str, Any]]) -> None:
    ops: Counter[str] = Counter()
    turns: Counter[str] = Counter()
    for summary in summaries:
        ops.update(summary["ops"])
        turns.update(summary["turns"])
    errors = [e for s in summaries for e in s["errors"]]
    error_count = sum(s["error_count"] for s in summaries)
    violations = [v for s in summaries for v in s["violations"]]
    warnings = [w for s in summaries for w in s["warnings"]]
    failed = sum(s["counters"]["failed"] for s in summaries)
    admission_reclaims = sum(s["counters"]["reclaimed"] for s in summaries)
    engine_reclaims = sum(s["engine_reclaims"] for s in summaries)
    graph = chat_graph(RetainingSaver(bare))
    final: dict[str, tuple[int, int]] = {}
    broken: list[str] = []
    for thread_id in THREADS:
        said = graph.get_state(thread(thread_id)).values["said"]
        final[thread_id] = (len(said), 2 + 2 * turns[thread_id])
        found = integrity(bare, thread_id)
        if not found.clean:
            broken.append(f"{thread_id}: {found}")
        list(walk(bare, thread(thread_id)))  # raises on a missing ancestor
    seconds = max(s["seconds"] for s in summaries)
    print(
        f"\n{kind}: {ops.total()} operations in {seconds}s {dict(sorted(ops.items()))}; "
        f"errors {error_count}; cleanup failures {failed}; warnings {len(warnings)}; "
        f"reclaims {admission_reclaims} by admission + {engine_reclaims} by the engine; "
        f"violations {len(violations)}; final messages (got, expected) {final}"
    )
    assert error_count == 0, errors
    assert not violations, violations
    assert failed == 0 and not warnings, warnings
    assert not broken, broken
    assert all(got == expected for got, expected in final.values()), final
    assert ops["turn"] and ops["stamp"] and ops["engine"] and ops["history"], ops
    assert admission_reclaims + engine_reclaims > 0, "the load reclaimed nothing"


def test_load_postgres(pg_dsn: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    with open_sync("postgres", request) as bare:
        RetainingSaver(bare).create_retention_indexes()
        prepare(bare)
        summaries = run_load("postgres", pg_dsn, tmp_path)
        verify("postgres", bare, summaries)


def test_load_sqlite(sqlite_path: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    with open_sync("sqlite", request) as bare:
        bare.setup()  # type: ignore[attr-defined]
        assert bare.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        prepare(bare)
        summaries = run_load("sqlite", sqlite_path, tmp_path)
        verify("sqlite", bare, summaries)
