"""How `max_delete_per_run` bounds the history rules' work so that repeated capped passes
reach the uncapped result. No I/O.

A history unit (a stretch with its graft or root, and the subgraph checkpoints that go
with it) that does not fit in what is left of the cap is not deferred whole: a part of
it goes first, either its newest part (the kept checkpoint below the stretch is grafted
onto the newest checkpoint of the stretch that stays) or its oldest (the checkpoint
after it becomes the line's new root), so every checkpoint still to go loads as before
and the next pass finds a shorter stretch.

Some pieces cannot be split: a root checkpoint with the subgraph checkpoints written
under it, a checkpoint that owns writes with the removed checkpoints below it. A pass
that could delete nothing within the cap deletes the smallest such piece whole, past
the cap: the cap bounds a pass's work by `max(cap, one piece)`, a piece being at most
one run's checkpoints (a run's last checkpoint owns no writes), never the thread's
length, and repeated capped passes always reach what one uncapped pass deletes.
"""

from __future__ import annotations

from collections.abc import Sequence

from retaining_saver._rules._history import _History
from retaining_saver._rules._leaf import ROOT_NAMESPACE
from retaining_saver._rules._lineage import Deletion, HistoryUnit, NodeKey
from retaining_saver._rules._runs import root_of


def capped(
    history: _History, room: int | None, *, may_pass_the_cap: bool = False
) -> tuple[list[HistoryUnit], list[HistoryUnit]]:
    """The history units that fit in `room` deletions, and the ones deferred.

    Whole units go first, in order; the first that does not fit gives the
    newest part of it that does (`newest_part`), and every later unit waits:
    a subgraph namespace's units follow the root's, and must not go while the
    root checkpoints they belong to stay. With `may_pass_the_cap` (the pass
    deletes nothing else and its cap is not 0, which only plans), a first unit
    of which no part fits gives its smallest piece whole.
    """
    if room is None:
        return list(history.units), []
    units = list(history.units)
    taken: list[HistoryUnit] = []
    for index, unit in enumerate(units):
        if len(unit.deletions) <= room:
            taken.append(unit)
            room -= len(unit.deletions)
            continue
        part = newest_part(history, unit, room)
        if part is None and not taken and may_pass_the_cap:
            # Nothing fits: the smallest piece that keeps every promise goes, past the
            # cap, so that repeated passes still converge (see the module's docstring).
            part = newest_part(history, unit, room, past_the_cap=True) or unit
        done = set() if part is None else {_key(d) for d in part.deletions}
        rest = HistoryUnit([d for d in unit.deletions if _key(d) not in done])
        return [*taken, *([part] if part else [])], [rest, *units[index + 1 :]]
    return taken, []


def sparing_fork_memory(
    history: _History,
    others: Sequence[Deletion],
    taken: list[HistoryUnit],
    deferred: list[HistoryUnit],
) -> tuple[list[HistoryUnit], list[HistoryUnit]]:
    """`taken` and `deferred`, with the first taken unit that deletes the subgraph memory a
    fork from a root checkpoint this pass leaves loads (`FORK_MEMORY`: the rules judged
    it for the uncapped plan, where that root checkpoint went too) deferred, with every
    unit after it, until none does. `others`: the pass's other deletions."""
    if not deferred or not history.replays_memory:
        return taken, deferred
    spaces = {ns for ns, _ in history.lineage.nodes if ns != ROOT_NAMESPACE}
    while taken:
        gone = {_key(d) for d in others} | {_key(d) for u in taken for d in u.deletions}
        staying = [k for k in history.lineage.nodes if k[0] == ROOT_NAMESPACE and k not in gone]
        memory = history._fork_memory(staying, spaces)
        blocked = next(
            (i for i, u in enumerate(taken) if any(_key(d) in memory for d in u.deletions)),
            None,
        )
        if blocked is None:
            break
        taken, deferred = taken[:blocked], [*taken[blocked:], *deferred]
    return taken, deferred


