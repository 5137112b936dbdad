"""Lineage-safe checkpoint retention for LangGraph savers."""

from retaining_saver._accounting import AdmissionCounters, ReclaimEvent
from retaining_saver._admission import AdmissionResult
from retaining_saver._caches import DeltaHistoryCache, HistoryCache
from retaining_saver._engine import RetentionReport
from retaining_saver._errors import (
    CheckpointNotFoundError,
    CleanupPermissionError,
    RetainingSaverError,
    UnsupportedSaverError,
)
from retaining_saver._idle_policy import IdleThreadPolicy, ThreadInfo
from retaining_saver._rules import (
    CheckpointNode,
    Protection,
    Reason,
    RetentionPolicy,
    Skip,
    is_duration_marker,
)
from retaining_saver._saver import RetainingSaver
from retaining_saver._sweep_thread import SweepOutcome, ThreadResult
from retaining_saver._sweeper import RetentionSweeper, SweepCounters, SweepPass
from retaining_saver.backends._base import StorageStats, TableStats

__all__ = [
    "AdmissionCounters",
    "AdmissionResult",
    "CheckpointNode",
    "CheckpointNotFoundError",
    "CleanupPermissionError",
    "DeltaHistoryCache",
    "HistoryCache",
    "IdleThreadPolicy",
    "Protection",
    "Reason",
    "ReclaimEvent",
    "RetainingSaver",
    "RetainingSaverError",
    "RetentionPolicy",
    "RetentionReport",
    "RetentionSweeper",
    "Skip",
    "StorageStats",
    "SweepCounters",
    "SweepOutcome",
    "SweepPass",
    "TableStats",
    "ThreadInfo",
    "ThreadResult",
    "UnsupportedSaverError",
    "is_duration_marker",
]
__version__ = "0.1.0"
