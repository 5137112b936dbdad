"""`benchmarks/run_all.py --render` redraws the plots and page from a results file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_render_from_the_committed_results(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "benchmarks"  # as in the checkout, so the image links match
    out.mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "benchmarks" / "results.json", out / "results.json")
    doc = tmp_path / "docs" / "benchmarks.md"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "run_all.py"),
            "--render",
            "--out",
            str(out),
            "--doc",
            str(doc),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for name in ("growth.png", "admission.png", "prune.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    page = doc.read_text()
    for heading in ("## Storage growth", "## Admission cost", "## Engine passes", "## prune"):
        assert heading in page
    # The page names the machine and the versions it was measured with.
    assert "CPUs, Python" in page and "langgraph " in page
    # The committed page is what the committed results render to.
    assert page == (ROOT / "docs" / "benchmarks.md").read_text()
