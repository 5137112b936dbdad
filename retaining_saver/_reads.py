"""The saver's reads that are not an admission: pinned, unpinned, and delta history.

A read pinned to an id this process, or the store, knows was reclaimed as a
duplicate answers the clone that survives it (`_reclaimed`); an unpinned read
whose head vanished while it hydrated is read again (`_retry`); a read that
returned a stamp is remembered, since a write on it would keep it. Each is a
flow, run by `get_tuple` and `aget_tuple` alike (`RetainingSaver`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, DeltaChannelHistory

from retaining_saver._accounting import Accounts
from retaining_saver._caches import cached_history
from retaining_saver._effects import Flow, Lookup, Mode, Performer, Run, adrive, drive
from retaining_saver._errors import CheckpointNotFoundError
from retaining_saver._history_cache import HistoryCache
from retaining_saver._lru import BoundedLru
from retaining_saver._reclaimed import MAX_HOPS, Key, ReclaimedIds
from retaining_saver._retry import ReadRetry, checkpoint_key, could_vanish
from retaining_saver._rules import RetentionPolicy
from retaining_saver._stamps import OwnStamps
from retaining_saver._writes import pinned_to
from retaining_saver.backends._base import Backend


class ReadsMixin:
    """Reads that resolve reclaimed ids, settle vanished heads and remember stamps."""

    # Set by `RetainingSaver.__init__`.
    inner: BaseCheckpointSaver[Any]
    _backend: Backend | None
    policy: RetentionPolicy
    _accounts: Accounts
    _performer: Performer
    _stamps: OwnStamps | None
    _reclaimed: ReclaimedIds
    _retry: ReadRetry | None
    history_caches: tuple[HistoryCache, ...]
    strict_pinned_reads: bool
    _stamps_read: BoundedLru[Key, bool]

    def _read(self, config: RunnableConfig) -> Flow[CheckpointTuple | None]:
        found: CheckpointTuple | None = yield Lookup(config)
        if not config.get("configurable", {}).get("checkpoint_id"):
            found = yield from self._settle(found, config)
        elif found is None:
            found = yield from self._reclaimed_read(config)
        if found is not None and self._may_be_stamp(found):
            # A write on it (an update_state) would keep it: see `_write_on_stamp`.
            self._stamps_read.put(checkpoint_key(found.config), True)
        return found

    def _may_be_stamp(self, found: CheckpointTuple) -> bool:
        return self._stamps is not None and could_vanish(found, self.policy)

    def _reclaimed_read(self, config: RunnableConfig) -> Flow[CheckpointTuple | None]:
        """A read pinned to a missing id: the clone it was reclaimed as a duplicate of, if
        it was (through stacked clones), read as the saver reads it; else None."""
        configurable = config["configurable"]
        thread_id, ns = configurable.get("thread_id"), configurable.get("checkpoint_ns", "")
        if self._backend is None or not isinstance(thread_id, str) or not isinstance(ns, str):
            return None
        current = str(configurable["checkpoint_id"])
        for _ in range(MAX_HOPS):
            clone = self._reclaimed.clone_of((thread_id, ns, current))
            if clone is None:
                try:
                    clone = yield Run(
                        self._backend.reclaimed_clone(thread_id, ns, current), Mode.READ
                    )
                except Exception as error:
                    self._accounts.fell_back("the reclaimed-id lookup", error)
                    return None
            if clone is None:
                return None
            found: CheckpointTuple | None = yield Lookup(pinned_to(config, clone))
            if found is not None:
                return found
            current = clone
        return None

    def _settle(
        self, found: CheckpointTuple | None, config: RunnableConfig
    ) -> Flow[CheckpointTuple | None]:
        """An unpinned result, re-read once if it vanished while it hydrated (`_retry`)."""
        if self._retry is None:
            return found
        return (yield from self._retry.settle(found, config))

    def _pinned_result(
        self, config: RunnableConfig, found: CheckpointTuple | None
    ) -> CheckpointTuple | None:
        configurable = config.get("configurable", {})
        checkpoint_id = configurable.get("checkpoint_id")
        if checkpoint_id and found is None and self.strict_pinned_reads:
            thread_id = str(configurable.get("thread_id"))
            ns = configurable.get("checkpoint_ns", "")
            survivor = self._reclaimed.survivor((thread_id, ns, str(checkpoint_id)))
            raise CheckpointNotFoundError(thread_id, ns, checkpoint_id, survivor)
        return found

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return drive(self._history(config, channels), self._performer)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await adrive(self._history(config, channels), self._performer)

    def _history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Flow[Mapping[str, DeltaChannelHistory]]:
        answer = yield from cached_history(config, channels, self.history_caches)
        if self._retry is None:
            return answer
        rebuilt = yield from self._retry.history(answer, config, channels)
        return cast(Mapping[str, DeltaChannelHistory], rebuilt)
