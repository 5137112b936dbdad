"""Lineage-safe checkpoint retention for LangGraph savers."""

from retaining_saver._accounting import AdmissionCounters, ReclaimEvent
from retaining_saver._admission import AdmissionResult
from retaining_saver._caches import DeltaHistoryCache
from retaining_saver._engine import RetentionReport
from retaining_saver._errors import (
    CheckpointNotFoundError,
    CleanupPermissionError,
    RetainingSaverError,
    UnsupportedSaverError,
)
from retaining_saver._history_cache import HistoryCache
from retaining_saver._rules import (
    CheckpointNode,
    Graft,
    Protection,
    Reason,
    RetentionPolicy,
    Root,
    Skip,
    is_duration_marker,
)
from retaining_saver._rules._idle_policy import IdleThreadPolicy, ThreadInfo
from retaining_saver._rules._legend import explain
from retaining_saver._saver import RetainingSaver
from retaining_saver._sweep_pass import SweepCounters, SweepPass
from retaining_saver._sweep_thread import SweepOutcome, ThreadResult
from retaining_saver._sweeper import RetentionSweeper
from retaining_saver.backends._sqlite_compaction import Compaction
from retaining_saver.backends._stats import (
    ChannelStats,
    SpaceStats,
    StorageStats,
    TableStats,
    ThreadStats,
)

__all__ = [
    "AdmissionCounters",
    "AdmissionResult",
    "ChannelStats",
    "CheckpointNode",
    "CheckpointNotFoundError",
    "CleanupPermissionError",
    "Compaction",
    "DeltaHistoryCache",
    "Graft",
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
    "Root",
    "Skip",
    "SpaceStats",
    "StorageStats",
    "SweepCounters",
    "SweepOutcome",
    "SweepPass",
    "TableStats",
    "ThreadInfo",
    "ThreadResult",
    "ThreadStats",
    "UnsupportedSaverError",
    "explain",
    "is_duration_marker",
]
__version__ = "0.1.0"
