"""Lineage-safe checkpoint retention for LangGraph savers."""

from retaining_saver._errors import (
    CheckpointNotFoundError,
    RetainingSaverError,
    UnsupportedSaverError,
)
from retaining_saver._saver import RetainingSaver

__all__ = [
    "CheckpointNotFoundError",
    "RetainingSaver",
    "RetainingSaverError",
    "UnsupportedSaverError",
]
__version__ = "0.1.0"
