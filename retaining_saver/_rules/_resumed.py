"""Which writes a removed run left on a checkpoint that stays (`delete_for_runs`). No I/O.

A run that resumes a thread starts at its head, a checkpoint an earlier run wrote, and
stores part of its work there before it writes a checkpoint of its own: the `Command`'s
writes (`Command(resume=...)`, `update`, `goto`) under the null task id, and each task
it runs again, under that task's id (the id LangGraph derives from the checkpoint, so
the same id the earlier run's interrupted task had). Deleting the run's checkpoints
leaves that checkpoint; these writes must go with them, or the thread reads as resumed
(its interrupt answered, its task done) with none of the resume's checkpoints left.

The store does not say which run put a writes row. The earlier run stopped at that
checkpoint (it has no child of its own), and what it can have put there is:

- the writes of each task that finished in that step, when a task of the step
  stopped the run: an interrupted task's `__interrupt__` write, a failed task's
  `__error__` write;
- nothing, when no task of the step stopped it (a static breakpoint such as
  `interrupt_before`, the step limit, or the end of the graph): it stopped before the
  step ran. Then the checkpoint holds only the writes its own making put there
  (`OWN_CHANNELS`, by its metadata `source`): none on one a run's loop wrote ("loop",
  "input", "fork": a fork applies a `Command`'s writes to its values, it stores none),
  the `__pregel_push` writes on one `update_state` wrote ("update"). Another source
  is not read so.

So the writes that go (`later_writes`) are those the earlier run never puts there:
every write under the null task id, every `__resume__` write (a resume's answer, and
the answers an interrupted task consumed), the writes of a task that also owns an
`__interrupt__` or `__error__` write (it ran again after it stopped), and, on a
checkpoint of a known source no task of which stopped, every write its making does
not put there. What stays: the interrupts and errors and the finished tasks' writes.

That reading is what the store alone tells, and it falls short twice: a task answered
by several runs in turn (several `interrupt()` calls in one node, each resumed by its
own run, the earlier ones writing no checkpoint) had its earlier answers replaced in
place (special writes upsert), and a run that crashed in the middle of a step (its
finished tasks' writes on the checkpoint, no `__error__` write) cannot be told from
the run that resumed it. So the wrapper keeps what is missing itself, in a ledger
(`Resumption`): when a run first writes onto a checkpoint another run made (a
resume), it records, before that write lands, the keys of every writes row already
there and the whole row of each special write (index below 0), the only rows a later
write can replace. Rolling that run back restores exactly that (`restorations`):
every row not recorded goes, every recorded special row is put back as it was. Where
a checkpoint has a ledger entry of a removed run, the ledger decides; the reading
above is left for resumes the ledger never saw (written before it existed, or by a
writer that is not a `RetainingSaver`). Entries go with their thread (deleted, swept,
copied with it). An entry whose checkpoint another deletion took (a `keep_latest`
prune, a history pass) can match nothing, since a checkpoint id is never reused: the
thread's next run removal drops it (`restorations`), rather than every plan paying a
statement for it (a history pass runs on a run's admission).

Only a checkpoint that is left childless by the removal is cleaned (`resumed_points`,
`restorations`): one with no child that stays, no checkpoint grafted onto it, and its
own run not removed. A checkpoint something still descends from is read through by
what descends (a DeltaChannel walk applies its writes), so its writes stay.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from retaining_saver._rules._lineage import Graft, Lineage, NodeKey
from retaining_saver._rules._runs_removal import run_of

NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
"""LangGraph's task id for writes no task made (a `Command`'s)."""
RESUME = "__resume__"
INTERRUPT = "__interrupt__"
ERROR = "__error__"
STOPPED = frozenset({INTERRUPT, ERROR})
"""The writes a task that stopped its run leaves: it may run again in a later run."""
OWN_CHANNELS: dict[str, frozenset[str]] = {
    "loop": frozenset(),
    "input": frozenset(),
    "fork": frozenset(),
    "update": frozenset({"__pregel_push"}),
}
"""By a checkpoint's metadata `source`, the channels of the writes that making it puts
on it: a run's loop puts none there, `update_state` its functional-API pushes."""

WriteRow = tuple[str, str, int]
"""A writes row as this rule reads it: task id, channel, index."""
WriteKey = tuple[str, int]
"""A writes row's key within its checkpoint: task id, index."""


