"""A reusable contract kit: checkpoint shapes, lineage checks and scenarios."""

from retaining_saver.testing.leaves import awrite_duration_leaf, write_duration_leaf

__all__ = ["awrite_duration_leaf", "write_duration_leaf"]
