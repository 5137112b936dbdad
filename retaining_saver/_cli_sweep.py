"""`retaining-saver sweep`: the idle-thread TTL over a whole store, from a shell.

    retaining-saver sweep TARGET --idle-for 7d [--strategy delete|keep_latest]
        [--max-age 90d] [--limit N] [--pace P] [--apply] [--json]

It walks every thread once (or until `--limit` idle threads were handled),
as one `RetentionSweeper` would in passes of `PASS_LIMIT`; nothing changes
without `--apply`. Durations are as everywhere on the command line: `7d`, `12h`, `30m`, `1d12h`.
A command is a job that should end: it sweeps flat out (`--pace 0`) unless told to share
the database with live runs (`--pace 9`, the service's default, works a tenth of the time).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

from retaining_saver import _cli_options as options
from retaining_saver import _cli_render as render
from retaining_saver._cli_output import Doc
from retaining_saver._cli_progress import Progress
from retaining_saver._cli_targets import Store
from retaining_saver._rules._idle_policy import STRATEGIES, IdleThreadPolicy
from retaining_saver._sweep_pass import SweepPass
from retaining_saver._sweeper import RetentionSweeper

SWEEP_SUMMARY = "delete or prune threads idle longer than --idle-for (a dry run without --apply)"
DRY_RUN_SWEEP = "dry run: nothing changed; pass --apply to sweep"
PASS_LIMIT = 500
"""Idle threads handled per pass: what the command holds in memory between reports."""


def duration(text: str) -> timedelta:
    """`--idle-for`, `--max-age`: the command line's one duration (`7d`, `12h`, `1d12h`),
    and more than none."""
    value = options.duration(text)
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return value


def add_sweep_options(sub: argparse.ArgumentParser) -> None:
    """The sweep command's own options (the target, --json and --debug are common)."""
    sub.add_argument("--idle-for", type=duration, required=True, metavar="AGE", help="e.g. 7d: TTL")
    sub.add_argument("--strategy", choices=STRATEGIES, default="delete")
    sub.add_argument("--max-age", type=duration, metavar="AGE", help="hard limit, e.g. 90d")
    sub.add_argument(
        "--limit", type=options.positive, metavar="N", help="handle at most N idle threads"
    )
    sub.add_argument(
        "--pace",
        type=pace,
        default=0.0,
        metavar="P",
        help="rest P times as long as it works (default 0: flat out; 9: a tenth of the time)",
    )
    sub.add_argument("--apply", action="store_true", help="really delete")


def pace(text: str) -> float:
    """`--pace`: a number, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def run_sweep(store: Store, args: argparse.Namespace, doc: Doc) -> None:
    """Walk the store once with the policy the options give; fill `doc` as it goes."""
    policy = IdleThreadPolicy(args.idle_for, args.strategy, max_age=args.max_age)
    dry_run = not args.apply
    threads: list[Doc] = []
    outcomes: Counter[str] = Counter()
    doc.update(
        dry_run=dry_run,
        idle_for_seconds=args.idle_for.total_seconds(),
        strategy=args.strategy,
        max_age_seconds=None if args.max_age is None else args.max_age.total_seconds(),
        limit=args.limit,
        outcomes=outcomes,
        threads=threads,
    )
    sweeper = RetentionSweeper(
        store.saver,
        policy,
        sweep_limit=min(PASS_LIMIT, args.limit or PASS_LIMIT),
        dry_run=dry_run,
        pace=args.pace,
    )
    progress = Progress(Progress.of(args).shown, label="sweep passes")
    for done in progress.over(_passes(sweeper, args.limit), total=None):
        _note(done, outcomes, threads)
    doc["outcomes"] = dict(outcomes)
    doc["message"] = DRY_RUN_SWEEP if dry_run else _applied(threads)


def _passes(sweeper: RetentionSweeper, limit: int | None) -> Iterator[SweepPass]:
    """Passes over the store until every thread was seen once, or `limit` idle
    threads were handled."""
    left = limit
    while True:
        done = sweeper.run_pass()
        yield done
        if left is not None:
            left -= len(done.results)
            sweeper.sweep_limit = max(1, min(PASS_LIMIT, left))
        if done.stopped_after is None or left == 0:
            return


def _note(done: SweepPass, outcomes: Counter[str], threads: list[Doc]) -> None:
    outcomes.update(done.outcomes)
    threads += [
        {"thread_id": r.thread_id, "outcome": str(r.outcome), "checkpoints": r.checkpoints}
        for r in done.results
    ]


def _applied(threads: list[Doc]) -> str:
    gone = sum(1 for t in threads if t["outcome"] in ("deleted", "pruned"))
    checkpoints = sum(t["checkpoints"] for t in threads if t["outcome"] in ("deleted", "pruned"))
    return f"swept {gone} idle threads: {checkpoints} checkpoints deleted"


def render_sweep(doc: Doc) -> None:
    """The outcomes of a sweep, as a table of threads per outcome."""
    rows = [[name, count] for name, count in sorted(doc.get("outcomes", {}).items())]
    render.table("sweep (dry run)" if doc.get("dry_run") else "sweep", ["outcome", "threads"], rows)
