"""Unpinned reads whose target another worker reclaimed while the read hydrated it.

An unpinned read resolves "latest", then LangGraph hydrates it: its delta
channels' history is read in a second call. If the head was a duration leaf,
another worker's admission may reclaim it in between. Only a head shaped like
such a leaf can vanish, so only such a head is probed again after the read
(`settle`): if it is gone, "latest" is read once more. Its target is also
remembered, so that the delta-history read that follows rebuilds its answer
from the parent the leaf cloned (`history`), as the walk from the leaf would
have. Explicit (pinned) reads never move: a reclaimed id resolves to its
clone instead (see `_reclaimed`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from retaining_saver._admission import head_skip
from retaining_saver._effects import FellBack, Flow, History, Lookup, Mode, Run
from retaining_saver._lru import BoundedLru
from retaining_saver._rules import CheckpointNode, RetentionPolicy
from retaining_saver.backends._base import Backend

Key = tuple[str, str, str]
"""(thread_id, checkpoint_ns, checkpoint_id)."""


def could_vanish(found: CheckpointTuple, policy: RetentionPolicy) -> bool:
    """Whether another worker's admission could reclaim `found` under its reader."""
    return head_skip(found, policy, {}) is None


@dataclass(frozen=True, slots=True)
class ReadTarget:
    """What the delta-history reads after an unpinned read need of its result: where it
    was and its parent (never the state itself, which may be large)."""

    config: RunnableConfig
    parent_config: RunnableConfig | None


class ReadRetry:
    """Settles unpinned reads and the delta-history reads after them.

    Args:
        backend: The store to probe.
        policy: What makes a head a leaf that may vanish.
        size: How many read targets it remembers (configs only, a few hundred
            bytes each).
    """

    def __init__(self, backend: Backend, policy: RetentionPolicy, size: int = 1024) -> None:
        self.backend = backend
        self.policy = policy
        self._targets: BoundedLru[Key, ReadTarget] = BoundedLru(size)

    def __len__(self) -> int:
        return len(self._targets)

    def settle(
        self, found: CheckpointTuple | None, config: RunnableConfig
    ) -> Flow[CheckpointTuple | None]:
        """`found`, what an unpinned read of `config` answered, re-read once if it vanished."""
        if found is None or not could_vanish(found, self.policy):
            return found
        try:
            still = yield from still_there(found.config, self.backend)
        except Exception as error:
            # The probe is cleanup's, not the read's: the read stands as the saver answered it.
            yield FellBack("the still-there probe", error)
            return found
        if not still:
            found = yield Lookup(config)
        if found is not None and could_vanish(found, self.policy):
            self.remember(found)
        return found

    def remember(self, found: CheckpointTuple) -> None:
        """Remember what an unpinned read returned, for its delta hydration to follow."""
        target = ReadTarget(found.config, found.parent_config)
        self._targets.put(checkpoint_key(found.config), target)

    def history(
        self, answer: Mapping[str, Any], config: RunnableConfig, channels: Sequence[str]
    ) -> Flow[Mapping[str, Any]]:
        """The delta history `answer` for `config`, rebuilt if its target vanished."""
        target = self._targets.get(checkpoint_key(config))
        if target is None:
            return answer
        return (yield from vanished_history(answer, target, channels, self.backend))


def checkpoint_key(config: RunnableConfig) -> Key:
    """(thread_id, checkpoint_ns, checkpoint_id) of a pinned config."""
    configurable = config.get("configurable", {})
    return (
        str(configurable.get("thread_id")),
        configurable.get("checkpoint_ns", ""),
        str(configurable.get("checkpoint_id")),
    )


def still_there(config: RunnableConfig, backend: Backend) -> Flow[bool]:
    """Whether the checkpoint `config` names still exists: one probe by primary key, a read."""
    configurable = config["configurable"]
    thread_id, checkpoint_id = str(configurable["thread_id"]), configurable["checkpoint_id"]
    op = backend.load_nodes(thread_id, configurable.get("checkpoint_ns", ""), [checkpoint_id])
    still: dict[str, CheckpointNode] = yield Run(op, Mode.READ)
    return checkpoint_id in still


def vanished_history(
    answer: Mapping[str, Any],
    target: ReadTarget,
    channels: Sequence[str],
    backend: Backend,
) -> Flow[Mapping[str, Any]]:
    """Delta history for `target`, an unpinned read's result, even if it was reclaimed since.

    A reclaimed target cloned its parent, so its history is its parent's own
    pending writes on top of the parent's history, seeded at the parent when
    the parent stores the value: what the walk from the target would have
    collected. Any non-empty answer, or a target still present, stands.
    """
    if any(entry.get("writes") or "seed" in entry for entry in answer.values()):
        return answer
    if target.parent_config is None or (yield from still_there(target.config, backend)):
        return answer
    parent: CheckpointTuple | None = yield Lookup(target.parent_config)
    if parent is None:
        return answer
    below: Mapping[str, Any] = yield History(target.parent_config, channels)
    rebuilt: dict[str, Any] = {}
    for channel in channels:
        own = [w for w in parent.pending_writes or () if w[1] == channel]
        if channel in parent.checkpoint["channel_values"]:
            rebuilt[channel] = {"writes": own, "seed": parent.checkpoint["channel_values"][channel]}
            continue
        entry = dict(below.get(channel, {"writes": []}))
        entry["writes"] = [*entry.get("writes", []), *own]
        rebuilt[channel] = entry
    return rebuilt