def newest_part(
    history: _History, unit: HistoryUnit, room: int, *, past_the_cap: bool = False
) -> HistoryUnit | None:
    """The largest part of `unit`'s deletions in its lead namespace (the root's, if it
    has any), newest first, with the subgraph checkpoints written under them, that fits
    in `room` and leaves every checkpoint still to go loading as before; None if none
    does. With `past_the_cap`, the smallest such part, whatever its size.

    A child is newer than its parent, so such a part never leaves a checkpoint still
    to go without its parent, unless the part makes it a root or grafts it.
    """
    keys = [_key(d) for d in unit.deletions]
    lead = ROOT_NAMESPACE if any(k[0] == ROOT_NAMESPACE for k in keys) else keys[0][0]
    # Newest first (ids are time-ordered, and a child is newer than its parent): what a
    # fork from a checkpoint still to go loads was written before it.
    order = sorted((k for k in keys if k[0] == lead), key=lambda k: k[1], reverse=True)
    sizes = range(1, len(order) + 1) if past_the_cap else range(min(room, len(order)), 0, -1)
    for size in sizes:
        chosen = set(order[:size])
        if lead == ROOT_NAMESPACE:
            roots = {cid for _, cid in chosen}
            chosen |= {
                k for k in keys if k[0] != lead and root_of(history.lineage.nodes[k]) in roots
            }
        if past_the_cap or len(chosen) <= room:
            part = _replanned(history, chosen)
            if (
                part is not None
                and _leaves_parents(history, keys, chosen, part)
                and not _bares_writes(history, keys, chosen, part)
            ):
                return part
    return None


def _leaves_parents(
    history: _History, keys: Sequence[NodeKey], chosen: set[NodeKey], part: HistoryUnit
) -> bool:
    """Whether every checkpoint of `keys` left for later keeps its parent, or is made a
    root or grafted by `part` (the oldest part of a stretch goes first: its successor
    becomes the line's new root) and reads nothing from what goes: it stores every
    delta channel it has, and no pre-v4 sends are read from its parent's writes."""
    nodes = history.lineage.nodes
    moved = {(g.checkpoint_ns, g.child_id) for g in part.grafts}
    moved |= {(r.checkpoint_ns, r.checkpoint_id) for r in part.roots}
    for key in keys:
        parent = (key[0], str(nodes[key].parent_id))
        if key in chosen or parent not in chosen:
            continue
        node = nodes[key]
        if (
            key not in moved
            or history._unstored(node)
            or (node.is_pre_v4 and nodes[parent].write_count)
        ):
            return False
    return True


def _bares_writes(
    history: _History, keys: Sequence[NodeKey], chosen: set[NodeKey], part: HistoryUnit
) -> bool:
    """Whether a checkpoint of `keys` left for later loses its last child to `part` (no
    graft gives it another): one that owns writes would then look like an interrupted
    leaf (`PENDING_WRITES`), and no pass would take it. Its writes were consumed by
    that child; they go together."""
    nodes, children = history.lineage.nodes, history.children
    grafted = {(g.checkpoint_ns, g.new_parent_id) for g in part.grafts}
    return any(
        nodes[k].write_count and all(kid in chosen for kid in kids) and k not in grafted
        for k in keys
        if k not in chosen and (kids := children.get(k, []))
    )


def _replanned(history: _History, chosen: set[NodeKey]) -> HistoryUnit | None:
    """`chosen` as one unit, each namespace's stretches closed by a graft or root; None
    where a pre-v4 checkpoint grafted would read other pending sends."""
    merged = HistoryUnit([])
    for ns in sorted({k[0] for k in chosen}):
        line = history.lines[ns]
        history.on_line = set(line)
        removed = {k: history.reasons[k] for k in chosen if k[0] == ns}
        for unit in history._units(line, removed):
            merged.absorb(unit)
    nodes = history.lineage.nodes
    for graft in merged.grafts:
        child = nodes[(graft.checkpoint_ns, graft.child_id)]
        parent = nodes[(graft.checkpoint_ns, graft.new_parent_id)]
        if child.is_pre_v4 and parent.write_count:
            return None
    return merged


def _key(deletion: Deletion) -> NodeKey:
    return (deletion.checkpoint_ns, deletion.checkpoint_id)
