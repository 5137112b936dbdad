"""`docs/benchmarks.md`, written by `run_all.py` from its results."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RULES = ("bare", "compact", "horizon N=10", "horizon N=0", "keep_latest (prune)")
RULE_HEADERS = ("compact_steps", "keep_runs=10", "keep_runs=0", "prune")


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(results: dict[str, Any], figures: Sequence[Path], doc_dir: Path) -> str:
    """The whole page: how it was made, where, and each part's tables and plots."""
    images = {f.stem: Path(os.path.relpath(f, doc_dir)).as_posix() for f in figures}
    parts = [
        _header(results),
        _storage(results["storage"], images),
        _admission(results["admission"], images),
        _engine(results["engine"]),
    ]
    if "prune" in results:
        parts.append(_prune(results["prune"], images))
    else:
        parts.append(f"## prune\n\nSkipped: {results['postgres_skipped']}")
    seconds = ", ".join(f"{name} {s} s" for name, s in results["seconds"].items())
    parts.append(f"Time taken: {seconds} (total {sum(results['seconds'].values()):.0f} s).")
    return "\n\n".join(parts) + "\n"


def _header(results: dict[str, Any]) -> str:
    m = results["machine"]
    packages = ", ".join(f"{name} {version}" for name, version in m["packages"].items())
    return "\n\n".join(
        [
            "# Benchmarks",
            "Written by `python benchmarks/run_all.py` (`--quick` for smaller sizes); do not "
            "edit by hand. Every timing below is a ratio of two things measured side by side "
            "in the same run, on the machine named here: run it on yours. Bytes are as each "
            "backend stores them (SQLite `LENGTH()`, Postgres `pg_column_size`, after TOAST "
            "compression). `benchmarks/README.md` describes each script.",
            f"Measured {m['date']} at commit `{m['commit']}` on {m['nproc']} CPUs, "
            f"Python {m['python']}, {m['platform']}, SQLite {m['sqlite']}, "
            f"PostgreSQL {m['postgres'] or 'skipped'}. Packages: {packages}.",
        ]
    )


def _storage(storage: dict[str, Any], images: dict[str, str]) -> str:
    rows = []
    for kind, per_turns in storage.items():
        for turns, found in per_turns.items():
            rules = found["rules"]
            bare = rules["bare"]["bytes"]
            shares = [f"{rules[r]['bytes'] / bare:.3f}x" for r in RULES[1:]]
            counts = " / ".join(str(rules[r]["rows"]) for r in RULES)
            clean = "yes" if found["integrity_clean"] else "NO"
            rows.append([kind, turns, f"{bare:,}", *shares, counts, clean])
    growth = []
    for kind, per_turns in storage.items():
        low, high = per_turns[min(per_turns, key=int)], per_turns[max(per_turns, key=int)]
        live = high["live_state_bytes"] / low["live_state_bytes"]
        cells = [f"{high['rules'][r]['bytes'] / low['rules'][r]['bytes']:.1f}x" for r in RULES]
        growth.append([kind, *cells, f"{live:.1f}x"])
    turns = sorted(int(t) for t in storage["sqlite"])
    return "\n\n".join(
        [
            "## Storage growth: bytes per thread against turns",
            "A plain three-node chat (about 6.5 KB of new text a turn, no duration stamps, so "
            "the drop-in alone stores exactly what bare stores; `retaining-saver demo` shows "
            "a stamped chat). Each thread is copied row for row and one engine pass per rule "
            "runs on its copy, every checkpoint older than `history_min_age`.",
            f"![Storage growth]({images['growth']})",
            table(
                [
                    "backend",
                    "turns",
                    "bare bytes",
                    *(f"{h} / bare" for h in RULE_HEADERS),
                    "rows: bare / " + " / ".join(RULE_HEADERS),
                    "integrity clean",
                ],
                rows,
            ),
            f"How bytes grow from {turns[0]} to {turns[-1]} turns, against the live state (the "
            "head checkpoint's own serialized bytes): bare grows with the square of the "
            "thread's length, a bounded rule with the live state.",
            table(["backend", "bare", *RULE_HEADERS, "live state"], growth),
        ]
    )


