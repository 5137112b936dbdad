"""`retaining-saver demo`, run as a user runs it: the console script, as a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(sys.executable).parent / "retaining-saver"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False
    )


def table_rows(stdout: str) -> dict[str, list[str]]:
    """The demo's table: label -> [checkpoints, writes, bytes, x bare]."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("way ")) + 2
    rows = {}
    for line in lines[start:]:
        if not line.strip():
            break
        label, rest = line[:26].strip(), line[26:].split()
        rows[label] = rest[:4]
    return rows


def test_demo_prints_each_way_smaller_than_bare_and_the_same_state(tmp_path: Path) -> None:
    done = run_cli("demo", "--turns", "5")
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stdout)
    assert list(rows) == [
        "bare SqliteSaver",
        "drop-in (admission)",
        "+ compact_steps",
        "+ history_keep_runs=3",
        "retention= (keep_runs=3)",
        "+ prune(keep_latest)",
    ]
    checkpoints = {label: int(row[0]) for label, row in rows.items()}
    # Four checkpoints a turn and a stamp after each: the bare thread holds all of them.
    assert checkpoints["bare SqliteSaver"] == 5 * 5
    # Admission reclaims every stamp but the last (no run came after it).
    assert checkpoints["drop-in (admission)"] == 5 * 4 + 1
    # Compaction drops the middle super-step of each run; the engine takes the last stamp too.
    assert checkpoints["+ compact_steps"] == 5 * 3
    assert checkpoints["+ history_keep_runs=3"] == 3 * 4
    # As runs are admitted: the horizon's runs and the one just admitted, no engine call.
    assert checkpoints["retention= (keep_runs=3)"] <= 4 * 4 + 1
    assert checkpoints["+ prune(keep_latest)"] == 1
    sizes = [int(row[2].replace(",", "")) for row in rows.values()]
    assert sizes[0] > max(sizes[1:])
    assert "every thread ends in the same state as the bare one: yes" in done.stdout


def test_demo_keeps_its_file_for_the_other_commands(tmp_path: Path) -> None:
    path = tmp_path / "kept.sqlite"
    done = run_cli("demo", "--turns", "2", "--keep", str(path))
    assert done.returncode == 0, done.stderr
    assert f"retaining-saver stats sqlite:///{path}" in done.stdout
    stats = run_cli("stats", f"sqlite:///{path}", "--thread", "bare", "--json")
    assert stats.returncode == 0, stats.stderr
    assert '"rows": ' in stats.stdout

    again = run_cli("demo", "--keep", str(path))
    assert again.returncode == 2
    assert "the file exists" in again.stderr


def test_demo_refuses_a_bad_turn_count() -> None:
    done = run_cli("demo", "--turns", "0")
    assert done.returncode == 2
    assert "--turns: must be >= 1" in done.stderr


def test_demo_into_a_reader_that_stops_early_ends_quietly() -> None:
    reader = subprocess.Popen(
        [str(SCRIPT), "demo", "--turns", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stderr is not None
    assert reader.stdout.readline().startswith("A 2-turn chat")
    reader.stdout.close()  # as `| head -1` does
    errors = reader.stderr.read()
    assert reader.wait(timeout=120) == 0
    assert "Traceback" not in errors
