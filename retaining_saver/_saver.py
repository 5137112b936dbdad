"""`RetainingSaver`: a drop-in checkpointer that reclaims provably redundant checkpoints.

This module owns what happens *around* the wrapped saver's calls, and nothing
of what may be deleted (that is `_rules`) or how a store deletes it (that is
`backends`):

- reads: which read is a run's admission (`_admission`), the failsafe around
  cleanup, the re-read of an unpinned head that vanished while it hydrated,
  and the resolution of a reclaimed duplicate's id to its clone (`_reclaimed`);
- writes: each `put`/`put_writes` takes the thread's lock, which every
  deletion holds, and lands on the clone of an id this process reclaimed;
- accounting: counters, the log and `on_reclaim`, always after the lock.

Everything else a `BaseCheckpointSaver` does is forwarded (`_delegate`), and
the engine and statistics come from `MaintenanceMixin`.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, Self, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from retaining_saver import _admission
from retaining_saver import _validate as validate
from retaining_saver._admission import AdmissionResult, Admitted
from retaining_saver._caches import HistoryCache, cached_history
from retaining_saver._delegate import DelegatingSaver
from retaining_saver._effects import Flow, Lookup, Mode, Performer, Run, adrive, drive
from retaining_saver._errors import CheckpointNotFoundError, UnsupportedSaverError
from retaining_saver._hints import LeafHints
from retaining_saver._locks import ThreadLocks
from retaining_saver._maintenance import MaintenanceMixin
from retaining_saver._purge import CachePurgeMixin
from retaining_saver._reclaimed import MAX_HOPS, RECLAIMED_ID_TTL, ReclaimedIds
from retaining_saver._rules import (
    LeafPredicate,
    MarkerShape,
    RetentionPolicy,
    Skip,
    marker_shape,
)
from retaining_saver.backends import backend_for
from retaining_saver.backends._base import HeadReader, OneRoundBackend

logger = logging.getLogger("retaining_saver")

Admission = Literal["auto", "explicit", "off"]

_DENIAL_BACKOFF = 60.0
"""Seconds cleanup waits after a refused privilege, doubling up to `_DENIAL_BACKOFF_MAX`."""
_DENIAL_BACKOFF_MAX = 3600.0
_ADMISSIONS = ("auto", "explicit", "off")


@dataclass(frozen=True)
class ReclaimEvent:
    """One reclaimed checkpoint, as passed to `on_reclaim`."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    successor_id: str | None


@dataclass(frozen=True)
class AdmissionCounters:
    """Totals since the saver was made: admissions attempted, checkpoints reclaimed,
    admissions skipped by reason, admissions whose cleanup failed, and reads whose
    fast path or probe failed and were answered by the saver's own read instead."""

    attempted: int
    reclaimed: int
    skipped: dict[str, int]
    failed: int
    fallbacks: dict[str, int] = field(default_factory=dict)


