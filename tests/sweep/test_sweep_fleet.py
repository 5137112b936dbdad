"""Four processes, each running a `RetentionSweeper` on one Postgres database while
graph runs go on: every idle thread is deleted exactly once, with no errors, no lost
runs, and no dangling parent, orphan write or orphan blob left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from savers import open_sync
from sweep_kit import set_clock

from retaining_saver import RetainingSaver
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import chat_graph, thread, turn

WORKER = Path(__file__).parents[1] / "sweep_worker.py"
REPO = WORKER.parent.parent
PROCESSES = 4
IDLE = [f"idle-{i:03d}" for i in range(40)]
LIVE = [[f"live-{p}-{i}" for i in range(3)] for p in range(PROCESSES)]
TURNS = 4


def test_four_sweepers_on_one_postgres(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dsn = str(request.getfixturevalue("pg_dsn"))
    with open_sync("postgres", request) as bare:
        saver = RetainingSaver(bare)
        clock = set_clock(monkeypatch)
        clock.advance(-timedelta(days=30))  # the idle threads' checkpoints: a month old
        chat = chat_graph(bare)
        for thread_id in IDLE:
            chat.invoke(turn(0), thread(thread_id))
        monkeypatch.undo()  # the live threads' runs: the wall clock
        for threads in LIVE:
            for thread_id in threads:
                chat.invoke(turn(0), thread(thread_id))
        saver.create_retention_indexes()
        done = _run_fleet(dsn, tmp_path)
        handled = [h for s in done for h in s["handled"]]
        deleted = Counter(t for t, outcome in handled if outcome == "deleted")
        assert deleted == Counter(IDLE)  # each idle thread once, by one of the four
        assert {t for t, _ in handled} <= set(IDLE)  # no live thread was ever a candidate
        assert [e for s in done for e in s["errors"]] == []
        assert sum(s["failed"] for s in done) == 0
        turns = Counter({t: n for s in done for t, n in s["turns"].items()})
        for thread_id in IDLE:
            assert bare.get_tuple(thread(thread_id)) is None
            assert integrity(bare, thread_id).clean
        for threads in LIVE:
            for thread_id in threads:
                assert turns[thread_id] == TURNS
                said = chat.get_state(thread(thread_id)).values["said"]
                assert len(said) == 2 * (1 + TURNS)  # no run lost
                assert integrity(bare, thread_id).clean


def _run_fleet(dsn: str, tmp_path: Path) -> list[dict[str, object]]:
    config = {
        "dsn": dsn,
        "processes": PROCESSES,
        "live": LIVE,
        "turns": TURNS,
        "idle_days": 7,
        "sweep_limit": 5,
        "page_size": 4,
        "max_passes": 200,
        "outdir": str(tmp_path),
    }
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(WORKER), json.dumps(config)],
        capture_output=True,
        cwd=str(REPO),
        env=env,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-5000:]
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    crashes = [s.get("crash") for s in result["summaries"] if "crash" in s]
    assert result["exit_codes"] == [0] * PROCESSES, crashes
    summaries: list[dict[str, object]] = result["summaries"]
    return summaries
