"""Helpers for the law tests (tests/law/).

The law: a retained thread is indistinguishable from the same thread in which
the reclaimed checkpoints were never written. Both test files run the same
operations on a REFERENCE thread (a bare saver, never stamped) and a RETAINED
thread (`RetainingSaver` over its own saver of the same kind, stamped with a
duration leaf after every completed run) and compare what a client sees. This
module holds what they share: a small deterministic graph (chat turns, an
optional human-in-the-loop node, a full or `DeltaChannel` list), a `Gate` that
holds a run or an `update_state` at a known point, and comparable views of
snapshots and histories with ids, timestamps and the stamps themselves dropped.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypedDict

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import StateSnapshot, interrupt

from retaining_saver.testing.graphs import extend_all
from retaining_saver.testing.views import normalize

Flavor = Literal["full", "delta"]
FLAVORS: tuple[Flavor, ...] = ("full", "delta")

HOLD = "hold"
"""A value that makes `reply` (as the last `said` entry) or the `notes` reducer wait on the Gate."""

WAIT_SECONDS = 30.0
"""How long a gated step waits for its release before failing: a deadlock guard, not a sleep."""

View = dict[str, Any]


class Gate:
    """Stops one step of a graph at a known point until the test releases it.

    `entered` is set when a run (or an update) reaches the point, `release` lets
    it go on. Waits time out instead of hanging, so a deadlock fails the test.
    """

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def hold(self) -> None:
        self.entered.set()
        if not self.release.wait(WAIT_SECONDS):
            raise TimeoutError("the gate was never released")

    def wait_entered(self) -> None:
        if not self.entered.wait(WAIT_SECONDS):
            raise TimeoutError("nothing reached the gate")


def law_graph(
    checkpointer: BaseCheckpointSaver[Any] | None, flavor: Flavor, gate: Gate | None = None
) -> Any:
    """`START -> reply -> count -> [review] -> END`, deterministic, no model.

    `said` is a plain list (`full`) or a beta `DeltaChannel` rebuilt from ancestor
    writes (`delta`), which is what makes a broken or re-parented chain lose state.
    A turn with `ask=True` routes to `review`, which calls `interrupt()` and
    appends the human's answer once resumed with `Command(resume=...)`.
    `notes` is written only by `update_state`; its reducer, like `reply`, waits
    on `gate` when it meets `HOLD`, so a test can stop an update between its
    read of "latest" and its put.
    """

    def gated_add(left: list[str], right: list[str]) -> list[str]:
        if gate is not None and HOLD in right:
            gate.hold()
        return [*left, *right]

    said: Any = operator.add if flavor == "full" else DeltaChannel(extend_all, snapshot_frequency=3)

    # Built with the functional syntax: the reducers are closures over `gate`, and
    # class-body annotations are strings here (`from __future__ import annotations`)
    # that LangGraph could not resolve against this function's locals.
    typed_dict: Any = TypedDict
    state_schema = typed_dict(
        "LawState",
        {
            "said": Annotated[list[str], said],
            "turns": int,
            "ask": bool,
            "notes": Annotated[list[str], gated_add],
        },
        total=False,
    )

    def reply(state: Any) -> dict[str, Any]:
        last = (state.get("said") or ["nothing"])[-1]
        if gate is not None and last == HOLD:
            gate.hold()
        return {"said": [f"echo {last}"]}

    def count(state: Any) -> dict[str, Any]:
        return {"turns": state.get("turns", 0) + 1}

    def route(state: Any) -> str:
        return "review" if state.get("ask") else END

    def review(state: Any) -> dict[str, Any]:
        answer = interrupt(f"review turn {state.get('turns', 0)}")
        return {"said": [f"human {answer}"], "ask": False}

    builder: Any = StateGraph(state_schema)
    builder.add_node("reply", reply)
    builder.add_node("count", count)
    builder.add_node("review", review)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "count")
    builder.add_conditional_edges("count", route, ["review", END])
    builder.add_edge("review", END)
    return builder.compile(checkpointer=checkpointer)


def user_turn(label: str, *, ask: bool = False) -> dict[str, Any]:
    """The input of one user turn; `ask` routes it through the interrupting `review` node."""
    return {"said": [label], "ask": ask}


def checkpoint_id_of(config: RunnableConfig | None) -> str | None:
    if not config:
        return None
    value = config.get("configurable", {}).get("checkpoint_id")
    return str(value) if value else None


def state_view(snapshot: StateSnapshot) -> View:
    """What a client sees of one snapshot: values, next, pending interrupts (no ids)."""
    return {
        "values": normalize(snapshot.values),
        "next": list(snapshot.next),
        "interrupts": normalize(list(snapshot.interrupts)),
        "tasks": [(t.name, normalize(list(t.interrupts))) for t in snapshot.tasks],
    }


@dataclass
class Listing:
    """A `get_state_history` listing with the thread's stamps taken out.

    Attributes:
        entries: Every non-stamp snapshot, newest first, as a `state_view` plus
            its metadata `source` and `parent`: the position of its parent in
            `entries` (a parent that is a listed stamp counts as the stamp's own
            parent, since the stamp clones it), None for a root, "missing" when
            the parent is not listed.
        position: Every listed id, stamps included, to the position in `entries`
            of the checkpoint whose state it shows (a stamp: its nearest
            non-stamp ancestor), or "missing".
        ids: The id at each position of `entries`.
        stamps: The stamp ids listed, newest first.
        listed: Every listed id, stamps included, newest first.
    """

    entries: list[View] = field(default_factory=list)
    position: dict[str, int | str] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    stamps: list[str] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)


def listing(snapshots: Iterable[StateSnapshot], stamps: Collection[str] = ()) -> Listing:
    """The listing of `snapshots` (newest first) without the checkpoints in `stamps`."""
    snaps = list(snapshots)
    parent_of: dict[str, str | None] = {}
    for snap in snaps:
        cid = checkpoint_id_of(snap.config)
        assert cid is not None, f"a history entry has no checkpoint id: {snap.config}"
        assert cid not in parent_of, f"get_state_history repeated checkpoint {cid}"
        parent_of[cid] = checkpoint_id_of(snap.parent_config)
    out = Listing()
    for snap in snaps:
        cid = str(checkpoint_id_of(snap.config))
        out.listed.append(cid)
        if cid in stamps:
            out.stamps.append(cid)
            continue
        out.position[cid] = len(out.ids)
        out.ids.append(cid)

    def shown(cid: str | None) -> int | str | None:
        # Follow listed stamps down to the checkpoint they clone.
        seen: set[str] = set()
        while cid is not None and cid in stamps and cid in parent_of and cid not in seen:
            seen.add(cid)
            cid = parent_of[cid]
        if cid is None:
            return None
        return out.position.get(cid, "missing")

    for stamp in out.stamps:
        found = shown(stamp)
        out.position[stamp] = "missing" if found is None else found
    for snap in snaps:
        cid = str(checkpoint_id_of(snap.config))
        if cid in stamps:
            continue
        entry = state_view(snap)
        entry["source"] = (snap.metadata or {}).get("source")
        entry["parent"] = shown(parent_of[cid])
        out.entries.append(entry)
    return out


def first_difference(left: Sequence[Any], right: Sequence[Any]) -> str:
    """A short description of where two listings part, for assertion messages."""
    for i, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            return f"entry {i} differs:\n  reference {a}\n  retained  {b}"
    return f"lengths differ: reference {len(left)}, retained {len(right)}"


def pair_new_ids(to_twin: dict[str, str], mine: Iterable[str], theirs: Iterable[str]) -> None:
    """Map the kept thread's ids that `to_twin` does not know yet to the twin's new ids, in
    order: both threads wrote the same operations, so the same checkpoints."""
    new_mine = sorted(i for i in mine if i not in to_twin)
    known = set(to_twin.values())
    new_theirs = sorted(i for i in theirs if i not in known)
    assert len(new_mine) == len(new_theirs), "the twins wrote different checkpoints"
    to_twin.update(zip(new_mine, new_theirs, strict=True))


def run_machine(machine: Any, examples: int, steps: int) -> None:
    """Run a law state machine: every step does real I/O on two threads, which is the
    point, so no deadline and no too-slow health check."""
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            print_blob=True,
        ),
    )
