"""Each example in examples/ runs as its docstring says, against a real store."""

from __future__ import annotations

import asyncio
import importlib.util
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from retaining_saver.testing.checks import integrity

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    """Import examples/<name>.py as a module of its own."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # LangGraph reads the State's annotations through sys.modules[State.__module__].
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_script(name: str) -> subprocess.CompletedProcess[str]:
    """Run examples/<name>.py as a user runs it, with this interpreter."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_quickstart_runs_as_a_script() -> None:
    done = run_script("quickstart")
    assert done.returncode == 0, done.stderr
    assert "reclaimed=2" in done.stdout
    # Logging at INFO shows one line per reclaimed stamp.
    assert done.stderr.count("retaining_saver: reclaimed checkpoint") == 2


def test_demo_sqlite_runs_as_a_script() -> None:
    done = run_script("demo_sqlite")
    assert done.returncode == 0, done.stderr
    assert "duration stamps reclaimed at admission: 2" in done.stdout


def test_quickstart_leaves_every_turn_and_one_stamp(tmp_path: Path) -> None:
    stayed = load("quickstart").main(tmp_path / "q.sqlite", turns=4)
    # START -> reply: three checkpoints a turn, and the last run's stamp.
    assert stayed == {"reclaimed": 3, "checkpoints": 4 * 3 + 1}


def test_fastapi_lifespan_on_async_postgres(pg_dsn: str) -> None:
    from fastapi.testclient import TestClient

    module = load("fastapi_postgres")
    with TestClient(module.create_app(pg_dsn)) as client:
        for text in ("hi", "how are you?", "bye"):
            answer = client.post("/threads/t1/messages", json={"text": text})
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"reply": f"echo: {text}"}
        stats = client.get("/threads/t1/stats").json()
    assert stats["reclaimed"] == 2
    assert stats["tables"]["checkpoints"]["rows"] == 3 * 3 + 1


def test_gateway_reclaims_every_stamp_but_the_last_under_its_lock(tmp_path: Path) -> None:
    module = load("gateway_explicit")
    gateway = asyncio.run(module.main(tmp_path / "gateway.sqlite", turns=3))
    # Two threads, three turns each: the stamps of the first two runs of each went.
    assert gateway.saver.counters.reclaimed == 4
    # With admission="explicit" no read cleans up by itself: only aadmit() does.
    assert gateway.saver.counters.attempted == 6


def test_gateway_history_matches_a_thread_never_stamped(tmp_path: Path) -> None:
    module = load("gateway_explicit")

    async def histories() -> tuple[list[object], list[object]]:
        async with module.make_checkpointer(tmp_path / "g.sqlite") as checkpointer:
            gateway = module.Gateway(checkpointer)
            for turn in range(3):
                await gateway.run("stamped", f"q{turn}")
                config = {"configurable": {"thread_id": "plain"}}
                await gateway.graph.ainvoke({"messages": [f"q{turn}"]}, config)
            await gateway.saver.aadmit("stamped")  # the next run's admission, without the run
            return [
                [s.values async for s in gateway.graph.aget_state_history(_config(t))]
                for t in ("stamped", "plain")
            ]

    stamped, plain = asyncio.run(histories())
    assert stamped == plain


def _config(thread_id: str) -> dict[str, dict[str, str]]:
    return {"configurable": {"thread_id": thread_id}}


@pytest.mark.parametrize("dry_run", [True, False])
def test_nightly_maintenance_bounds_history(tmp_path: Path, dry_run: bool) -> None:
    path = tmp_path / "app.sqlite"
    load("quickstart").main(path, turns=6)
    stored = path.read_bytes()
    summary = load("nightly_maintenance").main(
        path, keep_runs=2, min_age=timedelta(0), dry_run=dry_run
    )
    # Six turns of three checkpoints and a stamp: the newest two runs stay, each
    # compacted to its input, first and last step (all three here), the stamp goes.
    assert summary["threads"] == 1
    assert summary["deleted"] == 6 * 3 + 1 - 2 * 3
    if dry_run:
        # Nothing changes, and the figures say what the real pass would leave.
        assert path.read_bytes() == stored
        assert not summary["vacuumed"]
        applied = load("nightly_maintenance").main(path, keep_runs=2, min_age=timedelta(0))
        assert summary["rows_after"] == applied["rows_after"] < summary["rows_before"]
        return
    assert summary["rows_after"] < summary["rows_before"]

    with sqlite3.connect(path) as conn:
        assert integrity(SqliteSaver(conn), "t1").clean
