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
the cap: one chain (a checkpoint with its descendants in its unit), never the newest
checkpoints of several branches. So the cap bounds a pass's work by `max(cap, one
piece)`, a piece being about one run's checkpoints (a run's last checkpoint owns no
writes), never the thread's length, and repeated capped passes always reach what one
uncapped pass deletes. Removed branches that each hold the subgraph memory a fork from
another loads cannot go one by one: they make one piece.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence

from retaining_saver._rules._history import _History
from retaining_saver._rules._leaf import ROOT_NAMESPACE
from retaining_saver._rules._lineage import Deletion, HistoryUnit, NodeKey
from retaining_saver._rules._runs import post_order, root_of


def capped(
    history: _History,
    room: int | None,
    others: Sequence[Deletion] = (),
    *,
    may_pass_the_cap: bool = False,
) -> tuple[list[HistoryUnit], list[HistoryUnit]]:
    """The history units that fit in `room` deletions, and the ones deferred.

    Whole units go first, in order; the first that does not fit gives the
    newest part of it that does (`_newest_part`), and every later unit waits:
    a subgraph namespace's units follow the root's, and must not go while the
    root checkpoints they belong to stay. What would delete the subgraph memory
    a fork from a root checkpoint the pass leaves loads waits too
    (`_sparing_fork_memory`; `others`: the pass's other deletions). With
    `may_pass_the_cap` (the pass deletes nothing else and its cap is not 0,
    which only plans), a pass left with nothing deletes one piece whole
    (`_pieces`): the smallest of the first unit that spares that memory, else of
    the next root unit (one removed branch can hold the memory a fork from
    another loads, while the other holds none of its own), else the units that
    hold each other's (`_holding_each_others_memory`).
    """
    if room is None:
        return list(history.units), []
    units = list(history.units)
    taken, deferred = _sparing_fork_memory(history, others, *_fitting(history, units, room))
    if taken or not deferred or not may_pass_the_cap:
        return taken, deferred
    # Nothing goes: the smallest piece that keeps every promise goes, past the cap, so
    # that repeated passes still converge (see the module's docstring).
    for index, unit in enumerate(units):
        if index and _lead(unit)[1] != ROOT_NAMESPACE:
            continue  # a subgraph namespace's units wait for the root's
        for piece in _pieces(history, unit):
            rest = _rest(unit, piece)
            left = [u for u in (*units[:index], rest, *units[index + 1 :]) if u.deletions]
            if not _deletes_fork_memory(history, others, [piece], left):
                return [piece], left
    return _holding_each_others_memory(history, others, units)


def _holding_each_others_memory(
    history: _History, others: Sequence[Deletion], units: list[HistoryUnit]
) -> tuple[list[HistoryUnit], list[HistoryUnit]]:
    """The first unit, with every unit removing a root checkpoint a fork from which loads
    subgraph memory it deletes, and so on, made one piece; and the units left. Two
    removed branches, each of several runs, can each hold what a fork from the other
    loads: neither goes alone. All the units together are the uncapped plan, which keeps
    every promise, so this ends."""
    spaces = _subgraph_namespaces(history)
    group, left = units[:1], units[1:]
    while left:
        gone = _gone(others, group)
        joining = [u for u in left if history._fork_memory(_roots(u), spaces) & gone]
        if not joining:
            break
        group += joining
        left = [u for u in left if all(u is not j for j in joining)]
    piece = HistoryUnit([])
    for unit in group:
        piece.absorb(unit)
    return [piece], left


def _gone(others: Sequence[Deletion], units: Sequence[HistoryUnit]) -> set[NodeKey]:
    """What a pass deletes: its other deletions, and `units`'."""
    return {_key(d) for d in others} | {_key(d) for u in units for d in u.deletions}


def _subgraph_namespaces(history: _History) -> set[str]:
    """The namespaces of the thread's subgraph checkpoints: whose memory a fork loads."""
    return {ns for ns, _ in history.lineage.nodes if ns != ROOT_NAMESPACE}


def _rest(unit: HistoryUnit, part: HistoryUnit) -> HistoryUnit:
    """`unit`'s deletions not in `part`, left for later."""
    done = {_key(d) for d in part.deletions}
    return HistoryUnit([d for d in unit.deletions if _key(d) not in done])


def _roots(unit: HistoryUnit) -> list[NodeKey]:
    return [_key(d) for d in unit.deletions if d.checkpoint_ns == ROOT_NAMESPACE]


def _fitting(
    history: _History, units: list[HistoryUnit], room: int
) -> tuple[list[HistoryUnit], list[HistoryUnit]]:
    """Whole units while they fit in `room`, then the newest part of the next that does."""
    taken: list[HistoryUnit] = []
    for index, unit in enumerate(units):
        if len(unit.deletions) <= room:
            taken.append(unit)
            room -= len(unit.deletions)
            continue
        part = _newest_part(history, unit, room)
        if part is None:
            return taken, units[index:]
        return [*taken, part], [_rest(unit, part), *units[index + 1 :]]
    return taken, []


def _sparing_fork_memory(
    history: _History,
    others: Sequence[Deletion],
    taken: list[HistoryUnit],
    deferred: list[HistoryUnit],
) -> tuple[list[HistoryUnit], list[HistoryUnit]]:
    """`taken` and `deferred`, with the first taken unit that deletes the subgraph memory a
    fork from a root checkpoint this pass leaves loads (`FORK_MEMORY`: the rules judged
    it for the uncapped plan, where that root checkpoint went too) deferred, with every
    unit after it, until none does. `others`: the pass's other deletions."""
    while taken and (blocked := _deletes_fork_memory(history, others, taken, deferred)):
        index = taken.index(blocked)
        taken, deferred = taken[:index], [*taken[index:], *deferred]
    return taken, deferred


def _deletes_fork_memory(
    history: _History,
    others: Sequence[Deletion],
    taken: Sequence[HistoryUnit],
    deferred: Sequence[HistoryUnit],
) -> HistoryUnit | None:
    """The first of `taken` that deletes the subgraph memory a fork from a root checkpoint
    the pass leaves loads, if any. Nothing deferred: the pass is the uncapped plan, for
    which the rules judged fork memory."""
    if not history.replays_memory or not deferred:
        return None
    gone = _gone(others, taken)
    staying = [k for k in history.lineage.nodes if k[0] == ROOT_NAMESPACE and k not in gone]
    memory = history._fork_memory(staying, _subgraph_namespaces(history))
    return next((u for u in taken if any(_key(d) in memory for d in u.deletions)), None)


def _newest_part(history: _History, unit: HistoryUnit, room: int) -> HistoryUnit | None:
    """The largest part of `unit`'s deletions in its lead namespace (the root's, if it
    has any), newest first, with the subgraph checkpoints written under them, that fits
    in `room` and leaves every checkpoint still to go loading as before; None if none
    does.

    A child is newer than its parent, so such a part never leaves a checkpoint still
    to go without its parent, unless the part makes it a root or grafts it.
    """
    keys, lead = _lead(unit)
    under = _written_under(history, keys, lead)
    # Newest first (ids are time-ordered, and a child is newer than its parent): what a
    # fork from a checkpoint still to go loads was written before it.
    order = sorted((k for k in keys if k[0] == lead), key=lambda k: k[1], reverse=True)
    for size in range(min(room, len(order)), 0, -1):
        part = _part(history, keys, under, order[:size], room)
        if part is not None:
            return part
    return None


def _pieces(history: _History, unit: HistoryUnit) -> Iterator[HistoryUnit]:
    """The parts of `unit` that keep every checkpoint still to go loading as before, each
    one chain of its lead namespace (a checkpoint with its descendants in the unit) with
    the subgraph checkpoints written under it, smallest first (newest first among
    equals); then `unit` whole. A newest part across the branches of a stretch would
    join several chains: several pieces, each of which could go alone."""
    keys, lead = _lead(unit)
    within = {k for k in keys if k[0] == lead}
    newest_first = sorted(within, key=lambda k: k[1], reverse=True)
    under = _written_under(history, keys, lead)
    # A chain's size as `_part` builds it: its checkpoints and those written under them.
    sizes: dict[NodeKey, int] = {}
    for key in newest_first:  # a child is newer than its parent: counted first
        kids = history.children.get(key, [])
        own = 1 + len(under.get(key[1], ()))
        sizes[key] = own + sum(sizes[kid] for kid in kids if kid in within)
    for top in sorted(newest_first, key=sizes.__getitem__):
        part = _part(history, keys, under, post_order(history.children, top, within), None)
        if part is not None:
            yield part
    yield unit


def _lead(unit: HistoryUnit) -> tuple[list[NodeKey], str]:
    """`unit`'s keys, and its lead namespace: the root's, if it has any."""
    keys = [_key(d) for d in unit.deletions]
    return keys, ROOT_NAMESPACE if any(k[0] == ROOT_NAMESPACE for k in keys) else keys[0][0]


def _written_under(
    history: _History, keys: Sequence[NodeKey], lead: str
) -> dict[str | None, list[NodeKey]]:
    """Under the root's lead, the subgraph checkpoints of `keys` by the root checkpoint
    they were written under (they go with it); none under a subgraph's lead."""
    under: dict[str | None, list[NodeKey]] = {}
    if lead == ROOT_NAMESPACE:
        for key in keys:
            if key[0] != lead:
                under.setdefault(root_of(history.lineage.nodes[key]), []).append(key)
    return under


def _part(
    history: _History,
    keys: Sequence[NodeKey],
    under: Mapping[str | None, Sequence[NodeKey]],
    candidate: Sequence[NodeKey],
    room: int | None,
) -> HistoryUnit | None:
    """`candidate` (keys of the lead namespace), with the subgraph checkpoints written
    under it (`under`: `_written_under`), as one unit, if that fits in `room` (None:
    any size) and leaves every other checkpoint of `keys` loading as before."""
    chosen = set(candidate)
    chosen.update(k for _, cid in candidate for k in under.get(cid, ()))
    if room is not None and len(chosen) > room:
        return None
    part = _replanned(history, chosen)
    if (
        part is None
        or not _leaves_parents(history, keys, chosen, part)
        or _bares_writes(history, keys, chosen, part)
    ):
        return None
    return part


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
    where a pre-v4 checkpoint grafted would read other pending sends, or where a
    checkpoint that stays would lose its parent with no graft to give it another."""
    merged = HistoryUnit([])
    for ns in sorted({k[0] for k in chosen}):
        line = history.lines[ns]
        history.on_line = set(line)
        removed = {k: history.reasons[k] for k in chosen if k[0] == ns}
        if _strands(history, line, removed):
            return None
        for unit in history._units(line, removed):
            merged.absorb(unit)
    nodes = history.lineage.nodes
    for graft in merged.grafts:
        child = nodes[(graft.checkpoint_ns, graft.child_id)]
        parent = nodes[(graft.checkpoint_ns, graft.new_parent_id)]
        if child.is_pre_v4 and parent.write_count:
            return None
    return merged


def _strands(history: _History, line: Sequence[NodeKey], removed: Collection[NodeKey]) -> bool:
    """Whether deleting `removed` (one namespace's) leaves a checkpoint without its parent:
    one off the line (only the line's are grafted), or any, if the line's head goes (the
    namespace goes whole). A subgraph checkpoint written under a run can continue memory
    written under another, which a chain of the other's root checkpoints may take."""
    if line[-1] in removed:
        return any(k[0] == line[0][0] and k not in removed for k in history.lineage.nodes)
    return any(
        kid not in removed and kid not in history.on_line
        for key in removed
        for kid in history.children.get(key, [])
    )


def _key(deletion: Deletion) -> NodeKey:
    return (deletion.checkpoint_ns, deletion.checkpoint_id)
