"""`Rooms`, the amortised pass's count, against a model of the thread it counts for.

A pass leaves the head line `N` runs; then admissions skip the pass while the runs added
since, those of admitted runs and those `update_state(as_node="__input__")` writes,
leave room under `N + slack_runs(N)`. What must hold after every admitted run, whatever
the order of runs, resumes and input updates: the head line holds at most
`N + slack_runs(N)` runs and the run just admitted.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from retaining_saver._rooms import Rooms, slack_runs

NOW = datetime(2026, 1, 1, tzinfo=UTC)
THREAD = "t"

EVENTS = st.lists(st.sampled_from(["run", "resume", "input update", "again"]), max_size=60)
"""A turn (an admission, then its input put), a resume (an admission that puts no input),
a run `update_state` writes as the input (no admission), and an admission that finds
the head it found last time (nothing written since)."""


class Thread:
    """The head line as the passes leave it, counted in runs, and the head's id."""

    def __init__(self, rooms: Rooms, horizon: int) -> None:
        self.rooms, self.horizon = rooms, horizon
        self.runs, self.head, self.passes = 0, 0, 0

    def admit(self) -> None:
        if self.rooms.due(THREAD, str(self.head), NOW):
            self.passes += 1
            self.runs = min(self.runs, self.horizon)
            left = self.horizon + slack_runs(self.horizon) - self.runs
            self.rooms.left(THREAD, left, str(self.head))

    def put(self, is_input: bool) -> None:
        self.head += 1
        if is_input:
            self.runs += 1
            self.rooms.grew(THREAD)


@given(horizon=st.integers(0, 6), events=EVENTS)
def test_after_every_admitted_run_the_thread_holds_the_horizon_its_slack_and_the_run(
    horizon: int, events: list[str]
) -> None:
    thread = Thread(Rooms(), horizon)
    bound = horizon + slack_runs(horizon) + 1
    for event in events:
        if event == "input update":
            thread.put(is_input=True)
            continue
        thread.admit()
        if event != "again":
            thread.put(is_input=event == "run")
        assert thread.runs <= bound, (event, thread.runs)


def test_a_run_the_admission_reserved_takes_no_more_room_and_an_input_update_takes_one() -> None:
    horizon = 4  # a slack of 2
    thread = Thread(Rooms(), horizon)
    for _ in range(horizon + 1):
        thread.admit()
        thread.put(is_input=True)
    assert (thread.passes, thread.runs) == (1, horizon + 1)
    for _ in range(slack_runs(horizon)):  # the slack's runs skip the pass
        thread.admit()
        thread.put(is_input=True)
    assert thread.passes == 1
    thread.admit()  # no room left: due
    assert thread.passes == 2
    thread.put(is_input=True)
    thread.put(is_input=True)  # an input update takes one of the two rooms
    thread.admit()
    thread.put(is_input=True)
    assert thread.passes == 2
    thread.admit()  # the other: due
    assert thread.passes == 3


def test_an_admission_that_finds_its_head_again_reuses_the_room_its_run_left_unused() -> None:
    thread = Thread(Rooms(), 2)  # a slack of 1
    for _ in range(3):
        thread.admit()
        thread.put(is_input=True)
    passes = thread.passes
    thread.admit()  # takes the slack's one room
    for _ in range(5):  # nothing written since: the same room, not another
        thread.admit()
    assert thread.passes == passes
    thread.put(is_input=True)
    thread.admit()
    assert thread.passes == passes + 1
