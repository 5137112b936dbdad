"""When a write is a resume's first on a checkpoint, so that the resume ledger records
the checkpoint's writes rows before it (`_rules._resumed`).

A run resumes a thread by writing onto a checkpoint another run made: a `Command`'s
writes, the tasks it runs again, the tasks a crashed run left without writes. Its
first such write is preceded by the ledger entry (`Backend.note_resume`): one
statement, which re-checks what it records on, so Postgres runs it with no
transaction around it (one round trip; SQLite in its own `BEGIN IMMEDIATE`). What the
run's read saw tells that the write is a resume (the metadata's run id); the entry itself is
taken from the store as it is then, under the thread's lock, rather than from the rows
the read returned: a read hands values back decoded and without their index, and the
entry must hold each row's key and serialized value exactly.

A run's own writes must not pay for this, and its reads stay reads: each checkpoint a
read returns (`get_tuple`, as a run's loop reads the checkpoint it starts from) is
remembered in memory with the run its metadata names if it holds writes, and only a
write on such a checkpoint by another run is a resume to record. The writes a run
puts on the checkpoints it makes (every step of a run that is not a resume) are never
read first, so they cost no statement; neither does a write that leaves nothing to
record. A write without a run id (no `run_id` in the config's `metadata` or
`configurable`) is not recorded: no run removal can name it. A resume whose read this
process did not see (its entry evicted, at most `ENTRIES` reads of checkpoints with
writes back) is not recorded either: its rollback reads the store, as before the
ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from retaining_saver._lru import BoundedLru
from retaining_saver._rules import RUN_ID_KEY

Point = tuple[str, str, str]
"""A checkpoint: thread, namespace, id."""
Resume = tuple[str, str, str]
"""A resume to record: namespace, checkpoint id, run id (the thread is the lock's)."""

ENTRIES = 8192
"""How many checkpoints read (and resumes recorded) are remembered: the newest ones."""


def run_id_of(config: Mapping[str, Any]) -> str | None:
    """The run a config belongs to, as LangGraph names it in the checkpoint metadata it
    writes: `metadata.run_id`, else `configurable.run_id`."""
    for part in ("metadata", "configurable"):
        found = config.get(part)
        if isinstance(found, Mapping) and found.get(RUN_ID_KEY) is not None:
            return str(found[RUN_ID_KEY])
    return None


class ResumeNotes:
    """Which run made each checkpoint a read returned, and the resumes recorded."""

    def __init__(self) -> None:
        self._seen: BoundedLru[Point, str] = BoundedLru(ENTRIES)
        self._noted: BoundedLru[tuple[Point, str], bool] = BoundedLru(ENTRIES)

    def seen(self, read: CheckpointTuple | None) -> CheckpointTuple | None:
        """`read`, once remembered with the run that made it ("" for none), if it holds
        writes: a resume's rollback needs the ledger only where writes were there before
        it (with none, every write on the checkpoint is the resume's, which the store
        tells), so a read of a checkpoint without writes, a run's usual start, costs
        nothing here."""
        if read is not None and read.pending_writes:
            configurable = read.config.get("configurable") or {}
            checkpoint_id = configurable.get("checkpoint_id")
            if checkpoint_id and configurable.get("thread_id") is not None:
                ns = configurable.get("checkpoint_ns", "")
                run_id = (read.metadata or {}).get(RUN_ID_KEY)
                point = (str(configurable["thread_id"]), ns, str(checkpoint_id))
                self._seen.put(point, "" if run_id is None else str(run_id))
        return read

    def first_write(self, config: RunnableConfig) -> Resume | None:
        """The resume a write under `config` starts, to record before it lands; None for a
        write without a run, on a checkpoint no read returned or its run made, or on one
        already noted."""
        configurable = config.get("configurable") or {}
        checkpoint_id = configurable.get("checkpoint_id")
        if not checkpoint_id:
            return None
        ns = configurable.get("checkpoint_ns", "")
        point = (str(configurable["thread_id"]), ns, str(checkpoint_id))
        # The checkpoint first: a run's writes land on checkpoints no read returned (or
        # returned without writes), and so never look for their run.
        if (made_by := self._seen.get(point)) is None or (run_id := run_id_of(config)) is None:
            return None
        if made_by == run_id or self._noted.get((point, run_id)):
            return None
        return ns, str(checkpoint_id), run_id

    def noted(self, thread_id: str, resume: Resume) -> None:
        """The resume's entry is recorded (or the store found nothing to record, or it
        could not be written): its run's later writes record none."""
        ns, checkpoint_id, run_id = resume
        self._noted.put(((thread_id, ns, checkpoint_id), run_id), True)
