"""What a sweep pass found and did (`SweepPass`), the totals over passes
(`SweepCounters`), and the tally of a pass under way."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from retaining_saver._sweep_thread import SweepOutcome, ThreadResult


@dataclass(frozen=True)
class SweepPass:
    """What one pass found and did.

    Attributes:
        started_at: The sweeper's clock when the pass began (what ages are measured to).
        dry_run: True if nothing was changed.
        started_after: The thread key the pass resumed after (None: the first thread).
        stopped_after: The key the next pass resumes after (None: the walk reached the
            last thread, and the next pass starts from the first).
        scanned: Threads whose ids the pass read.
        outcomes: Per outcome, how many threads had it (young threads included).
        results: Each thread the pass found idle by its ids, and what it did with it.
        checkpoints_deleted: Checkpoints deleted (or, in a dry run, that would be).
        cancelled: The pass was cancelled (or stopped) before its end.
    """

    started_at: datetime
    dry_run: bool
    started_after: str | None
    stopped_after: str | None
    scanned: int
    outcomes: dict[str, int]
    results: tuple[ThreadResult, ...]
    checkpoints_deleted: int
    cancelled: bool = False

    @property
    def failed(self) -> int:
        """Threads whose handling raised (each logged)."""
        return self.outcomes.get(SweepOutcome.FAILED, 0)


@dataclass
class SweepCounters:
    """Totals over every pass of a sweeper.

    Attributes:
        passes: Passes finished or cancelled.
        scanned: Threads whose ids were read.
        outcomes: Per outcome, how many threads had it.
        checkpoints_deleted: Checkpoints deleted.
        failed: Threads whose handling raised.
    """

    passes: int = 0
    scanned: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    checkpoints_deleted: int = 0
    failed: int = 0


@dataclass
class PassTally:
    """A pass under way: its key, its tally, its results."""

    started_at: datetime
    dry_run: bool
    started_after: str | None
    after: str | None
    scanned: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    results: list[ThreadResult] = field(default_factory=list)
    reached_end: bool = False

    def account(self, result: ThreadResult) -> None:
        """Count `result` in the pass: its outcome, and the thread the next page follows."""
        self.results.append(result)
        self.outcomes[result.outcome] += 1
        self.after = result.thread_id

    def summary(self, *, cancelled: bool) -> SweepPass:
        deleted = sum(
            r.checkpoints
            for r in self.results
            if r.outcome
            in (
                SweepOutcome.DELETED,
                SweepOutcome.PRUNED,
                SweepOutcome.WOULD_DELETE,
                SweepOutcome.WOULD_PRUNE,
            )
        )
        return SweepPass(
            started_at=self.started_at,
            dry_run=self.dry_run,
            started_after=self.started_after,
            stopped_after=None if self.reached_end else self.after,
            scanned=self.scanned,
            outcomes=dict(self.outcomes),
            results=tuple(self.results),
            checkpoints_deleted=deleted,
            cancelled=cancelled,
        )
