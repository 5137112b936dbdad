"""The primitives the SQL backends share, written once over each backend's SQL texts.

SQLite and Postgres key a thread's checkpoints and writes alike, so each
primitive runs the same statements, in the same order, on either. What
differs is the SQL text (parameter style, table names, functions): each
store's texts are named constants in its SQL module (`_postgres_sql`,
`_sqlite_sql`), and the backend module assigns each field of its `SqlTexts`
from one of them, by name. Where the dialects differ beyond the text, a hook
says how: a node from its row (`_node`; SQLite decodes the checkpoint blob,
Postgres reads JSONB columns), a list of ids as bound (`_ids_param`), and the
clock reclaim records are aged by (`_reclaim_times`). The transactions stay in
each backend module: how a transaction runs differs far more than what runs in it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from retaining_saver._rules import CheckpointNode, Lineage
from retaining_saver.backends._base import Integrity, Op, window_size
from retaining_saver.backends._head_reader import HeadReader
from retaining_saver.backends._stats import StorageStats, TableStats
from retaining_saver.backends._upstream import stores_delta_snapshots

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Statement:
    """One SQL statement, its bound parameters, and whether its rows are read back.

    SQLite reads back every statement's rows, none for a statement without
    any; psycopg refuses to fetch those, so Postgres fetches only on `fetch`.
    `prepare` is psycopg's: None prepares as the connection's `prepare_threshold`
    says, False never (a statement run once, such as `CREATE INDEX`); SQLite
    ignores it.
    """

    sql: str
    params: tuple[Any, ...] | Mapping[str, Any] = ()
    fetch: bool = False
    prepare: bool | None = None


@dataclass(frozen=True, slots=True)
class Apart:
    """Transactions run one after another, each committing or rolling back alone: what an
    operation in `Mode.APART` yields. A lock one takes ends with it, so none waits on
    another's work; Postgres sends them all in one round trip (a pipeline).

    Answered by a `Done` per transaction, in order.

    Attributes:
        transactions: Each transaction's statements, in order.
    """

    transactions: tuple[tuple[Statement, ...], ...]


@dataclass(frozen=True, slots=True)
class Aborted:
    """A transaction of an `Apart` that failed, and so rolled back whole.

    Attributes:
        at: Where, in its transaction, it failed: the index of its first statement that
            reads rows back (`fetch`) and got none, else its length (one that reads none
            failed, after those that do).
        error: What that statement raised.
    """

    at: int
    error: Exception


Done = list[list[Row]] | Aborted
"""How one transaction of an `Apart` ended: each statement's rows, committed; or aborted."""


@dataclass(frozen=True, slots=True)
class SqlTexts:
    """The statements behind `SqlBackend`'s primitives, in one backend's dialect.

    Each field is assigned, in the backend module, from the constant named after
    it in the store's SQL module (`select_lineage`: `SELECT_LINEAGE_SQL`), so that
    `grep select_lineage` leads to the text. Every text binds its values as parameters;
    `select_thread_stats` and `select_integrity` bind the thread once per table.
    """

    select_lineage: str
    select_nodes: str
    select_head_node: str
    select_has_children: str
    select_newest_id: str
    delete_checkpoint: str
    delete_writes: str
    delete_expired_reclaimed: str
    upsert_reclaimed: str
    select_reclaimed_table: str
    select_reclaimed_clone: str
    delete_thread_reclaimed: str
    select_thread_stats: str
    select_store_stats: str
    select_first_thread_ids: str
    select_thread_ids_after: str
    select_integrity: str
    select_children: str