class RetainingSaver(CachePurgeMixin, MaintenanceMixin, DelegatingSaver):
    """Wrap a LangGraph checkpoint saver and reclaim its redundant checkpoints.

    It behaves exactly like `inner`, except that when a run is admitted on a
    thread it first reclaims the trailing duration-only leaf (a clone of its
    parent that an app stamped after the last run), under a per-thread lock,
    after invalidating history caches. Cleanup failures are logged, never
    raised into the run.

    Args:
        inner: The saver that stores the checkpoints.
        strict: Raise `UnsupportedSaverError` for an `inner` whose storage is not
            supported, instead of wrapping it with cleanup disabled and a warning.
        admission: `"auto"` cleans up on the first, unpinned, root-namespace read
            of each LangGraph run; `"explicit"` only in `admit`/`aadmit`;
            `"off"` never.
        history_caches: Caches to invalidate before any deletion. A
            `DeltaHistoryCache` here also answers pinned delta-history reads.
        protect_checkpoint_ids: Ids never reclaimed, by admission or the engine.
        retry_unpinned_reads: Re-read "latest" once if the checkpoint an
            unpinned read resolved was reclaimed while it was hydrated.
        strict_pinned_reads: A read pinned to a missing `checkpoint_id` raises
            `CheckpointNotFoundError` instead of returning None.
        is_reclaimable_leaf: Replaces the default duration-marker rule. A leaf
            must still clone its parent and own no writes.
        on_reclaim: Called with a `ReclaimEvent` per reclaimed checkpoint.
        reclaimed_id_ttl: How long the id of a reclaimed duplicate keeps naming
            the clone that survives it (a pinned read or run on it answers the
            clone; see `_reclaimed`).

    Raises:
        TypeError: If `inner` is not a `BaseCheckpointSaver`, or a flag has the
            wrong type.
        ValueError: If a flag has a wrong value.
        UnsupportedSaverError: If `strict` and `inner` is not supported.
    """

    def __init__(
        self,
        inner: BaseCheckpointSaver[Any],
        /,
        *,
        strict: bool = False,
        admission: Admission = "auto",
        history_caches: Sequence[HistoryCache] = (),
        protect_checkpoint_ids: Collection[str] = (),
        retry_unpinned_reads: bool = True,
        strict_pinned_reads: bool = False,
        is_reclaimable_leaf: LeafPredicate | None = None,
        on_reclaim: Callable[[ReclaimEvent], None] | None = None,
        reclaimed_id_ttl: timedelta = RECLAIMED_ID_TTL,
    ) -> None:
        super().__init__(inner)
        for name, value in (
            ("strict", strict),
            ("retry_unpinned_reads", retry_unpinned_reads),
            ("strict_pinned_reads", strict_pinned_reads),
        ):
            validate.flag(name, value)
        validate.require(
            admission in _ADMISSIONS, ValueError, f"admission must be one of {_ADMISSIONS}"
        )
        caches = list(
            validate.items_of(
                "history_caches",
                history_caches,
                HistoryCache,
                "HistoryCache objects (invalidate/purge and async twins)",
            )
        )
        validate.require(
            on_reclaim is None or callable(on_reclaim), TypeError, "on_reclaim must be callable"
        )
        validate.duration("reclaimed_id_ttl", reclaimed_id_ttl, positive=True)
        self.policy = RetentionPolicy(
            protect_checkpoint_ids=validate.ids("protect_checkpoint_ids", protect_checkpoint_ids),
            is_reclaimable_leaf=validate.optional_callable(
                "is_reclaimable_leaf", is_reclaimable_leaf
            ),
        )
        if isinstance(inner, HistoryCache):
            caches.append(inner)
        self.strict = strict
        self.admission: Admission = admission
        self.history_caches: tuple[HistoryCache, ...] = tuple(caches)
        self.retry_unpinned_reads = retry_unpinned_reads
        self.strict_pinned_reads = strict_pinned_reads
        self.on_reclaim = on_reclaim
        # How this store loads lineage and deletes; None: an unsupported saver, never touched.
        self.backend = backend_for(inner)
        if self.backend is None:
            if strict:
                raise UnsupportedSaverError(type(inner))
            warnings.warn(
                f"RetainingSaver: {type(inner).__qualname__} is not a supported saver; "
                "it is passed through with cleanup disabled",
                stacklevel=2,
            )
        # What the cleanup flows' effects act on: the saver, its backend, the caches.
        self.performer = Performer(inner, self.backend, self.history_caches, self._fell_back)
        # Stamps this process wrote, per thread (the last one, until another root put).
        auto = self.backend is not None and admission == "auto"
        self.stamps = LeafHints(self.policy) if auto else None
        # The marker the store judges a leaf by when the admission read takes it in the
        # same round (see `_one_round_marker`); None: read first, take second.
        self.one_round = self._one_round_marker()
        # Per thread: held by every deletion and every write, never across user code.
        self.locks = ThreadLocks()
        # Tells a run's first read (its admission) from its later ones.
        self._runs = _admission.RunTracker()
        # `counters`' totals, by key ("attempted", "skip:<reason>", "fallback:<what>", ...).
        self._counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        # A refused privilege: how many times, and until when cleanup waits (monotonic).
        self._denials = 0
        self._denied_until = 0.0
        # Heads an unpinned read returned that could vanish: for their delta-history reads.
        self._resolved: OrderedDict[tuple[str, str, str], _admission.ReadTarget] = OrderedDict()
        # Leaf-shaped checkpoints reads returned, which a write on them would keep.
        self._stamps_read = ReclaimedIds(size=4096)
        # What writes on stamps reclaimed, to be accounted once their lock is released.
        self._taken: list[tuple[RunnableConfig, Admitted]] = []
        # Ids this process reclaimed -> the clone each resolves to (see `_reclaimed`).
        self.reclaimed = ReclaimedIds(reclaimed_id_ttl)
        if self.backend is not None:
            self.backend.reclaimed_ttl = reclaimed_id_ttl

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> Self:
        """The inner saver's allowlist clone, wrapped; locks and counters are shared."""
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:
            clone.backend = backend_for(clone.inner)
            clone.performer = Performer(
                clone.inner, clone.backend, self.history_caches, clone._fell_back
            )
            clone.one_round = clone._one_round_marker()
        return clone

    def _one_round_marker(self) -> MarkerShape | None:
        """The marker an admission read binds to take a leaf as it reads, where it may.

        Only a `OneRoundBackend` whose internals match the audit can, under the
        default marker (an app's own predicate is Python the store cannot run),
        and with no history cache: a cache forgets a leaf before it goes, and
        the leaf is known only once read.
        """
        backend = self.backend
        if not isinstance(backend, OneRoundBackend) or not backend.fast:
            return None
        if self.admission != "auto" or self.history_caches:
            return None
        return marker_shape(self.policy)

    @property
    def cleanup_enabled(self) -> bool:
        """Whether this wrapper may ever delete anything from `inner`."""
        return self.backend is not None and self.admission != "off"

    @property
    def counters(self) -> AdmissionCounters:
        """Admission totals so far."""
        with self._counts_lock:
            counts = dict(self._counts)

        def prefixed(prefix: str) -> dict[str, int]:
            return {k[len(prefix) :]: v for k, v in counts.items() if k.startswith(prefix)}

        return AdmissionCounters(
            counts.get("attempted", 0),
            counts.get("reclaimed", 0),
            prefixed("skip:"),
            counts.get("failed", 0),
            prefixed("fallback:"),
        )

    # Reads

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if not _well_formed(config):
            return self.inner.get_tuple(config)  # the saver judges it, as bare
        if not self._is_admission(config):
            return self._pinned_result(config, drive(self._read(config), self.performer))
        thread_id = str(config["configurable"]["thread_id"])
        if _admission.is_pinned(config):
            # A pinned run: clean up as an explicit admission would, then read its target.
            flow = self._explicit(thread_id, config, _admission.map_selectors(config))
            with self.locks.hold(thread_id):
                admitted = self._noted(config, drive(flow, self.performer))
            self._record(config, admitted)
            return self._pinned_result(config, drive(self._read(config), self.performer))
        # The admission read: unless it takes a leaf as it reads, only a head shaped like
        # one takes the lock.
        head = None
        if self.one_round is None:
            head = self.inner.get_tuple(config)
            if self._nothing_to_reclaim(head, config):
                return head
        with self.locks.hold(thread_id):
            flow = self._admission_read(thread_id, config, head)
            admitted = self._noted(config, drive(flow, self.performer))
        return self._record(config, admitted)[1]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if not _well_formed(config):
            return await self.inner.aget_tuple(config)
        if not self._is_admission(config):
            return self._pinned_result(config, await adrive(self._read(config), self.performer))
        thread_id = str(config["configurable"]["thread_id"])
        if _admission.is_pinned(config):
            flow = self._explicit(thread_id, config, _admission.map_selectors(config))
            async with self.locks.ahold(thread_id):
                admitted = self._noted(config, await adrive(flow, self.performer))
            self._record(config, admitted)
            found = await adrive(self._read(config), self.performer)
            return self._pinned_result(config, found)
        head = None
        if self.one_round is None:
            head = await self._aread_head(thread_id, config)
            if self._nothing_to_reclaim(head, config):
                return head
        async with self.locks.ahold(thread_id):
            flow = self._admission_read(thread_id, config, head)
            admitted = self._noted(config, await adrive(flow, self.performer))
        return self._record(config, admitted)[1]

    async def _aread_head(self, thread_id: str, config: RunnableConfig) -> CheckpointTuple | None:
        backend = self.backend
        if isinstance(backend, HeadReader) and backend.reads_head_for_less:
            try:
                flow = _admission.read_head(thread_id, config, backend)
                return await adrive(flow, self.performer)
            except Exception as error:
                # The fast path runs on upstream internals; the saver's own read is the truth
                # (a real database error raises there too).
                self._fell_back(_admission.FAST_READ, error)
        return await self.inner.aget_tuple(config)

    def _stored(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> None:
        if self.stamps is not None:
            self.stamps.note(config, checkpoint, metadata)

    def _nothing_to_reclaim(self, head: CheckpointTuple | None, config: RunnableConfig) -> bool:
        skip = _admission.head_skip(head, self.policy, config)
        if skip is None:
            return False
        self._count("attempted", f"skip:{skip.value}")
        if skip is Skip.PROTECTED:
            # Another worker, without this run's selectors, may still reclaim it.
            self._resolve(head)
        return True

    def admit(self, thread_id: str, *, checkpoint_ns: str = "") -> AdmissionResult:
        """Run bounded cleanup for `thread_id` now, as a run about to start would.

        For gateways with `admission="explicit"`, after winning the thread.
        Never raises for a cleanup failure; the result says what happened.
        """
        config = self._thread_config(thread_id, checkpoint_ns)
        with self.locks.hold(thread_id):
            admitted = self._noted(config, drive(self._explicit(thread_id, config), self.performer))
        return self._record(config, admitted)[0]

    async def aadmit(self, thread_id: str, *, checkpoint_ns: str = "") -> AdmissionResult:
        """Async `admit`."""
        config = self._thread_config(thread_id, checkpoint_ns)
        async with self.locks.ahold(thread_id):
            flow = self._explicit(thread_id, config)
            admitted = self._noted(config, await adrive(flow, self.performer))
        return self._record(config, admitted)[0]

    def _thread_config(self, thread_id: str, checkpoint_ns: str) -> RunnableConfig:
        validate.thread_id("thread_id", thread_id, nul_ok=self._nul_ok())
        validate.require(
            isinstance(checkpoint_ns, str),
            TypeError,
            f"checkpoint_ns must be a str, got {checkpoint_ns!r}",
        )
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}}

    def _is_admission(self, config: RunnableConfig) -> bool:
        if self.admission != "auto" or self.backend is None:
            return False
        if not isinstance(config.get("configurable", {}).get("thread_id"), str):
            return False  # the bare saver judges such a read for itself
        if not _admission.is_admission_read(config, self._runs):
            return False
        return not (self._denied_until and self._backing_off())

    def _read(self, config: RunnableConfig) -> Flow[CheckpointTuple | None]:
        found: CheckpointTuple | None = yield Lookup(config)
        if not config.get("configurable", {}).get("checkpoint_id"):
            found = yield from self._settle(found, config)
        elif found is None:
            found = yield from self._reclaimed_read(config)
        if found is not None and self._may_be_stamp(found):
            # A write on it (an update_state) would keep it: see `_write_on_stamp`.
            self._stamps_read.note(_checkpoint_key(found.config), "")
        return found

    def _may_be_stamp(self, found: CheckpointTuple) -> bool:
        return self.stamps is not None and _admission.could_vanish(found, self.policy)

    def _reclaimed_read(self, config: RunnableConfig) -> Flow[CheckpointTuple | None]:
        """A read pinned to a missing id: the clone it was reclaimed as a duplicate of, if
        it was (through stacked clones), read as the saver reads it; else None."""
        configurable = config["configurable"]
        thread_id, ns = configurable.get("thread_id"), configurable.get("checkpoint_ns", "")
        if self.backend is None or not isinstance(thread_id, str) or not isinstance(ns, str):
            return None
        current = str(configurable["checkpoint_id"])
        for _ in range(MAX_HOPS):
            clone = self.reclaimed.clone_of((thread_id, ns, current))
            if clone is None:
                try:
                    clone = yield Run(
                        self.backend.reclaimed_clone(thread_id, ns, current), Mode.READ
                    )
                except Exception as error:
                    self._fell_back("the reclaimed-id lookup", error)
                    return None
            if clone is None:
                return None
            found: CheckpointTuple | None = yield Lookup(_pinned_to(config, clone))
            if found is not None:
                return found
            current = clone
        return None

    # Writes: under the thread's lock, so that none lands on an id being reclaimed

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = self._lockable(config)
        if thread_id is None:
            return super().put(config, checkpoint, metadata, new_versions)
        with self.locks.hold(thread_id):
            flow = self._landing(thread_id, config, checkpoint=True, metadata=metadata)
            config = drive(flow, self.performer)
            stored = super().put(config, checkpoint, metadata, new_versions)
        self._record_taken()
        return stored

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = self._lockable(config)
        if thread_id is None:
            return await super().aput(config, checkpoint, metadata, new_versions)
        async with self.locks.ahold(thread_id):
            flow = self._landing(thread_id, config, checkpoint=True, metadata=metadata)
            config = await adrive(flow, self.performer)
            stored = await super().aput(config, checkpoint, metadata, new_versions)
        self._record_taken()
        return stored

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id = self._lockable(config)
        if thread_id is None:
            return super().put_writes(config, writes, task_id, task_path)
        with self.locks.hold(thread_id):
            config = drive(self._landing(thread_id, config, checkpoint=False), self.performer)
            super().put_writes(config, writes, task_id, task_path)
        self._record_taken()

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id = self._lockable(config)
        if thread_id is None:
            return await super().aput_writes(config, writes, task_id, task_path)
        async with self.locks.ahold(thread_id):
            flow = self._landing(thread_id, config, checkpoint=False)
            config = await adrive(flow, self.performer)
            await super().aput_writes(config, writes, task_id, task_path)
        self._record_taken()

    def _landing(
        self,
        thread_id: str,
        config: RunnableConfig,
        *,
        checkpoint: bool,
        metadata: Mapping[str, Any] | None = None,
    ) -> Flow[RunnableConfig]:
        """Where a write under the thread's lock lands: `config`, moved off a reclaimed id,
        and off the stamp the write would keep, which is reclaimed first.

        A new root checkpoint (`checkpoint`: an `update_state`, a second stamp) would
        bury the stamp at the head, on it or beside it; writes on the stamp would make
        it live. Either way the stamp is reclaimed first, as an admission would, and
        the write lands on its clone: as on the thread where it was never written.
        A stamp is known here when this process wrote or read it; an `update` put (an
        `update_state`, rare next to a run's puts) looks the head up whatever it knows,
        so a stamp another process wrote goes too.
        """
        config = self._onto_survivor(config)
        configurable = config["configurable"]
        if self.stamps is None or configurable.get("checkpoint_ns", ""):
            return config
        target = configurable.get("checkpoint_id")
        stamp = self.stamps.peek(thread_id)
        on_stamp = stamp is not None and stamp.checkpoint_id == target
        read_as_stamp = self._stamps_read.clone_of((thread_id, "", str(target))) is not None
        update = metadata is not None and metadata.get("source") == "update"
        if on_stamp or read_as_stamp or (checkpoint and (stamp is not None or update)):
            return (yield from self._reclaim_then_land(thread_id, config))
        return config  # writes elsewhere leave the stamp the head

    def _reclaim_then_land(self, thread_id: str, config: RunnableConfig) -> Flow[RunnableConfig]:
        admitted = yield from self._explicit(thread_id, self._thread_config(thread_id, ""))
        self._noted(config, admitted)
        self._taken.append((config, admitted))
        return self._onto_survivor(config)

    def _record_taken(self) -> None:
        """Account, outside the lock, for what writes on stamps reclaimed."""
        while self._taken:
            config, admitted = self._taken.pop()
            # A write that found no stamp to take was no admission: nothing to count.
            if admitted[0].reclaimed or admitted[0].skipped is Skip.FAILED:
                self._record(config, admitted)

    def _lockable(self, config: RunnableConfig) -> str | None:
        """The thread a write must lock, or None where nothing of ours can race it
        (cleanup disabled, or an id the bare saver will judge for itself)."""
        if self.backend is None or not _well_formed(config):
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
        survivor = self.reclaimed.survivor(key)
        return config if survivor is None else _pinned_to(config, survivor)

    def delete_thread(self, thread_id: str) -> None:
        super().delete_thread(thread_id)
        self._forget_reclaims(thread_id, lambda op: self._require_backend().run(op))

    async def adelete_thread(self, thread_id: str) -> None:
        await super().adelete_thread(thread_id)
        if self.backend is not None and isinstance(thread_id, str):
            self.reclaimed.forget_thread(thread_id)
            try:
                await self.backend.arun(self.backend.forget_reclaimed(thread_id))
            except Exception as error:
                logger.warning("could not forget the reclaims of thread %s: %r", thread_id, error)

    def _forget_reclaims(self, thread_id: str, run: Callable[[Any], Any]) -> None:
        """The thread is gone: so are the records of what was reclaimed in it."""
        if self.backend is None or not isinstance(thread_id, str):
            return
        self.reclaimed.forget_thread(thread_id)
        try:
            run(self.backend.forget_reclaimed(thread_id))
        except Exception as error:
            logger.warning("could not forget the reclaims of thread %s: %r", thread_id, error)

    def _settle(
        self, found: CheckpointTuple | None, config: RunnableConfig
    ) -> Flow[CheckpointTuple | None]:
        """An unpinned result, re-read once if it vanished while it hydrated.

        Only a duration-leaf-shaped head can be reclaimed under its reader, so
        only such a head is checked again, and remembered for the delta-history
        reads that follow; any other read costs nothing extra.
        """
        if not self.retry_unpinned_reads or self.backend is None or found is None:
            return found
        if not _admission.could_vanish(found, self.policy):
            return found
        try:
            still = yield from _admission.still_there(found.config, self.backend)
        except Exception as error:
            # The probe is cleanup's, not the read's: the read stands as the saver answered it.
            self._fell_back("the still-there probe", error)
            return found
        if not still:
            found = yield Lookup(config)
        if found is not None and _admission.could_vanish(found, self.policy):
            self._resolve(found)
        return found

    def _pinned_result(
        self, config: RunnableConfig, found: CheckpointTuple | None
    ) -> CheckpointTuple | None:
        configurable = config.get("configurable", {})
        checkpoint_id = configurable.get("checkpoint_id")
        if checkpoint_id and found is None and self.strict_pinned_reads:
            thread_id = str(configurable.get("thread_id"))
            ns = configurable.get("checkpoint_ns", "")
            survivor = self.reclaimed.survivor((thread_id, ns, str(checkpoint_id)))
            raise CheckpointNotFoundError(thread_id, ns, checkpoint_id, survivor)
        return found

    # Admission

    def _admission_read(
        self, thread_id: str, config: RunnableConfig, head: CheckpointTuple | None
    ) -> Flow[Admitted]:
        assert self.backend is not None  # _is_admission said so
        protected = _admission.run_selectors(config)
        flow = _admission.admit_read(
            thread_id, config, self.backend, self.policy, protected, head, self.one_round
        )
        result, found = yield from self._failsafe(thread_id, flow, config)
        return result, (yield from self._settle(found, config))

    def _explicit(
        self, thread_id: str, config: RunnableConfig, protected: frozenset[str] = frozenset()
    ) -> Flow[Admitted]:
        """Cleanup that looks the head up itself, without its values; `protected`: ids the
        run addresses, never reclaimed."""
        if self.backend is None or self.admission == "off":
            return AdmissionResult(thread_id, (), Skip.DISABLED), None
        if self._denied_until and time.monotonic() < self._denied_until:
            return AdmissionResult(thread_id, (), Skip.PERMISSION_DENIED), None
        flow = _admission.admit_explicit(thread_id, config, self.backend, self.policy, protected)
        return (yield from self._failsafe(thread_id, flow, config, read=False))

    def _failsafe(
        self, thread_id: str, flow: Flow[Admitted], config: RunnableConfig, *, read: bool = True
    ) -> Flow[Admitted]:
        """`flow`; if it fails, a logged `FAILED` result and the head as it is now.

        With `read`, the head is read through the saver for the run (a failure
        there is the bare read's own, and surfaces); else only its id is looked
        up, and a failure there leaves it None.
        """
        try:
            return (yield from flow)
        except Exception as error:
            skip = self._failure(thread_id, error)
        if read:
            head = yield Lookup(config)
            head_id = head.checkpoint["id"] if head is not None else None
            return AdmissionResult(thread_id, (), skip, head_id), head
        assert self.backend is not None  # only an enabled backend admits
        try:
            node = yield from _admission.head_node(thread_id, config, self.backend)
        except Exception:
            node = None
        head_id = node.checkpoint_id if node is not None else None
        return AdmissionResult(thread_id, (), skip, head_id), None

    def _failure(self, thread_id: str, error: Exception) -> Skip:
        """Log a cleanup failure; a refused privilege disables cleanup for a while."""
        assert self.backend is not None
        problem = self.backend.permission_problem(error)
        if problem is None:
            logger.warning(
                "retention cleanup failed for thread %s; the run proceeds: %r", thread_id, error
            )
            return Skip.FAILED
        with self._counts_lock:
            first, self._denials = not self._denials, self._denials + 1
            backoff = min(_DENIAL_BACKOFF * 2 ** (self._denials - 1), _DENIAL_BACKOFF_MAX)
            self._denied_until = time.monotonic() + backoff
        log = logger.error if first else logger.debug
        log(
            "retention cleanup is disabled for lack of permission (%s); runs proceed "
            "untouched, and cleanup is tried again in %d s",
            problem,
            backoff,
        )
        return Skip.PERMISSION_DENIED

    def _backing_off(self) -> bool:
        """Whether cleanup waits out a refused privilege; such admissions count as skips."""
        if time.monotonic() >= self._denied_until:
            return False
        self._count("attempted", f"skip:{Skip.PERMISSION_DENIED.value}")
        return True

    def _fell_back(self, what: str, error: Exception) -> None:
        """Count a failure of `what`, answered by the saver's own call; log the first."""
        key = f"fallback:{what}"
        with self._counts_lock:
            first = not self._counts[key]
            self._counts[key] += 1
        log = logger.warning if first else logger.debug
        log("%s failed and fell back to the saver's own read (logged once): %r", what, error)

    def _count(self, *keys: str, by: int = 1) -> None:
        with self._counts_lock:
            for key in keys:
                self._counts[key] += by

    def _record(self, config: RunnableConfig, admitted: Admitted) -> Admitted:
        result = admitted[0]
        if result.skipped is Skip.FAILED:
            self._count("attempted", "failed")
        elif result.skipped is not None:
            self._count("attempted", f"skip:{result.skipped.value}")
        else:
            self._count("attempted")
        if not result.reclaimed:
            return admitted
        self._count("reclaimed", by=len(result.reclaimed))
        ns = config.get("configurable", {}).get("checkpoint_ns", "")
        for checkpoint_id in result.reclaimed:
            logger.info(
                "reclaimed checkpoint %s of thread %s (successor %s)",
                checkpoint_id,
                result.thread_id,
                result.head_id,
            )
            if self.on_reclaim is not None:
                event = ReclaimEvent(result.thread_id, ns, checkpoint_id, result.head_id)
                try:
                    self.on_reclaim(event)
                except Exception:
                    logger.exception("on_reclaim callback failed for %s", checkpoint_id)
        return admitted

    def _noted(self, config: RunnableConfig, admitted: Admitted) -> Admitted:
        """Remember, still under the thread's lock, that each reclaimed id now names the head:
        a write this process puts on one of them lands on its clone instead."""
        result = admitted[0]
        if result.head_id is not None:
            ns = config.get("configurable", {}).get("checkpoint_ns", "")
            for checkpoint_id in result.reclaimed:
                self.reclaimed.note((result.thread_id, ns, checkpoint_id), result.head_id)
        return admitted

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return drive(self._history(config, channels), self.performer)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await adrive(self._history(config, channels), self.performer)

    def _history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Flow[Mapping[str, DeltaChannelHistory]]:
        answer = yield from cached_history(config, channels, self.history_caches)
        target = self._resolved.get(_checkpoint_key(config))
        if target is None or self.backend is None or not self.retry_unpinned_reads:
            return answer
        flow = _admission.vanished_history(answer, target, channels, self.backend)
        return cast(Mapping[str, DeltaChannelHistory], (yield from flow))

    def _resolve(self, found: CheckpointTuple | None) -> None:
        """Remember what an unpinned read returned, for its delta hydration to follow."""
        if found is not None:
            key = _checkpoint_key(found.config)
            with self._counts_lock:
                self._resolved[key] = _admission.ReadTarget(found.config, found.parent_config)
                self._resolved.move_to_end(key)
                if len(self._resolved) > 1024:
                    self._resolved.popitem(last=False)


def _well_formed(config: Any) -> bool:
    """Whether `config` is a mapping whose `configurable` is one: anything else goes to
    the saver untouched, which fails on it exactly as bare."""
    if type(config) is dict and type(config.get("configurable")) is dict:
        return True  # what LangGraph passes: no ABC check on every read
    return isinstance(config, Mapping) and isinstance(config.get("configurable"), Mapping)


def _pinned_to(config: RunnableConfig, checkpoint_id: str) -> RunnableConfig:
    """`config`, pinned to `checkpoint_id` instead."""
    configurable = {**config.get("configurable", {}), "checkpoint_id": checkpoint_id}
    return cast(RunnableConfig, {**config, "configurable": configurable})


def _checkpoint_key(config: RunnableConfig) -> tuple[str, str, str]:
    """(thread_id, checkpoint_ns, checkpoint_id) of a pinned config."""
    configurable = config.get("configurable", {})
    return (
        str(configurable.get("thread_id")),
        configurable.get("checkpoint_ns", ""),
        str(configurable.get("checkpoint_id")),
    )