def resumed_points(
    lineage: Lineage,
    deleted: Collection[NodeKey],
    grafts: Iterable[Graft],
    run_ids: Collection[str],
) -> tuple[NodeKey, ...]:
    """The checkpoints that stay, childless, where a removed run started: each has a
    deleted child, no child that stays, no graft onto it, and its own run not removed.

    Args:
        lineage: The thread as the removal read it.
        deleted: The checkpoints the removal deleted.
        grafts: The grafts it made.
        run_ids: The runs removed.
    """
    gone = set(deleted)
    grafted_onto = {(g.checkpoint_ns, g.new_parent_id) for g in grafts}
    children = lineage.children()
    found = []
    for key, node in sorted(lineage.nodes.items()):
        below = set(children.get(key, ()))
        if key in gone or not below or not below <= gone or key in grafted_onto:
            continue
        if run_of(node) not in run_ids:
            found.append(key)
    return tuple(found)


def later_writes(rows: Iterable[WriteRow], source: object) -> list[WriteKey]:
    """The writes among `rows` (one checkpoint's, whose metadata `source` is given) that a
    later run put there: under the null task id, `__resume__` writes, and every other
    write of a task that also owns an `__interrupt__` or `__error__` write; on a
    checkpoint of a known source (`OWN_CHANNELS`) no task of which owns one, every
    write on a channel its making does not write. In row order."""
    listed = list(rows)
    rerun = {task for task, channel, _ in listed if channel in STOPPED}
    own = OWN_CHANNELS.get(source) if isinstance(source, str) else None
    if not rerun and own is not None:
        return [(task, idx) for task, channel, idx in listed if channel not in own]
    return [
        (task, idx)
        for task, channel, idx in listed
        if task == NULL_TASK_ID or channel == RESUME or (task in rerun and channel not in STOPPED)
    ]


@dataclass(frozen=True, slots=True)
class Resumption:
    """A ledger entry: run `run_id` wrote onto the checkpoint, which another run made, and
    the wrapper recorded its writes rows as they were just before (`seq` orders the
    entries of one checkpoint, first resume first)."""

    checkpoint_ns: str
    checkpoint_id: str
    run_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class Restoring:
    """What a run removal does with the ledger: the entries whose recorded rows each
    checkpoint gets back (`restore`), and the entries that go (`dropped`)."""

    restore: tuple[Resumption, ...] = ()
    dropped: tuple[Resumption, ...] = ()


def restorations(
    lineage: Lineage,
    deleted: Collection[NodeKey],
    grafts: Iterable[Graft],
    run_ids: Collection[str],
    entries: Iterable[Resumption],
) -> Restoring:
    """The checkpoints whose writes a removal of `run_ids` puts back as they were before
    the removed runs resumed them, and the ledger entries that go.

    On a checkpoint that stays, the entries of the last resumes, each of a removed run
    (the longest such run of entries, by `seq`), are undone together: the checkpoint
    gets the rows the first of them recorded, if the removal leaves it childless (a
    checkpoint something descends from is read through, as in `resumed_points`); else
    they stay for a later removal. An entry of a removed run followed by one of a run
    that stays is kept: its rows are a state the thread no longer passes through. The
    entries of a checkpoint that is gone (deleted now, or before) all go.

    Args:
        lineage: The thread as the removal read it.
        deleted: The checkpoints the removal deleted.
        grafts: The grafts it made.
        run_ids: The runs removed.
        entries: The thread's ledger entries.

    Returns:
        The entries to restore, one per checkpoint, and those to drop.
    """
    gone = set(deleted)
    grafted_onto = {(g.checkpoint_ns, g.new_parent_id) for g in grafts}
    children = lineage.children()
    by_point: dict[NodeKey, list[Resumption]] = {}
    for entry in entries:
        by_point.setdefault((entry.checkpoint_ns, entry.checkpoint_id), []).append(entry)
    restore: list[Resumption] = []
    dropped: list[Resumption] = []
    for key, found in sorted(by_point.items()):
        found.sort(key=lambda e: (e.seq, e.run_id))
        if key in gone or key not in lineage.nodes:
            dropped.extend(found)
            continue
        undone = _removed_suffix(found, run_ids)
        childless = set(children.get(key, ())) <= gone and key not in grafted_onto
        if undone and childless:
            restore.append(undone[0])
            dropped.extend(undone)
    return Restoring(tuple(restore), tuple(dropped))


def _removed_suffix(entries: list[Resumption], run_ids: Collection[str]) -> list[Resumption]:
    """The last entries, in order, each of a removed run."""
    cut = len(entries)
    while cut and entries[cut - 1].run_id in run_ids:
        cut -= 1
    return entries[cut:]
