"""`IdleThreadPolicy`: when a whole thread has expired, and what then happens to it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from retaining_saver._rules import _validate as validate
from retaining_saver._rules._policy import RetentionPolicy

if TYPE_CHECKING:
    from langgraph.pregel import Pregel

Strategy = Literal["delete", "keep_latest"]
STRATEGIES: tuple[Strategy, ...] = ("delete", "keep_latest")


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """What a veto (`IdleThreadPolicy.keep_thread`) is told about an expired thread.

    Attributes:
        thread_id: The thread.
        checkpoint_id: The id of its newest root-namespace checkpoint.
        updated_at: When that checkpoint was written (read from its time-ordered id).
        created_at: When its oldest root-namespace checkpoint was written.
        metadata: That newest checkpoint's metadata.
        interrupted: Whether it waits on a resume: its newest checkpoint owns
            pending writes (an interrupt, a partly done super-step) or has tasks
            that have not run.
    """

    thread_id: str
    checkpoint_id: str
    updated_at: datetime
    created_at: datetime
    metadata: dict[str, Any]
    interrupted: bool


ThreadVeto = Callable[[ThreadInfo], bool]
"""True keeps the thread: nothing of it is deleted this pass."""


@dataclass(frozen=True, slots=True)
class IdleThreadPolicy:
    """A time to live for whole threads, as the sweeper (`RetentionSweeper`) applies it.

    A thread has expired once its newest root-namespace checkpoint is older
    than `idle_for`, or (with `max_age`) its oldest one is older than
    `max_age`, however recently it was used. An expired thread is then
    deleted, pruned to its latest checkpoints, or passed through a
    `RetentionPolicy`, as `strategy` says, unless it is interrupted (by
    default) or `keep_thread` vetoes it.

    Args:
        idle_for: How long a thread must go without a new checkpoint to expire.
        strategy: `"delete"`: the whole thread goes (every namespace, its
            writes, blobs and reclaim records). `"keep_latest"`: each
            namespace keeps its latest checkpoint, with what the rules keep
            with it (pending writes, DeltaChannel values), as
            `prune(strategy="keep_latest")`. A `RetentionPolicy`: one engine
            pass with it (a history horizon, say).
        max_age: A hard limit: a thread whose oldest checkpoint is older than
            this expires even while still in use. None: no limit.
        keep_thread: A veto, called with a `ThreadInfo` before anything of an
            expired thread is deleted; True keeps it. It runs in the sweeper's
            task (or thread): keep it quick.
        delete_interrupted: Also expire a thread that waits on a resume (an
            interrupt, tasks not yet run); off by default, since its user may
            still answer.
        delta_graph: With `"keep_latest"`: the compiled graph of the threads,
            so that DeltaChannel values are stored whole at the kept heads (see
            `RetentionPolicy.delta_graph`).

    Raises:
        TypeError: If a field has the wrong type.
        ValueError: If `idle_for` or `max_age` is not positive, or `strategy`
            names no strategy.
    """

    idle_for: timedelta
    strategy: Strategy | RetentionPolicy = "delete"
    max_age: timedelta | None = None
    keep_thread: ThreadVeto | None = None
    delete_interrupted: bool = False
    delta_graph: Pregel[Any, Any, Any, Any] | None = None

    def __post_init__(self) -> None:
        validate.duration("idle_for", self.idle_for, positive=True)
        validate.duration("max_age", self.max_age, optional=True, positive=True)
        validate.optional_callable("keep_thread", self.keep_thread)
        validate.flag("delete_interrupted", self.delete_interrupted)
        strategy: Any = self.strategy
        if not isinstance(strategy, RetentionPolicy):
            validate.require(
                isinstance(strategy, str),
                TypeError,
                f"strategy must be one of {STRATEGIES} or a RetentionPolicy, got {strategy!r}",
            )
            validate.require(
                strategy in STRATEGIES,
                ValueError,
                f"strategy must be one of {STRATEGIES} or a RetentionPolicy, got {strategy!r}",
            )
        validate.require(
            self.delta_graph is None or strategy == "keep_latest",
            ValueError,
            "delta_graph is for strategy='keep_latest' (a RetentionPolicy carries its own)",
        )

    @property
    def deletes_threads(self) -> bool:
        """Whether an expired thread goes whole."""
        return self.strategy == "delete"
