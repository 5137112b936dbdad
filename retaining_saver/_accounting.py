"""What `RetainingSaver` tells about its cleanup: counters, the log, `on_reclaim`.

Also the back-off after a refused privilege, since it decides what the next
admissions count: while it lasts they are skipped, not tried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from retaining_saver._admission import AdmissionResult
from retaining_saver._rules import Skip

logger = logging.getLogger("retaining_saver")

DENIAL_BACKOFF = 60.0
"""Seconds cleanup waits after a refused privilege, doubling up to `DENIAL_BACKOFF_MAX`."""
DENIAL_BACKOFF_MAX = 3600.0


@dataclass(frozen=True)
class ReclaimEvent:
    """One reclaimed checkpoint, as passed to `on_reclaim`.

    Attributes:
        kind: `"stamp"` for a trailing duration leaf admission reclaimed,
            `"history"` for a checkpoint the saver's `retention` policy deleted.
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    head_id: str | None
    kind: Literal["stamp", "history"] = "stamp"


@dataclass(frozen=True)
class AdmissionCounters:
    """Totals since the saver was made: admissions attempted, checkpoints reclaimed,
    admissions skipped by reason, admissions whose cleanup failed, and reads whose
    fast path or probe failed and were answered by the saver's own read instead.

    The `history_` totals count the work of the saver's `retention` policy, apart
    from the stamps above: passes run, checkpoints they deleted, admissions that
    skipped the pass (the thread could not have crossed its horizon), and passes
    that failed (the run went on)."""

    attempted: int
    reclaimed: int
    skipped: dict[str, int]
    failed: int
    fallbacks: dict[str, int] = field(default_factory=dict)
    history_passes: int = 0
    history_reclaimed: int = 0
    history_skipped: int = 0
    history_failed: int = 0


class Accounts:
    """The totals behind `AdmissionCounters`, and whether cleanup waits out a refusal.

    Args:
        on_reclaim: Called once per reclaimed checkpoint; its errors are logged.
    """

    def __init__(self, on_reclaim: Callable[[ReclaimEvent], None] | None) -> None:
        self.on_reclaim = on_reclaim
        # By key: "attempted", "reclaimed", "failed", "skip:<reason>", "fallback:<what>".
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        # A refused privilege: how many times, and until when cleanup waits (monotonic).
        self._denials = 0
        self.denied_until = 0.0

    @property
    def counters(self) -> AdmissionCounters:
        with self._lock:
            counts = dict(self._counts)

        def prefixed(prefix: str) -> dict[str, int]:
            return {k[len(prefix) :]: v for k, v in counts.items() if k.startswith(prefix)}

        return AdmissionCounters(
            counts.get("attempted", 0),
            counts.get("reclaimed", 0),
            prefixed("skip:"),
            counts.get("failed", 0),
            prefixed("fallback:"),
            history_passes=counts.get("history_passes", 0),
            history_reclaimed=counts.get("history_reclaimed", 0),
            history_skipped=counts.get("history_skipped", 0),
            history_failed=counts.get("history_failed", 0),
        )

    def count(self, *keys: str, by: int = 1) -> None:
        with self._lock:
            for key in keys:
                self._counts[key] += by

    def account(self, checkpoint_ns: str, result: AdmissionResult) -> None:
        """Count one admission; log and announce each checkpoint it reclaimed."""
        if result.skipped is Skip.FAILED:
            self.count("attempted", "failed")
        elif result.skipped is not None:
            self.count("attempted", f"skip:{result.skipped.value}")
        else:
            self.count("attempted")
        self.account_history(result)
        if not result.reclaimed:
            return
        self.count("reclaimed", by=len(result.reclaimed))
        for checkpoint_id in result.reclaimed:
            logger.info(
                "reclaimed checkpoint %s of thread %s (the run starts from %s)",
                checkpoint_id,
                result.thread_id,
                result.head_id,
            )
            if self.on_reclaim is not None:
                event = ReclaimEvent(result.thread_id, checkpoint_ns, checkpoint_id, result.head_id)
                self._announce(event)

    def _announce(self, event: ReclaimEvent) -> None:
        assert self.on_reclaim is not None  # the callers asked
        try:
            self.on_reclaim(event)
        except Exception:
            logger.exception("on_reclaim callback failed for %s", event.checkpoint_id)

    def account_history(self, result: AdmissionResult) -> None:
        """Count and announce the checkpoints an admission's history pass deleted."""
        if not result.history_reclaimed:
            return
        self.count("history_reclaimed", by=len(result.history_reclaimed))
        logger.info(
            "the retention policy deleted %d checkpoints of thread %s",
            len(result.history_reclaimed),
            result.thread_id,
        )
        for ns, checkpoint_id in result.history_reclaimed:
            if self.on_reclaim is not None:
                event = ReclaimEvent(result.thread_id, ns, checkpoint_id, result.head_id, "history")
                self._announce(event)

    def once(self, key: str, message: str, *args: object) -> None:
        """Log `message` as a warning the first time `key` comes, at debug level after."""
        key = f"notice:{key}"
        with self._lock:
            first = not self._counts[key]
            self._counts[key] += 1
        (logger.warning if first else logger.debug)(message, *args)

    def fell_back(self, what: str, error: Exception) -> None:
        """Count a failure of `what`, answered by the saver's own call; log the first."""
        key = f"fallback:{what}"
        with self._lock:
            first = not self._counts[key]
            self._counts[key] += 1
        log = logger.warning if first else logger.debug
        log("%s failed and fell back to the saver's own read (logged once): %r", what, error)

    def failure(self, thread_id: str, error: Exception, problem: str | None) -> Skip:
        """Log a cleanup failure; a refused privilege (`problem`) stops cleanup a while."""
        if problem is None:
            logger.warning(
                "retention cleanup failed for thread %s; the run proceeds: %r", thread_id, error
            )
            return Skip.FAILED
        with self._lock:
            first, self._denials = not self._denials, self._denials + 1
            backoff = min(DENIAL_BACKOFF * 2 ** (self._denials - 1), DENIAL_BACKOFF_MAX)
            self.denied_until = time.monotonic() + backoff
        log = logger.error if first else logger.debug
        log(
            "retention cleanup is disabled for lack of permission (%s); runs proceed "
            "untouched, and cleanup is tried again in %d s",
            problem,
            backoff,
        )
        return Skip.PERMISSION_DENIED

    def waiting(self) -> bool:
        """Whether cleanup waits out a refused privilege (no count)."""
        return bool(self.denied_until) and time.monotonic() < self.denied_until

    def backing_off(self) -> bool:
        """Whether cleanup waits out a refused privilege; such an admission counts as a
        skip."""
        if not self.waiting():
            return False
        self.count("attempted", f"skip:{Skip.PERMISSION_DENIED.value}")
        return True
