"""The command line's option values and the retention policy its flags describe.

Each option type turns one argument into a value or an `ArgumentTypeError`
(a usage error, exit 2). `policy_of` reads the policy flags as the Python
API reads `RetentionPolicy`: one TTL, `--min-age`, guards every age-guarded
rule and must be given with any of them, and a flag no rule reads is refused.
"""

from __future__ import annotations

import argparse
import math
import re
from datetime import timedelta

from retaining_saver._cli_targets import UsageError
from retaining_saver._rules import Protection, RetentionPolicy
from retaining_saver._rules._legend import doc_anchor

_DURATION = re.compile(r"(?P<amount>\d+(?:\.\d+)?)(?P<unit>[dhms])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def duration(text: str) -> timedelta:
    """`7d`, `12h`, `30m`, `45s`, or a sum of them (`1d12h`); `0` for none."""
    if text.strip() == "0":
        return timedelta(0)
    parts = list(_DURATION.finditer(text))
    if not parts or "".join(p[0] for p in parts) != text:
        raise argparse.ArgumentTypeError(
            f"must be a duration such as 7d, 12h, 30m or 1d12h (0 for none), got {text!r}"
        )
    try:
        return sum(
            (timedelta(**{_UNITS[p["unit"]]: float(p["amount"])}) for p in parts), timedelta(0)
        )
    except OverflowError:
        raise argparse.ArgumentTypeError(f"too long a duration: {text!r}") from None


def ratio(text: str) -> float:
    """`--min-free-ratio`: a finite share of the file, within [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    # float() takes "inf" and "nan"; neither is a share.
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be within [0, 1], got {text!r}")
    return value


def count(text: str) -> int:
    """A whole number, not negative."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def positive(text: str) -> int:
    """A whole number, at least 1."""
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def thread_id(text: str) -> str:
    """A thread id: any non-empty text."""
    if not text:
        raise argparse.ArgumentTypeError("a thread id cannot be empty")
    return text


def add_thread_option(sub: argparse.ArgumentParser, *, required: bool = False) -> None:
    """`--thread ID`, repeatable; every thread when none is given (unless `required`)."""
    more = "" if required else "; default: every thread"
    sub.add_argument(
        "--thread",
        action="append",
        type=thread_id,
        required=required,
        metavar="ID",
        help=f"a thread id (repeat for several){more}",
    )


def add_policy_options(sub: argparse.ArgumentParser) -> None:
    """The flags of a `RetentionPolicy`, as `plan` and `enforce` take them."""
    rules = sub.add_argument_group(
        "policy",
        "Trailing duration leaves always go. Every other rule is opt-in; the age-guarded "
        "ones (--prune-branches, --keep-runs, --compact-steps) need --min-age.",
    )
    rules.add_argument(
        "--prune-branches", action="store_true", help="delete superseded sibling branches"
    )
    rules.add_argument(
        "--keep-runs",
        type=count,
        metavar="N",
        help="history horizon: keep the newest N runs of the head line (0: only the head)",
    )
    rules.add_argument(
        "--compact-steps",
        action="store_true",
        help="keep each finished run's input, first and last super-step, drop the rest",
    )
    rules.add_argument(
        "--min-age",
        type=duration,
        metavar="AGE",
        help="the TTL of every age-guarded rule: nothing younger goes (7d, 12h, 30m; 0: none)",
    )
    rules.add_argument(
        "--graft-links", action="store_true", help="remove duration stamps later runs forked from"
    )
    rules.add_argument(
        "--max-delete", type=count, metavar="N", help="at most N deletions per thread"
    )


AGED_RULES = ("--prune-branches", "--keep-runs", "--compact-steps")


def policy_of(args: argparse.Namespace) -> RetentionPolicy:
    """The policy the flags describe.

    Raises:
        UsageError: If an age-guarded rule is on without `--min-age`, or
            `--min-age` is given with none of them on.
    """
    aged = [
        flag
        for flag, on in zip(
            AGED_RULES,
            (args.prune_branches, args.keep_runs is not None, args.compact_steps),
            strict=True,
        )
        if on
    ]
    if aged and args.min_age is None:
        raise UsageError(
            f"{', '.join(aged)} deletes checkpoints a client may still hold: give --min-age "
            f"(7d, 12h, 30m; 0 for no grace period); see {doc_anchor(Protection.TOO_YOUNG)}"
        )
    if args.min_age is not None and not aged:
        raise UsageError(
            f"--min-age does nothing without one of {', '.join(AGED_RULES)}: "
            "trailing duration leaves go at any age"
        )
    return RetentionPolicy(
        prune_leaf_sibling_branches=args.prune_branches,
        sibling_branch_min_age=args.min_age if args.prune_branches else None,
        graft_duration_links=args.graft_links,
        max_delete_per_run=args.max_delete,
        history_keep_runs=args.keep_runs,
        compact_steps=args.compact_steps,
        history_min_age=args.min_age if args.keep_runs is not None or args.compact_steps else None,
    )


def policy_doc(args: argparse.Namespace) -> dict[str, object]:
    """The policy as the output names it."""
    age: timedelta | None = args.min_age
    return {
        "trailing_duration_leaves": True,
        "prune_branches": args.prune_branches,
        "keep_runs": args.keep_runs,
        "compact_steps": args.compact_steps,
        "min_age_seconds": None if age is None else age.total_seconds(),
        "graft_links": args.graft_links,
        "max_delete": args.max_delete,
    }
