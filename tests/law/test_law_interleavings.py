"""THE LAW under two deterministic interleavings of one process's writers.

Both run the same client operations, in the same interleaving, on a REFERENCE
thread (a bare saver, never stamped) and a RETAINED thread (`RetainingSaver`
over its own saver of the same kind; every writer of the retained thread goes
through that one wrapper, and a duration leaf is stamped through it after every
completed run). Each interleaving is forced with `threading.Event`s (tests/law_kit.py
`Gate`), never with sleeps:

(a) a run pinned to the stamp id (the id `get_state` showed the client), with
    `durability="exit"`, is held inside its first node while another run on the
    same thread is admitted (which reclaims the stamp) and completes; then the
    pinned run finishes and writes its checkpoint.
(b) an `update_state` reads the stamp as the latest checkpoint and is held (in a
    reducer, between that read and its put) while an admission reclaims the
    stamp; then it finishes.

Each is run with three reclaimers: another run's admission (the brief's case),
an explicit `admit()`, and an engine pass with the default policy.

Afterwards, on every backend (memory, a SQLite file, Postgres) and both graph
flavors, the retained thread must have no dangling parent, no orphan write and
no orphan blob, and equal the reference: the held call's result, the other
run's result, the latest state, and `get_state_history` with the stamps taken
out (values, next, interrupts, source and parent positions; see
test_law_stateful.py for why those). Every difference found is reported at once.

Run::

    .venv/bin/pytest tests/law/test_law_interleavings.py
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from law_kit import (
    FLAVORS,
    HOLD,
    WAIT_SECONDS,
    Flavor,
    Gate,
    checkpoint_id_of,
    first_difference,
    law_graph,
    listing,
    state_view,
    user_turn,
)
from savers import KINDS, open_sync

from retaining_saver import RetainingSaver
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import thread as pinned
from retaining_saver.testing.leaves import write_duration_leaf
from retaining_saver.testing.views import normalize


@dataclass
class Side:
    """One thread of the pair: its saver, a graph gated by its own `Gate`, its stamps."""

    saver: BaseCheckpointSaver[Any]
    thread_id: str
    flavor: Flavor
    stamped: bool
    gate: Gate = field(default_factory=Gate)
    stamps: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.graph = law_graph(self.saver, self.flavor, self.gate)

    def run(self, value: Any, pin: str | None = None, **kwargs: Any) -> Any:
        """A completed run, then (on the retained thread) the app's duration stamp."""
        out = self.graph.invoke(value, pinned(self.thread_id, pin), **kwargs)
        self.stamp()
        return normalize(out)

    def stamp(self) -> None:
        if self.stamped:
            stamp = write_duration_leaf(self.saver, self.thread_id, f"run-{len(self.stamps)}")
            if stamp is not None:
                self.stamps.append(stamp)

    def latest_id(self) -> str:
        found = checkpoint_id_of(self.graph.get_state(pinned(self.thread_id)).config)
        assert found is not None, "the thread has no checkpoint"
        return found


@dataclass
class Pair:
    ref: Side
    ret: Side

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.ref, self.ret


def _retaining(side: Side) -> RetainingSaver:
    assert isinstance(side.saver, RetainingSaver)
    return side.saver


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=FLAVORS)
def flavor(request: pytest.FixtureRequest) -> Flavor:
    value: Flavor = request.param
    return value


@pytest.fixture
def savers(
    kind: str, request: pytest.FixtureRequest
) -> Iterator[tuple[BaseCheckpointSaver[Any], BaseCheckpointSaver[Any]]]:
    """A bare reference saver and the retained thread's inner saver, of `kind`, stored
    apart (Postgres: one fresh database, two connections, two thread ids)."""
    with ExitStack() as stack:
        ref, ret = (
            stack.enter_context(open_sync(kind, request, role if kind == "sqlite" else ""))
            for role in ("ref", "ret")
        )
        yield ref, ret


@pytest.fixture
def pair(savers: tuple[BaseCheckpointSaver[Any], BaseCheckpointSaver[Any]], flavor: Flavor) -> Pair:
    ref_saver, inner = savers
    retained = RetainingSaver(inner, strict=True)
    retained.create_retention_indexes()
    name = uuid.uuid4().hex[:12]
    return Pair(
        ref=Side(ref_saver, f"ref-{name}", flavor, stamped=False),
        ret=Side(retained, f"ret-{name}", flavor, stamped=True),
    )


