"""The history rules keep every promise (issue #19): an interrupted head's run under every
horizon, subgraph memory at forks from kept turns, capped passes that converge.

Each pass runs on thread "kept" beside an untouched "twin" (tests/compaction_kit.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from compaction_kit import KEPT, TWIN, Twins, history_ids
from savers import KINDS, open_sync
from test_compaction import POLICIES, SHAPES, assert_like_twin, run_pass

from retaining_saver import Protection
from retaining_saver.testing.graphs import thread

INTERRUPTED = {s.name: s for s in SHAPES}


def _head_run(graph: Any, thread_id: str) -> list[str]:
    """The root checkpoints of the head's run, newest first: back to its input."""
    run: list[str] = []
    for snapshot in graph.get_state_history(thread(thread_id)):
        run.append(snapshot.config["configurable"]["checkpoint_id"])
        if snapshot.metadata["source"] == "input":
            return run
    return run


@pytest.mark.parametrize("shape_name", ["interrupt-pending", "multi-interrupt"])
@pytest.mark.parametrize("policy_name", ["horizon-0", "horizon-1"])
@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupted_heads_run_is_kept_under_every_horizon(
    kind: str, policy_name: str, shape_name: str, request: pytest.FixtureRequest
) -> None:
    """The head waits on an interrupt: its run is live, kept whole under every horizon,
    so the interrupted turn regenerates from its input as on the twin."""
    shape = INTERRUPTED[shape_name]
    with open_sync(kind, request) as saver:
        twins = Twins.write(shape, saver)
        before = history_ids(twins.graph, KEPT)
        run = _head_run(twins.graph, KEPT)
        report = run_pass(saver, POLICIES[policy_name])
        assert report.deleted, "older runs go"
        assert set(run) <= set(history_ids(twins.graph, KEPT)), "the live run stays whole"
        assert report.kept[("", run[-1])] is not Protection.CAPPED
        assert_like_twin(twins, before, report, shape)
        # Regenerate the interrupted turn from its input checkpoint, on both threads.
        twins.graph.invoke(None, thread(KEPT, run[-1]))
        twins.graph.invoke(None, thread(TWIN, twins.kept_to_twin[run[-1]]))
        mine, twin = (twins.graph.get_state(thread(t)) for t in (KEPT, TWIN))
        assert (mine.values, mine.next) == (twin.values, twin.next)
