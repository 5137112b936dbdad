"""A reusable contract kit: checkpoint shapes, real graphs, lineage checks and scenarios.

- `leaves`: the duration leaves apps stamp (`write_duration_leaf`, `leaf_of`);
- `graphs`: small deterministic graphs, their inputs and configs (`run_read`);
- `views`: what a user sees of a thread, comparable across threads and savers;
- `checks`: lineage walks, orphan rows and reclaim records;
- `scenarios`: the retention contract, runnable against any supported saver.
"""

from retaining_saver.testing.graphs import RUNTIME_KEY, run_read
from retaining_saver.testing.leaves import awrite_duration_leaf, leaf_of, write_duration_leaf

__all__ = ["RUNTIME_KEY", "awrite_duration_leaf", "leaf_of", "run_read", "write_duration_leaf"]