def _held(call: Callable[[], Any], gate: Gate, pool: ThreadPoolExecutor) -> Future[Any]:
    """Start `call` on a worker and return once it is held at `gate`."""
    future = pool.submit(call)
    try:
        gate.wait_entered()
    except TimeoutError:
        # The call failed (or finished) before reaching the gate: say how.
        future.result(timeout=WAIT_SECONDS)
        raise
    return future


def _problems(pair: Pair, results: dict[str, tuple[Any, Any]]) -> list[str]:
    """Every way the retained thread differs from the reference, or is not clean."""
    ref, ret = pair.sides
    found = []
    counts = integrity(ret.saver, ret.thread_id)
    if not counts.clean:
        found.append(f"retained store is not clean: {counts}")
    if not (control := integrity(ref.saver, ref.thread_id)).clean:
        found.append(f"reference store is not clean (the measure is wrong): {control}")
    for what, (ref_result, ret_result) in results.items():
        if ref_result != ret_result:
            found.append(f"{what}:\n  reference {ref_result}\n  retained  {ret_result}")
    ref_state = state_view(ref.graph.get_state(pinned(ref.thread_id)))
    ret_state = state_view(ret.graph.get_state(pinned(ret.thread_id)))
    if ref_state != ret_state:
        found.append(f"latest state:\n  reference {ref_state}\n  retained  {ret_state}")
    ref_history = listing(ref.graph.get_state_history(pinned(ref.thread_id)))
    ret_history = listing(ret.graph.get_state_history(pinned(ret.thread_id)), set(ret.stamps))
    if ref_history.entries != ret_history.entries:
        diff = first_difference(ref_history.entries, ret_history.entries)
        found.append("history (stamps taken out): " + diff)
    return found


Reclaimer = Literal["run", "admit", "engine"]
RECLAIMERS = pytest.mark.parametrize("reclaimer", ["run", "admit", "engine"])


def _reclaim(side: Side, reclaimer: Reclaimer) -> Any:
    """Reclaim the stamp, as the brief's admitted run does (`run`: its first read is
    the admission), or by an explicit `admit()`, or by an engine pass with the
    default policy (the stamp is the trailing leaf). On the reference thread, which
    has no stamp, only the run does anything. Returns what a client sees of it."""
    if reclaimer == "run":
        return side.run(user_turn("user 2"))
    if side.stamped:
        retained = _retaining(side)
        if reclaimer == "admit":
            retained.admit(side.thread_id)
        else:
            retained.enforce_thread_retention(side.thread_id)
    # What was reclaimed is not for a client to see.
    return "done"


@RECLAIMERS
def test_pinned_exit_run_held_while_its_stamp_is_reclaimed(
    pair: Pair, reclaimer: Reclaimer
) -> None:
    """(a): the pinned run read the stamp; its checkpoint is written after the reclaim."""
    outcomes: dict[str, list[Any]] = {"pinned run": [], "reclaimer": []}
    with ThreadPoolExecutor(max_workers=1) as pool:
        for side in pair.sides:
            side.run(user_turn("user 1"))
            shown = side.latest_id()  # on the retained thread: the stamp
            assert not side.stamped or shown == side.stamps[-1]
            pinned_run = partial(side.run, user_turn(HOLD), shown, durability="exit")
            held = _held(pinned_run, side.gate, pool)
            try:
                outcomes["reclaimer"].append(_reclaim(side, reclaimer))
            finally:
                side.gate.release.set()
            outcomes["pinned run"].append(held.result(timeout=WAIT_SECONDS))
    results = {k: (v[0], v[1]) for k, v in outcomes.items()}
    problems = _problems(pair, results)
    assert not problems, "\n".join(problems)


@RECLAIMERS
def test_update_state_held_on_the_stamp_while_it_is_reclaimed(
    pair: Pair, reclaimer: Reclaimer
) -> None:
    """(b): update_state read the stamp as latest; it puts after the stamp is reclaimed."""
    outcomes: dict[str, list[Any]] = {"update_state": [], "reclaimer": []}
    with ThreadPoolExecutor(max_workers=1) as pool:
        for side in pair.sides:
            side.run(user_turn("user 1"))
            update = partial(side.graph.update_state, pinned(side.thread_id), {"notes": [HOLD]})
            held = _held(update, side.gate, pool)
            try:
                outcomes["reclaimer"].append(_reclaim(side, reclaimer))
            finally:
                side.gate.release.set()
            # The returned config names the new checkpoint id: only success compares.
            held.result(timeout=WAIT_SECONDS)
            outcomes["update_state"].append("ok")
    results = {k: (v[0], v[1]) for k, v in outcomes.items()}
    problems = _problems(pair, results)
    assert not problems, "\n".join(problems)
