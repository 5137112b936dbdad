"""Two checkouts of the package side by side: a full `"delete"` pass of each on its own
copy of one store, alternating, and the ratio of their idle threads per second.

    python benchmarks/bench_sweep_ab.py --old /path/to/old/checkout [--new .]
        [--threads 20000] [--rounds 6]

The store is `bench_sweep.py`'s template (`--threads` threads, a tenth of them idle).
Each pass runs in a subprocess with its checkout's own `bench_sweep` and package
(checked: the package it imported is the checkout's), on a fresh copy
(`CREATE DATABASE ... TEMPLATE`), the order flipping every round. Printed: each
round's rates, and the median (and range) of the rounds' new / old ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import _common
import bench_sweep

HERE = Path(__file__).resolve().parent

ONE_PASS = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[2])
import bench_sweep, retaining_saver
seconds, done = asyncio.run(bench_sweep.sweep_once(sys.argv[1], "delete", 10**9))
deleted = sum(1 for r in done.results if r.outcome == "deleted")
print(json.dumps([deleted, seconds, retaining_saver.__file__]))
"""


def rate(server: str, template: str, checkout: str) -> float:
    """Idle threads deleted per second by one pass of `checkout`'s code on a fresh copy."""
    dsn = _common.copy_database(server, template)
    try:
        # The checkout's own `bench_sweep` (whose `_common` puts its checkout first on
        # the path), run from the checkout (`-c` puts the working directory first).
        ran = subprocess.run(
            [sys.executable, "-c", ONE_PASS, dsn, str(Path(checkout) / "benchmarks")],
            cwd=checkout,
            env=dict(os.environ, PYTHONPATH=checkout),
            capture_output=True,
            text=True,
            check=True,
        )
        deleted, seconds, package = json.loads(ran.stdout.strip().splitlines()[-1])
        if not Path(package).resolve().is_relative_to(Path(checkout).resolve()):
            raise RuntimeError(f"{checkout}: the pass imported {package}")
        return float(deleted) / float(seconds)
    finally:
        _common.drop_database(server, dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--old", required=True)
    parser.add_argument("--new", default=str(HERE.parent))
    parser.add_argument("--threads", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    server = _common.required_pg_server()
    template = _common.create_database(server)
    try:
        bench_sweep.build_template(template, args.threads, 10, 2)
        rates: dict[str, list[float]] = {"old": [], "new": []}
        for index in range(args.rounds):
            for side in ("old", "new") if index % 2 == 0 else ("new", "old"):
                rates[side].append(rate(server, template, getattr(args, side)))
            print(f"round {index}: old {rates['old'][-1]:.0f}/s, new {rates['new'][-1]:.0f}/s")
        ratios = sorted(n / o for n, o in zip(rates["new"], rates["old"], strict=True))
        print(
            f"new / old idle threads per second: median {statistics.median(ratios):.2f}x "
            f"[{ratios[0]:.2f}x to {ratios[-1]:.2f}x]"
        )
    finally:
        _common.drop_database(server, template)


if __name__ == "__main__":
    main()
