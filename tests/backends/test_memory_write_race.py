"""A fact about InMemorySaver (langgraph-checkpoint) that the law tests work around.

`InMemorySaver.put_writes` stores into `self.writes[(thread, ns, id)]`, a
`defaultdict(dict)`. The first write of a checkpoint makes that entry: the dict is
made, then stored. LangGraph's sync runner puts each parallel task's writes from
its own worker thread; if the GIL passes to the other task's `put_writes` between
the two (a garbage collection that runs a finalizer is enough), that one makes and
stores an entry with its write, and the first then stores its empty dict over it.
The superstep goes on with both values, but the checkpoint keeps one task's write:
`get_state` of it shows the other task unfinished. It showed once in a long run of
`test_history_stateful_shapes` (two `Send` tasks), on the bare twin; a stress of
20,000 pairs of writes with collections forced at every allocation lost 3.

Here the hand-over is made deterministic: the entry's factory runs the other
write, as a thread switched to at that moment would. `tests/savers.py` opens every
InMemorySaver with `race_free_writes`, so that a twin comparison tests the wrapper,
not this race; the wrapper passes a run's writes to the saver as LangGraph does
and neither adds nor removes it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from savers import RaceFreeWrites, race_free_writes

from retaining_saver.backends import backend_name, supported_base

CONFIG: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1"}}
KEY = ("t", "", "c1")


def _switching(saver: InMemorySaver) -> Any:
    """A factory for `saver.writes` whose first call runs another task's write first."""
    calls = []

    def factory() -> dict[Any, Any]:
        calls.append(None)
        if len(calls) == 1:
            saver.put_writes(CONFIG, [("said", "task b")], "task-b")
        return {}

    return factory


def test_upstream_put_writes_loses_a_write_made_while_its_entry_is_made() -> None:
    saver = InMemorySaver()
    saver.writes = defaultdict(_switching(saver))
    saver.put_writes(CONFIG, [("said", "task a")], "task-a")
    assert [task for task, _ in saver.writes[KEY]] == ["task-a"]  # task b's write is gone


def test_race_free_writes_keeps_both() -> None:
    saver = InMemorySaver()
    saver.writes = RaceFreeWrites(_switching(saver))
    saver.put_writes(CONFIG, [("said", "task a")], "task-a")
    assert sorted(task for task, _ in saver.writes[KEY]) == ["task-a", "task-b"]


def test_a_race_free_saver_is_still_an_inmemorysaver_to_the_wrapper() -> None:
    saver = race_free_writes(InMemorySaver())
    saver.put_writes(CONFIG, [("said", "x")], "task-a")
    assert isinstance(saver.writes, RaceFreeWrites)
    assert supported_base(type(saver)) is InMemorySaver
    assert backend_name(saver) == "memory"
