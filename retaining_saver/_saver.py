"""`RetainingSaver`: a drop-in checkpointer that reclaims provably redundant checkpoints.

This module owns what happens *around* the wrapped saver's reads, and nothing
of what may be deleted (that is `_rules`) or how a store deletes it (that is
`backends`):

- which read is a run's admission, and the cleanup it runs (`_admission`),
  under the thread's lock, behind a failsafe that never fails the run;
- pinned reads of a reclaimed duplicate's id, resolved to its clone
  (`_reclaimed`); unpinned reads whose head vanished while it hydrated,
  read again (`_retry`).

Writes land under the same lock (`_writes`); counters, the log and
`on_reclaim` are `_accounting`'s, always after the lock. Everything else a
`BaseCheckpointSaver` does is forwarded (`_delegate`), and the engine and
statistics come from `MaintenanceMixin`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Collection, Sequence
from datetime import timedelta
from typing import Any, Literal, Self, cast, get_args

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from retaining_saver import _admission, _run_reads
from retaining_saver._accounting import Accounts, AdmissionCounters, ReclaimEvent
from retaining_saver._admission import AdmissionResult, Admitted
from retaining_saver._admitting import AdmittingMixin
from retaining_saver._bounding import BoundingMixin, admission_retention
from retaining_saver._delegate import DelegatingSaver
from retaining_saver._effects import Flow, Locked, Lookup, Performer, ReadHead, adrive, drive
from retaining_saver._errors import UnsupportedSaverError
from retaining_saver._history_cache import HistoryCache
from retaining_saver._locks import ThreadLocks
from retaining_saver._lru import BoundedLru
from retaining_saver._maintenance import MaintenanceMixin
from retaining_saver._purge import CachePurgeMixin
from retaining_saver._reads import ReadsMixin
from retaining_saver._reclaimed import RECLAIMED_ID_TTL, Key, ReclaimedIds
from retaining_saver._resumes import ResumeNotes
from retaining_saver._retry import ReadRetry
from retaining_saver._rooms import Rooms
from retaining_saver._rules import (
    LeafPredicate,
    MarkerShape,
    RetentionPolicy,
    Skip,
    marker_shape,
)
from retaining_saver._rules import _validate as validate
from retaining_saver._stamps import OwnStamps
from retaining_saver._thread_ops import ThreadOpsMixin
from retaining_saver._writes import WritesMixin, well_formed
from retaining_saver.backends import backend_for, backend_name, store_overrides, supported_base
from retaining_saver.backends._head_reader import HeadReader

logger = logging.getLogger("retaining_saver")

Admission = Literal["auto", "explicit", "off"]

# What the wrapper implements itself over a supported saver, which the Agent Server and
# the conformance suite detect on its class.
_PROVIDED = frozenset(
    {"prune", "aprune", "delete_for_runs", "adelete_for_runs", "copy_thread", "acopy_thread"}
)


class RetainingSaver(
    WritesMixin,
    ReadsMixin,
    AdmittingMixin,
    ThreadOpsMixin,
    CachePurgeMixin,
    BoundingMixin,
    MaintenanceMixin,
    DelegatingSaver,
):
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
        retention: History rules applied to each thread as its runs are
            admitted, after the stamps: a `RetentionPolicy` with
            `history_keep_runs` or `keep_latest`, either with `compact_steps`
            (alone it is refused: it bounds nothing), and the `history_min_age`
            they require. A thread at N runs may grow N // 2
            more before a pass deletes them, at most `max_delete_per_run` (None:
            64) an admission, after an async read answers (before it, under
            `delta_graph` or a policy that reshapes the head's row: `_bounding`).
            None: no rules.

    Attributes:
        inner, policy, retention, strict, admission, history_caches,
        retry_unpinned_reads, strict_pinned_reads: The configuration it was
            built with, as validated (`policy` holds the protected ids and the
            leaf rule; `history_caches` includes `inner` if it is a cache). Read,
            never assign them. All else is internal (leading underscore); a caller
            watches through `counters` and `on_reclaim`.

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
        retention: RetentionPolicy | None = None,
    ) -> None:
        super().__init__(inner)
        for name, value in (
            ("strict", strict),
            ("retry_unpinned_reads", retry_unpinned_reads),
            ("strict_pinned_reads", strict_pinned_reads),
        ):
            validate.flag(name, value)
        admissions = get_args(Admission)
        validate.require(
            admission in admissions, ValueError, f"admission must be one of {admissions}"
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
        self.retention = admission_retention(retention, self.policy)
        validate.require(
            retention is None or admission != "off",
            ValueError,
            "retention runs on admission: it needs admission='auto' or 'explicit', not 'off'",
        )
        # Per thread, how many more admissions may skip the history pass.
        self._rooms = Rooms()
        if isinstance(inner, HistoryCache):
            caches.append(inner)
        self.strict = strict
        self.admission: Admission = admission
        self.history_caches: tuple[HistoryCache, ...] = tuple(caches)
        self.retry_unpinned_reads = retry_unpinned_reads
        self.strict_pinned_reads = strict_pinned_reads
        # How this store loads lineage and deletes; None: an unsupported saver, never touched.
        self._backend = backend_for(inner)
        if self._backend is None:
            if strict:
                raise UnsupportedSaverError(type(inner))
            warnings.warn(_unsupported_warning(type(inner)), stacklevel=2)
        # Counters, the log, `on_reclaim`, and the back-off after a refused privilege.
        self._accounts = Accounts(on_reclaim)
        # Per thread: held by every deletion and every write, never across user code.
        self._locks = ThreadLocks()
        # What the cleanup flows' effects act on: the saver, its backend, the caches, the locks.
        self._performer = Performer(
            inner, self._backend, self.history_caches, self._accounts.fell_back, self._locks
        )
        # Stamps this process wrote, per thread (the last one, until another root put).
        auto = self._backend is not None and admission == "auto"
        self._stamps = OwnStamps(self.policy) if auto else None
        # The marker the store judges a leaf by when the admission read takes it in the
        # same round (see `_one_round_marker`); None: read first, take second.
        self._one_round = self._one_round_marker()
        # Tells a run's first read (its admission) from its later ones.
        self._runs = _run_reads.RunTracker()
        # Re-reads unpinned heads that vanished while they hydrated (None: not asked for).
        self._retry = self._read_retry()
        # Leaf-shaped checkpoints reads returned, which a write on them would keep.
        self._stamps_read: BoundedLru[Key, bool] = BoundedLru(4096)
        # Which run made each checkpoint a read returned; the resumes recorded (`_resumes`).
        self._resumes = ResumeNotes()
        # What writes on stamps reclaimed, to be accounted once their lock is released.
        self._taken: list[tuple[RunnableConfig, Admitted]] = []
        # Ids this process reclaimed -> the clone each resolves to (see `_reclaimed`).
        self._reclaimed = ReclaimedIds(reclaimed_id_ttl)
        if self._backend is not None:
            self._backend.reclaimed_ttl = reclaimed_id_ttl

    @classmethod
    def provided_for(cls, inner: BaseCheckpointSaver[Any]) -> frozenset[str]:
        """On every supported saver: `prune` and `aprune`, the engine's, which keeps
        DeltaChannel values and pending writes (see `MaintenanceMixin.prune`); and
        `delete_for_runs`, `copy_thread` and their async twins (`ThreadOpsMixin`)."""
        return _PROVIDED if backend_name(inner) is not None else frozenset()

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> Self:
        """The inner saver's allowlist clone, wrapped; locks and counters are shared."""
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:
            clone._backend = backend_for(clone.inner)
            clone._performer = Performer(
                clone.inner,
                clone._backend,
                self.history_caches,
                clone._accounts.fell_back,
                clone._locks,
            )
            clone._one_round = clone._one_round_marker()
            clone._retry = clone._read_retry()
        return clone

    def _read_retry(self) -> ReadRetry | None:
        if self._backend is None or not self.retry_unpinned_reads:
            return None
        return ReadRetry(self._backend, self.policy)

    def _one_round_marker(self) -> MarkerShape | None:
        """The marker an admission read binds to take a leaf as it reads, where it may.

        Only a backend that takes as it reads (`Capabilities.takes_as_it_reads`)
        and whose internals match the audit can, under the
        default marker (an app's own predicate is Python the store cannot run),
        and with no history cache: a cache forgets a leaf before it goes, and
        the leaf is known only once read.
        """
        backend = self._backend
        if backend is None or not backend.capabilities.takes_as_it_reads:
            return None
        if not backend.matches_audit:
            return None
        if self.admission != "auto" or self.history_caches:
            return None
        return marker_shape(self.policy)

    @property
    def cleanup_enabled(self) -> bool:
        """Whether this wrapper may ever delete anything from `inner`."""
        return self._backend is not None and self.admission != "off"

    @property
    def counters(self) -> AdmissionCounters:
        """Admission totals so far."""
        return self._accounts.counters

    @property
    def on_reclaim(self) -> Callable[[ReclaimEvent], None] | None:
        """What is called once per reclaimed checkpoint."""
        return self._accounts.on_reclaim

    # Reads

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._resumes.seen(drive(self._get_tuple(config), self._performer))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._resumes.seen(await adrive(self._get_tuple(config), self._performer))

    def _get_tuple(self, config: RunnableConfig) -> Flow[CheckpointTuple | None]:
        """`get_tuple` and `aget_tuple`, written once."""
        if not well_formed(config):
            bare: CheckpointTuple | None = yield Lookup(config)  # the saver judges it
            return bare
        if not self._is_admission(config):
            return self._pinned_result(config, (yield from self._read(config)))
        thread_id = str(config["configurable"]["thread_id"])
        if _run_reads.is_pinned(config):
            # A pinned run: clean up as an explicit admission would, then read its target.
            flow = self._explicit(thread_id, config, _run_reads.map_selectors(config))
            self._account(config, (yield Locked(thread_id, self._remembering(config, flow))))
            return self._pinned_result(config, (yield from self._read(config)))
        # The admission read: unless it takes a leaf as it reads, only a head shaped like
        # one takes the lock.
        head: CheckpointTuple | None = None
        if self._one_round is None:
            head = yield self._read_head(thread_id, config)
            if self._nothing_to_reclaim(head, config):
                if not self._history_may_run(thread_id, head):
                    return head
                flow = self._history_read(config, self._untaken(thread_id, head))
                return self._account_history((yield Locked(thread_id, flow)))
        flow = self._remembering(config, self._admission_read(thread_id, config, head))
        return self._account(config, (yield Locked(thread_id, flow)))[1]

    def _read_head(self, thread_id: str, config: RunnableConfig) -> ReadHead:
        """The admission read of the head, by the backend itself where it declares it may
        (the fast path runs on upstream internals; the saver's own read is the truth)."""
        backend = self._backend
        fast = None
        if backend is not None and backend.capabilities.reads_head and backend.matches_audit:
            fast = _admission.read_head(thread_id, config, cast(HeadReader, backend))
        return ReadHead(config, fast, _admission.FAST_READ)

    def _nothing_to_reclaim(self, head: CheckpointTuple | None, config: RunnableConfig) -> bool:
        skip = _admission.head_skip(head, self.policy, config)
        if skip is None:
            return False
        self._accounts.count("attempted", f"skip:{skip.value}")
        if skip is Skip.PROTECTED_ID and head is not None and self._retry is not None:
            # Another worker, without this run's selectors, may still reclaim it.
            self._retry.remember(head)
        return True

    def admit(self, thread_id: str, *, checkpoint_ns: str = "") -> AdmissionResult:
        """Run bounded cleanup for `thread_id` now, as a run about to start would.

        For gateways with `admission="explicit"`, after winning the thread.
        Never raises for a cleanup failure; the result says what happened.
        """
        return drive(self._admit(thread_id, checkpoint_ns), self._performer)

    async def aadmit(self, thread_id: str, *, checkpoint_ns: str = "") -> AdmissionResult:
        """Async `admit`."""
        return await adrive(self._admit(thread_id, checkpoint_ns), self._performer)

    def _admit(self, thread_id: str, checkpoint_ns: str) -> Flow[AdmissionResult]:
        config = self._thread_config(thread_id, checkpoint_ns)
        flow = self._remembering(config, self._explicit(thread_id, config))
        return self._account(config, (yield Locked(thread_id, flow)))[0]

    def _thread_config(self, thread_id: str, checkpoint_ns: str) -> RunnableConfig:
        validate.thread_id("thread_id", thread_id, nul_ok=self._nul_ok())
        validate.require(
            isinstance(checkpoint_ns, str),
            TypeError,
            f"checkpoint_ns must be a str, got {checkpoint_ns!r}",
        )
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}}

    def _is_admission(self, config: RunnableConfig) -> bool:
        if self.admission != "auto" or self._backend is None:
            return False
        if not isinstance(config.get("configurable", {}).get("thread_id"), str):
            return False  # the bare saver judges such a read for itself
        if not _run_reads.is_admission_read(config, self._runs):
            return False
        return not self._accounts.backing_off()


def _unsupported_warning(saver_type: type) -> str:
    """Why `saver_type` is passed through: not a supported saver, or a subclass of one that
    redefines how it stores (the names it redefines)."""
    name = saver_type.__qualname__
    overrides = store_overrides(saver_type)
    base = supported_base(saver_type)
    if base is None or not overrides:
        return (
            f"RetainingSaver: {name} is not a supported saver; "
            "it is passed through with cleanup disabled"
        )
    return (
        f"RetainingSaver: {name} subclasses {base.__qualname__} but redefines "
        f"{', '.join(overrides)}, which {base.__qualname__} reads or writes its store with; "
        "it is passed through with cleanup disabled"
    )