def _admission(figures: list[dict[str, Any]], images: dict[str, str]) -> str:
    rows = []
    for f in figures:
        p25, mid, p75 = f["paired"]
        goal = "-" if f["goal"] is None else f"<= {f['goal']}x"
        meets = "" if f["goal"] is None else ("yes" if f["ratio"] <= f["goal"] else "MISSED")
        if f["backend"] == "memory" and f["goal"] is not None:
            meets = "n/a"  # the goals are about I/O-bound savers
        rows.append(
            [
                f["backend"],
                f["what"].strip(),
                f"{f['ratio']:.3f}x",
                f"{mid:.3f}x [{p25:.2f}-{p75:.2f}]",
                goal,
                meets,
            ]
        )
    reps = figures[0]["reps"] if figures else 0
    return "\n\n".join(
        [
            "## Admission cost",
            f"Wrapped and bare calls interleaved in one loop, {reps} repetitions each, their "
            "order rotated every repetition. Ratio of medians, and the median with quartiles "
            "of the per-repetition ratios. On memory a bare read is a few microseconds of "
            "Python, so any wrapper is a multiple of it: the goals are about SQLite and "
            "Postgres (memory's rows say n/a, and the plot leaves them out). A wide "
            "p25-p75 band means a noisy run: the machine is shared.",
            f"![Admission cost]({images['admission']})",
            table(
                [
                    "backend",
                    "measurement",
                    "ratio of medians",
                    "paired median [p25-p75]",
                    "goal",
                    "meets",
                ],
                rows,
            ),
        ]
    )


def _engine(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0]) if rows else []
    return "\n\n".join(
        [
            "## Engine passes",
            "A 20-turn chat stamped after every run (`chat`), and the same with 5 regenerates "
            "(`regen`), written on the bare saver; passes run in order, each on what the "
            "previous left. Nothing here is timed.",
            table(columns, [list(r.values()) for r in rows]),
        ]
    )


def _prune(prune: dict[str, Any], images: dict[str, str]) -> str:
    k = prune["keep_latest"]
    rows = []
    for side in ("upstream", "retaining-saver"):
        left = " / ".join(str(v) for v in k["rows_left"][side].values())
        rows.append(
            [
                side,
                f"{k['threads_per_second'][side] / k['threads_per_second']['upstream']:.2f}x",
                f"{k['peak_mib'][side]:.1f}",
                left,
                "yes" if k["integrity_clean"][side] else "NO",
            ]
        )
    before = " / ".join(str(v) for v in k["rows_before"].values())
    d = prune["delta"]
    return "\n\n".join(
        [
            "## prune against upstream",
            f'`aprune(strategy="keep_latest")` over {k["threads"]} Postgres threads of '
            f"{k['turns']} turns and a regenerate, upstream's `AsyncPostgresSaver.aprune` and "
            f"ours on two copies of one template database per round, {k['rounds']} rounds, "
            f"the order flipping every round. Rows before (checkpoints / blobs / writes): "
            f"{before}.",
            f"![prune throughput]({images['prune']})",
            table(
                [
                    "side",
                    "threads/s vs upstream (median rates)",
                    "peak traced MiB",
                    "rows left: checkpoints / blobs / writes",
                    "integrity clean",
                ],
                rows,
            ),
            f"DeltaChannel threads ({d['threads']}): upstream {d['upstream']} the batch; "
            f"ours pruned it to {d['checkpoints_left']} checkpoints, every head's values "
            f"unchanged: {'yes' if d['heads_unchanged'] else 'NO'}, integrity clean: "
            f"{'yes' if d['integrity_clean'] else 'NO'}.",
        ]
    )
