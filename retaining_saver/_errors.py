"""Exceptions raised by retaining-saver."""

from __future__ import annotations


class RetainingSaverError(Exception):
    """Base class of every error this library raises on purpose."""


class UnsupportedSaverError(RetainingSaverError, TypeError):
    """The wrapped saver is of a type whose storage layout is not known.

    Raised at construction with `strict=True`, and by maintenance entrypoints
    that need a storage backend, before any read reaches the saver.
    """

    def __init__(self, saver_type: type) -> None:
        self.saver_type = saver_type
        name = f"{saver_type.__module__}.{saver_type.__qualname__}"
        super().__init__(
            f"retaining-saver does not know how {name} stores checkpoints; supported "
            "savers are InMemorySaver, SqliteSaver, AsyncSqliteSaver, PostgresSaver "
            "and AsyncPostgresSaver"
        )


class CheckpointNotFoundError(RetainingSaverError, LookupError):
    """A read pinned to a `checkpoint_id` found no such checkpoint.

    Raised only with `strict_pinned_reads=True`. `clone_id` names the
    checkpoint that replaced it when this process reclaimed it, else None.
    """

    def __init__(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, clone_id: str | None
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.clone_id = clone_id
        where = f"thread {thread_id!r}, namespace {checkpoint_ns!r}"
        hint = (
            f"; it was reclaimed as a duplicate of {clone_id!r}, which holds the same state"
            if clone_id
            else ""
        )
        super().__init__(f"checkpoint {checkpoint_id!r} does not exist in {where}{hint}")


class CleanupPermissionError(RetainingSaverError, PermissionError):
    """The database refused a deletion for lack of a privilege.

    Raised by the engine's entry points; nothing was changed (the deletion is
    one transaction). Admission never raises it: it logs once, backs off, and
    counts `permission-denied` skips instead.
    """

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(
            f"retention cleanup is not permitted: {problem}. The role needs SELECT, "
            "INSERT, UPDATE and DELETE on the saver's tables and on retaining_saver_reclaimed "
            "and retaining_saver_resumed (and CREATE once, or run create_retention_indexes() "
            "as a role that has it)"
        )
