"""A nightly maintenance job: bound every thread's history, then give the space back.

    python examples/nightly_maintenance.py PATH [--keep-runs 20] [--min-age-days 7] [--dry-run]

The drop-in alone removes only duration stamps; history grows with every
super-step of every run. This job bounds it: one engine pass per thread keeps
the newest `--keep-runs` runs, compacts the super-steps of each kept run to its
input, first and last step, and never touches anything younger than
`--min-age-days` (a client may still hold those ids). Then, on SQLite,
`compact_storage` vacuums the file once a quarter of it is free. For Postgres,
open `PostgresSaver.from_conn_string(dsn)` instead; its `VACUUM` is autovacuum's.

Run it from cron or a scheduler while the app is up: every deletion is one
transaction that re-checks what it proved, so a run starting meanwhile is safe.
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from retaining_saver import RetainingSaver, RetentionPolicy

log = logging.getLogger("nightly_maintenance")


def main(
    path: Path, keep_runs: int = 20, min_age: timedelta = timedelta(days=7), dry_run: bool = False
) -> dict[str, Any]:
    """Enforce the history rules on every thread of the SQLite file, then compact it."""
    policy = RetentionPolicy(
        history_keep_runs=keep_runs,
        compact_steps=True,
        history_min_age=min_age,
        max_delete_per_run=10_000,  # a bound per thread per night; the rest waits
    )
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = RetainingSaver(SqliteSaver(conn), admission="off")
        threads = deleted = rows_before = rows_after = 0
        for report in saver.enforce_retention(policy=policy, dry_run=dry_run):
            threads += 1
            deleted += len(report.deleted)
            rows_before += report.before.rows
            rows_after += (report.after or report.before).rows
            if report.deleted:
                log.info("%s: %d checkpoints deleted", report.thread_id, len(report.deleted))
        compaction = None if dry_run else saver.compact_storage(min_free_ratio=0.25)
    finally:
        conn.close()
    summary = {
        "threads": threads,
        "deleted": deleted,
        "rows_before": rows_before,
        "rows_after": rows_after,
        "vacuumed": bool(compaction and compaction.ran),
        "file_bytes_after": compaction.file_bytes_after if compaction else path.stat().st_size,
    }
    log.info("done: %s", summary)
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="the SqliteSaver database file")
    parser.add_argument("--keep-runs", type=int, default=20)
    parser.add_argument("--min-age-days", type=float, default=7)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    main(args.path, args.keep_runs, timedelta(days=args.min_age_days), args.dry_run)
