"""The writes of `RetainingSaver`: each one under its thread's lock, landing where the
thread without reclaimed checkpoints would have it.

Every deletion holds the thread's lock alone, so no `put` or `put_writes` of this
process lands on a checkpoint while it is being reclaimed. A write that deletes and
records nothing first (every write of a run but the first after a stamp or on a
resumed checkpoint) shares the lock with other such writes, which run beside each
other as on the bare saver (LangGraph overlaps a run's writes). A write pinned to an
id this process reclaimed lands on the clone that survives it. A write that
would keep a stamp (an `update_state` on or beside it, a second stamp, writes
on it) reclaims the stamp first, as an admission would. What a write reclaimed
is accounted for once its lock is released. A run's first write on a checkpoint
another run made (a resume) is preceded by its resume ledger entry (`_resumes`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata

from retaining_saver._accounting import Accounts
from retaining_saver._admission import Admitted, namespace
from retaining_saver._delegate import DelegatingSaver
from retaining_saver._effects import Call, Flow, Locked, Mode, Performer, Run, adrive, drive
from retaining_saver._locks import SHARING, ThreadLocks
from retaining_saver._lru import BoundedLru
from retaining_saver._reclaimed import Key, ReclaimedIds
from retaining_saver._resumes import ResumeNotes
from retaining_saver._rooms import Rooms
from retaining_saver._rules import RetentionPolicy, Skip
from retaining_saver._stamps import OwnStamps
from retaining_saver.backends._base import Backend

logger = logging.getLogger("retaining_saver")

RESUME_UNRECORDED = "resume-unrecorded"


class WritesMixin(DelegatingSaver):
    """`put`, `put_writes`, `delete_thread` and their async twins, for `RetainingSaver`."""

    _backend: Backend | None
    retention: RetentionPolicy | None
    _accounts: Accounts
    _locks: ThreadLocks
    _performer: Performer
    _stamps: OwnStamps | None
    _reclaimed: ReclaimedIds
    _rooms: Rooms
    # Leaf-shaped checkpoints reads returned, which a write on them would keep.
    _stamps_read: BoundedLru[Key, bool]
    # What writes on stamps reclaimed, to be accounted once their lock is released.
    _taken: list[tuple[RunnableConfig, Admitted]]
    # Which run made each checkpoint a read returned; the resumes recorded (`_resumes`).
    _resumes: ResumeNotes
    # Cleanup as `admit` runs it, and its accounting (see `RetainingSaver`).
    _explicit: Callable[..., Flow[Admitted]]
    _thread_config: Callable[[str, str], RunnableConfig]
    _remember_reclaimed: Callable[[RunnableConfig, Admitted], Admitted]
    _account: Callable[[RunnableConfig, Admitted], Admitted]

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return drive(self._put(config, checkpoint, metadata, new_versions), self._performer)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await adrive(self._put(config, checkpoint, metadata, new_versions), self._performer)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        drive(self._put_writes(config, writes, task_id, task_path), self._performer)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await adrive(self._put_writes(config, writes, task_id, task_path), self._performer)

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Flow[RunnableConfig]:
        """`put` and `aput`: under the thread's lock, the checkpoint stored where it lands,
        then what its landing reclaimed accounted for (a write with no thread to lock is
        the saver's own)."""
        if (thread_id := self._lockable(config)) is None:
            put = (config, checkpoint, metadata, new_versions)
            return cast(RunnableConfig, (yield Call(super().put, super().aput, put)))
        landed = self._put_landed(thread_id, config, checkpoint, metadata, new_versions)
        as_is = partial(self._put_lands_as_is, thread_id, config, metadata)
        stored = yield Locked(thread_id, landed, as_is)
        self._account_taken()
        return cast(RunnableConfig, stored)

    def _put_landed(
        self,
        thread_id: str,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Flow[RunnableConfig]:
        config = yield from self._landing(thread_id, config, checkpoint=True, metadata=metadata)
        put = (config, checkpoint, metadata, new_versions)
        stored = yield Call(super().put, super().aput, put)
        self._remember_stamp(config, checkpoint, metadata)
        if self.retention is not None and self._backend is not None:
            self._backend.stored(config, checkpoint, metadata)  # the passes will read it
            if metadata.get("source") == "input" and not namespace(config):
                self._rooms.grew(thread_id)  # a run began: counted against the slack
        return cast(RunnableConfig, stored)

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Flow[None]:
        """`put_writes` and `aput_writes`: under the thread's lock, the writes stored where
        they land, then what their landing reclaimed accounted for (writes with no thread
        to lock are the saver's own)."""
        if (thread_id := self._lockable(config)) is None:
            put = (config, writes, task_id, task_path)
            yield Call(super().put_writes, super().aput_writes, put)
            return
        landed = self._writes_landed(thread_id, config, writes, task_id, task_path)
        yield Locked(thread_id, landed, partial(self._writes_land_as_is, thread_id, config))
        self._account_taken()

    def _writes_landed(
        self,
        thread_id: str,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Flow[None]:
        config = yield from self._writes_landing(thread_id, config)
        yield Call(super().put_writes, super().aput_writes, (config, writes, task_id, task_path))

    def _put_lands_as_is(
        self, thread_id: str, config: RunnableConfig, metadata: CheckpointMetadata
    ) -> bool:
        """Whether a put at `config` keeps no stamp (every put of a run but the first after
        a stamp): it deletes nothing, so it runs sharing the thread's lock (`Locked`)."""
        survivor = self._onto_survivor(config)
        return not self._keeps_stamp(thread_id, survivor, checkpoint=True, metadata=metadata)

    def _writes_land_as_is(self, thread_id: str, config: RunnableConfig) -> bool:
        """Whether writes at `config` keep no stamp and start no resume (a run's writes on
        the checkpoints it makes): they delete and record nothing first, so they run
        sharing the thread's lock (`Locked`)."""
        survivor = self._onto_survivor(config)
        return not self._keeps_stamp(thread_id, survivor, checkpoint=False) and (
            self._resumes.first_write(survivor) is None
        )

    def _remember_stamp(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> None:
        """Once stored: the root put this process wrote, which may be a stamp."""
        if self._stamps is not None:
            self._stamps.remember(config, checkpoint, metadata)

    def delete_thread(self, thread_id: str) -> None:
        super().delete_thread(thread_id)
        drive(self._forgetting(thread_id), self._performer)

    async def adelete_thread(self, thread_id: str) -> None:
        await super().adelete_thread(thread_id)
        await adrive(self._forgetting(thread_id), self._performer)

    def _forgetting(self, thread_id: str) -> Flow[None]:
        """The thread is gone: so are the records of what was reclaimed in it."""
        if self._backend is None or not isinstance(thread_id, str):
            return
        self._reclaimed.forget_thread(thread_id)
        try:
            yield Run(self._backend.forget_reclaimed(thread_id), Mode.WRITE)
        except Exception as error:
            logger.warning("could not forget the reclaims of thread %s: %r", thread_id, error)

    def _landing(
        self,
        thread_id: str,
        config: RunnableConfig,
        *,
        checkpoint: bool,
        metadata: Mapping[str, Any] | None = None,
    ) -> Flow[RunnableConfig]:
        """Where a write under the thread's lock lands: `config`, moved off a reclaimed id,
        and off the stamp the write would keep (`_keeps_stamp`), which is reclaimed first."""
        config = self._onto_survivor(config)
        if SHARING.get():
            # Shared, the write found no stamp a moment ago (`Locked`'s check); one a read
            # taught since is kept (the write makes it live), never deleted beside other
            # writes: so it is not looked for again.
            return config
        if self._keeps_stamp(thread_id, config, checkpoint=checkpoint, metadata=metadata):
            return (yield from self._reclaim_then_land(thread_id, config))
        return config  # writes elsewhere leave the stamp the head

    def _keeps_stamp(
        self,
        thread_id: str,
        config: RunnableConfig,
        *,
        checkpoint: bool,
        metadata: Mapping[str, Any] | None = None,
    ) -> bool:
        """Whether a write at `config` (moved off any reclaimed id) would keep the stamp.

        A new root checkpoint (`checkpoint`: an `update_state`, a second stamp) would
        bury the stamp at the head, on it or beside it; writes on the stamp would make
        it live. Either way the stamp is reclaimed first, as an admission would, and
        the write lands on its clone: as on the thread where it was never written.
        A stamp is known here when this process wrote or read it; an `update` put (an
        `update_state`, rare next to a run's puts) looks the head up whatever it knows,
        so a stamp another process wrote goes too.
        """
        configurable = config["configurable"]
        if self._stamps is None or configurable.get("checkpoint_ns", ""):
            return False
        target = configurable.get("checkpoint_id")
        stamp = self._stamps.peek(thread_id)
        on_stamp = stamp is not None and stamp.checkpoint_id == target
        read_as_stamp = self._stamps_read.get((thread_id, "", str(target))) is not None
        update = metadata is not None and metadata.get("source") == "update"
        return on_stamp or read_as_stamp or (checkpoint and (stamp is not None or update))

    def _writes_landing(self, thread_id: str, config: RunnableConfig) -> Flow[RunnableConfig]:
        """Where writes land (`_landing`), and, at a run's first write on a checkpoint it
        did not make, its entry in the resume ledger: the checkpoint's writes rows as
        they are before it (see `_resumes`)."""
        config = yield from self._landing(thread_id, config, checkpoint=False)
        if (resume := self._resumes.first_write(config)) is None or self._backend is None:
            return config
        if SHARING.get():  # a read taught it since: another write may be landing there
            self._resumes.noted(thread_id, resume)  # unrecorded, as one the ledger never saw
            return config
        try:
            # One statement that re-checks what it records on: no transaction around it.
            yield Run(self._backend.note_resume(thread_id, *resume), Mode.GUARDED)
        except Exception as error:  # the write goes on; its rollback falls back to the store
            # Once: a ledger that cannot be written (a role without INSERT on it) fails
            # every resume alike, and each would say the same.
            self._accounts.once(
                RESUME_UNRECORDED,
                "could not record the resume of thread %s; rolling its run back restores "
                "what the store alone can tell (logged once): %r",
                thread_id,
                error,
            )
        # Recorded or not, never again for this run: an entry taken after its first write
        # here would hold that write, which rolling the run back would then restore.
        self._resumes.noted(thread_id, resume)
        return config

    def _reclaim_then_land(self, thread_id: str, config: RunnableConfig) -> Flow[RunnableConfig]:
        admitted = yield from self._explicit(thread_id, self._thread_config(thread_id, ""))
        self._remember_reclaimed(config, admitted)
        self._taken.append((config, admitted))
        return self._onto_survivor(config)

    def _account_taken(self) -> None:
        """Account, outside the lock, for what writes on stamps reclaimed."""
        while self._taken:
            config, admitted = self._taken.pop()
            # A write that found no stamp to take was no admission: nothing to count.
            if admitted[0].reclaimed or admitted[0].skipped is Skip.FAILED:
                self._account(config, admitted)

    def _lockable(self, config: RunnableConfig) -> str | None:
        """The thread a write must lock, or None where nothing of ours can race it
        (cleanup disabled, or an id the bare saver will judge for itself)."""
        if self._backend is None or not well_formed(config):
            return None
        thread_id = config["configurable"].get("thread_id")
        return thread_id if isinstance(thread_id, str) else None

    def _onto_survivor(self, config: RunnableConfig) -> RunnableConfig:
        """`config`, moved from an id this process reclaimed to the clone that survives it."""
        configurable = config.get("configurable", {})
        checkpoint_id = configurable.get("checkpoint_id")
        if not checkpoint_id:
            return config
        key = (configurable["thread_id"], configurable.get("checkpoint_ns", ""), checkpoint_id)
        survivor = self._reclaimed.survivor(key)
        return config if survivor is None else pinned_to(config, survivor)


def well_formed(config: Any) -> bool:
    """Whether `config` is a mapping whose `configurable` is one: anything else goes to
    the saver untouched, which fails on it exactly as bare."""
    if type(config) is dict and type(config.get("configurable")) is dict:
        return True  # what LangGraph passes: no ABC check on every read
    return isinstance(config, Mapping) and isinstance(config.get("configurable"), Mapping)


def pinned_to(config: RunnableConfig, checkpoint_id: str) -> RunnableConfig:
    """`config`, pinned to `checkpoint_id` instead."""
    configurable = {**config.get("configurable", {}), "checkpoint_id": checkpoint_id}
    return cast(RunnableConfig, {**config, "configurable": configurable})