class SqlBackend(HeadReader):
    """A backend over SQL tables: the primitives, as statements built from `sql`."""

    sql: ClassVar[SqlTexts]

    # Dialect hooks

    @abstractmethod
    def _node(self, row: Row, write_count: int) -> CheckpointNode:
        """The node of a row `select_lineage`, `select_nodes` or `select_head_node` read."""

    @abstractmethod
    def _ids_param(self, ids: Sequence[str]) -> Any:
        """`ids` as `select_nodes` binds them."""

    @abstractmethod
    def _reclaim_times(self) -> tuple[Any, tuple[Any, ...]]:
        """What `delete_expired_reclaimed` and `select_reclaimed_clone` compare a record's
        age with, and the parameters, if any, that stamp one `upsert_reclaimed` writes."""

    # Primitives

    def load_lineage(self, thread_id: str, newest: int | None = None) -> Op[Lineage]:
        rows, nodes = yield from self._lineage_rows(str(thread_id), window_size(newest))
        start = (rows[0]["window_start"] or None) if rows else None
        lineage = Lineage.of(
            thread_id, nodes, stores_whole=stores_delta_snapshots(), window_start=start
        )
        return (yield from self._with_stored(lineage))

    def _lineage_rows(
        self, thread_id: str, newest: int | None
    ) -> Op[tuple[list[Row], Iterable[CheckpointNode]]]:
        """The rows `select_lineage` reads for `load_lineage`, and their nodes."""
        params = {"thread_id": thread_id, "newest": newest}
        rows = yield Statement(self.sql.select_lineage, params, fetch=True)
        return rows, self._lineage_nodes(rows)

    def _lineage_nodes(self, rows: list[Row]) -> Iterable[CheckpointNode]:
        """The nodes of the rows `select_lineage` read: by default a row each."""
        return (self._node(r, r["write_count"]) for r in rows)

    def _with_stored(self, lineage: Lineage) -> Op[Lineage]:
        """`lineage`, each node knowing which channels it stores, where `_node` could not
        tell (by default it can)."""
        yield from ()
        return lineage

    def load_nodes(
        self, thread_id: str, checkpoint_ns: str, ids: Sequence[str]
    ) -> Op[dict[str, CheckpointNode]]:
        params = (str(thread_id), checkpoint_ns, self._ids_param(ids))
        rows = yield Statement(self.sql.select_nodes, params, fetch=True)
        return {r["checkpoint_id"]: self._node(r, r["write_count"]) for r in rows}

    def head_node(self, thread_id: str, checkpoint_ns: str) -> Op[CheckpointNode | None]:
        params = (str(thread_id), checkpoint_ns)
        rows = yield Statement(self.sql.select_head_node, params, fetch=True)
        return self._node(rows[0], rows[0]["write_count"]) if rows else None

    def has_children(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Op[bool]:
        params = (str(thread_id), checkpoint_ns, checkpoint_id)
        rows = yield Statement(self.sql.select_has_children, params, fetch=True)
        return bool(rows[0]["found"])

    def newest_id(
        self, thread_id: str, checkpoint_ns: str, below: str | None = None
    ) -> Op[str | None]:
        params = (str(thread_id), checkpoint_ns, below, below)
        rows = yield Statement(self.sql.select_newest_id, params, fetch=True)
        newest: str | None = rows[0]["newest"]
        return newest

    def delete_checkpoint(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Op[bool]:
        key = (str(thread_id), checkpoint_ns, checkpoint_id)
        deleted = yield Statement(self.sql.delete_checkpoint, key, fetch=True)
        if deleted:
            yield Statement(self.sql.delete_writes, key)
        return bool(deleted)

    def record_reclaimed(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, clone_id: str
    ) -> Op[None]:
        oldest, stamp = self._reclaim_times()
        yield Statement(self.sql.delete_expired_reclaimed, (str(thread_id), oldest))
        key = (str(thread_id), checkpoint_ns, checkpoint_id)
        yield Statement(self.sql.upsert_reclaimed, (*key, clone_id, *stamp))

    def reclaimed_clone(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> Op[str | None]:
        if not (yield from self._reclaimed_table()):
            return None
        oldest, _ = self._reclaim_times()
        params = (str(thread_id), checkpoint_ns, checkpoint_id, oldest)
        rows = yield Statement(self.sql.select_reclaimed_clone, params, fetch=True)
        return str(rows[0]["clone_id"]) if rows else None

    def forget_reclaimed(self, thread_id: str) -> Op[None]:
        if (yield from self._reclaimed_table()):
            yield Statement(self.sql.delete_thread_reclaimed, (str(thread_id),))

    def _reclaimed_table(self) -> Op[bool]:
        """Whether the reclaim records' table exists: a read must not create it."""
        rows = yield Statement(self.sql.select_reclaimed_table, fetch=True)
        # SQLite answers a row only if the table exists; Postgres one row saying whether.
        return bool(rows) and bool(rows[0]["found"])

    def children_of(
        self, thread_id: str, checkpoint_ns: str, ids: Sequence[str]
    ) -> Op[dict[str, set[str]]]:
        params = (str(thread_id), checkpoint_ns, self._ids_param(ids))
        rows = yield Statement(self.sql.select_children, params, fetch=True)
        found: dict[str, set[str]] = {}
        for row in rows:
            found.setdefault(row["parent_id"], set()).add(row["checkpoint_id"])
        return found

    def stats(self, thread_id: str | None) -> Op[StorageStats]:
        if thread_id is None:
            rows = yield Statement(self.sql.select_store_stats, fetch=True)
        else:
            params = (str(thread_id),) * len(self.tables)
            rows = yield Statement(self.sql.select_thread_stats, params, fetch=True)
        return StorageStats(thread_id, self.in_table_order(rows))

    def in_table_order(self, rows: Iterable[Row]) -> dict[str, TableStats]:
        """Each `table_name` row's figures, in the order of `tables`, whatever order the
        rows came in (Postgres may run a `UNION ALL`'s branches in parallel)."""
        found = {r["table_name"]: TableStats(r["row_count"], r["byte_count"]) for r in rows}
        ordered = {name: found.pop(name) for name in self.tables if name in found}
        return ordered | found

    def thread_ids(self, after: str | None, limit: int) -> Op[list[str]]:
        if limit <= 0:
            return []
        if after is None:
            rows = yield Statement(self.sql.select_first_thread_ids, (limit,), fetch=True)
        else:
            rows = yield Statement(self.sql.select_thread_ids_after, (after, limit), fetch=True)
        return [r["thread_id"] for r in rows]

    def integrity(self, thread_id: str) -> Op[Integrity]:
        """Dangling parents, orphan writes rows, and blob rows no checkpoint names (none
        where the store has no blob table)."""
        params = (str(thread_id),) * len(self.tables)
        row = (yield Statement(self.sql.select_integrity, params, fetch=True))[0]
        return Integrity(row["dangling_parents"], row["orphan_writes"], row.get("orphan_blobs", 0))
