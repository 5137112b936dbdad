"""The PNG plots `run_all.py` draws from its results (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

DPI = 100
RULE_STYLES = {
    "bare": dict(color="#444444", marker="o"),
    "compact": dict(color="#1f77b4", marker="s"),
    "horizon N=10": dict(color="#2ca02c", marker="^"),
    "horizon N=0": dict(color="#d62728", marker="v"),
    "keep_latest (prune)": dict(color="#ff7f0e", marker="x", linestyle=":"),
}
RULE_NAMES = {
    "bare": "bare (and the drop-in: no stamps here)",
    "compact": "compact_steps",
    "horizon N=10": "history_keep_runs=10",
    "horizon N=0": "history_keep_runs=0",
    "keep_latest (prune)": "prune(keep_latest)",
}
# The admission rows a reader compares with their goals.
ADMISSION_ROWS = {
    "(i) admission read, nothing to reclaim / bare read": "(i) read, nothing to reclaim",
    "(ii) admission read reclaiming a leaf stamped by another process / bare read": (
        "(ii) read reclaiming a stamp (another process)"
    ),
    "(ii) admission read reclaiming a leaf stamped by this saver / bare read": (
        "(ii) read reclaiming a stamp (this saver)"
    ),
    "(iii) (cleanup/bare @10k) / (cleanup/bare @10)": "(iii) cleanup at 10k / at 10, normalized",
}
BACKEND_COLORS = {"sqlite": "#1f77b4", "postgres": "#2ca02c"}


def draw(results: dict[str, Any], out: Path) -> list[Path]:
    """Draw every plot the results allow; return the files written."""
    written = [growth(results["storage"], out / "growth.png")]
    written.append(admission(results["admission"], out / "admission.png"))
    if "prune" in results:
        written.append(prune(results["prune"]["keep_latest"], out / "prune.png"))
    return written


def growth(storage: dict[str, Any], path: Path) -> Path:
    """Bytes per thread against turns under each rule (SQLite), and each as a share of bare."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    sqlite = storage["sqlite"]
    turns = [int(t) for t in sqlite]
    for rule, style in RULE_STYLES.items():
        megabytes = [sqlite[str(t)]["rules"][rule]["bytes"] / 1e6 for t in turns]
        left.plot(turns, megabytes, label=RULE_NAMES[rule], **style)
    live = [sqlite[str(t)]["live_state_bytes"] / 1e6 for t in turns]
    left.plot(turns, live, color="black", linestyle="--", linewidth=0.8, label="live state")
    left.set(xlabel="chat turns", ylabel="MB per thread", title="SQLite: bytes per thread")
    left.legend(fontsize=8)
    for kind, linestyle in (("sqlite", "-"), ("postgres", "--")):
        if kind not in storage:
            continue
        for rule, style in RULE_STYLES.items():
            if rule == "bare":
                continue
            share = [
                storage[kind][str(t)]["rules"][rule]["bytes"]
                / storage[kind][str(t)]["rules"]["bare"]["bytes"]
                for t in turns
            ]
            label = RULE_NAMES[rule] if kind == "sqlite" else None
            right.plot(turns, share, label=label, **{**style, "linestyle": linestyle})
    right.set(
        xlabel="chat turns",
        ylabel="bytes / bare thread's bytes",
        title="Share of the bare thread (solid SQLite, dashed Postgres)",
        ylim=(0, 1.05),
    )
    right.title.set_fontsize(10)
    right.legend(fontsize=8)
    for axes in (left, right):
        axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


def admission(figures: list[dict[str, Any]], path: Path) -> Path:
    """Each admission figure as a ratio of medians, its p25-p75 band and its goal.

    Memory is left out: its bare read is a few microseconds of Python, so any wrapper
    is a multiple of it, and its bars would set the scale (the table keeps it).
    """
    rows = [f for f in figures if f["what"].strip() in ADMISSION_ROWS and f["backend"] != "memory"]
    figure, axes = plt.subplots(figsize=(9, 0.35 * len(rows) + 1.2))
    labels, ys = [], []
    for y, row in enumerate(reversed(rows)):
        p25, _, p75 = row["paired"]
        color = BACKEND_COLORS.get(row["backend"], "#888888")
        axes.barh(y, row["ratio"], color=color, height=0.7)
        axes.plot([p25, p75], [y, y], color="black", linewidth=1)
        if row["goal"] is not None:
            axes.plot(row["goal"], y, marker="|", markersize=14, color="#d62728")
        labels.append(f"{row['backend']}: {ADMISSION_ROWS[row['what'].strip()]}")
        ys.append(y)
    axes.axvline(1.0, color="black", linewidth=0.6)
    axes.set_yticks(ys, labels, fontsize=8)
    axes.set(
        xlabel="wrapped / bare, ratio of medians (line: paired p25-p75; red tick: goal)",
        title="Admission cost, measured side by side",
    )
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


def prune(result: dict[str, Any], path: Path) -> Path:
    """Our `aprune` rate over upstream's, per round and as the ratio of median rates."""
    ours, theirs = result["seconds"]["retaining-saver"], result["seconds"]["upstream"]
    per_round = [t / o for o, t in zip(ours, theirs, strict=True)]
    figure, axes = plt.subplots(figsize=(6, 3))
    axes.bar([0], [result["ratio"]], color="#2ca02c", width=0.5, label="ratio of median rates")
    axes.plot([0] * len(per_round), per_round, "ko", label="each round")
    axes.axhline(1.0, color="black", linewidth=0.6)
    axes.set_xticks([0], [f"aprune(keep_latest), {result['threads']} Postgres threads"])
    axes.set(ylabel="ours / upstream, threads per second", title="prune throughput vs upstream")
    axes.set_xlim(-1, 1)
    axes.legend(fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path
