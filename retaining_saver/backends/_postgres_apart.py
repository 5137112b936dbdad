"""How Postgres runs an `Apart`: many transactions in one round trip, each its own.

On an autocommit connection (the savers' own) the transactions go out in one
psycopg pipeline, each written out between `BEGIN_SQL` and `COMMIT_SQL`, and
a single Sync ends the pipeline; the server runs them one after another, so
a lock one of them takes (an advisory lock, a deleted row's) is held for its
own statements only, never while another's run. A statement that fails aborts its
transaction, and the server skips what follows up to the Sync: the
transactions before it committed, it rolled back, and those after it go out
again in the next round (`Rounds`). Each statement has a cursor of its own,
so the results that came back tell which transaction ended how.

On a connection that does not autocommit (a pool configured so), psycopg
begins a transaction before the first statement: the first `BEGIN_SQL` only
draws a warning, and the first `COMMIT_SQL` ends it. The drivers in
`postgres` (`_execute`, `_aexecute`) do the I/O, and roll back a transaction a
failure left open; this module lays out a round and reads what came back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from psycopg import AsyncCursor, Cursor
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

from retaining_saver.backends._postgres_sql import BEGIN_SQL, COMMIT_SQL
from retaining_saver.backends._sql import Aborted, Apart, Done, Row, Statement

AnyCursor = Cursor[DictRow] | AsyncCursor[DictRow]

OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)
"""A connection's states inside a transaction (an `Apart` leaves it in neither)."""

BEGIN = Statement(BEGIN_SQL, prepare=False)
COMMIT = Statement(COMMIT_SQL, prepare=False)


class Rounds:
    """An `Apart` sent in rounds of one pipeline each, until each transaction ended: the
    cursors and statements of a round, and how its transactions ended."""

    def __init__(self, cur: AnyCursor, apart: Apart) -> None:
        self.cur, self.apart = cur, apart
        self.done: dict[int, Done] = {}
        self.cursors: dict[int, list[Any]] = {}
        self.control: Any = None
        self.committed: list[int] = []

    def __iter__(self) -> Iterator[Rounds]:
        """A round per transaction that must go out again, until none must."""
        transactions = self.apart.transactions
        while len(self.done) < len(transactions):
            connection: Any = self.cur.connection
            binary, rows = bool(self.cur.format), self.cur.row_factory
            self.control = connection.cursor(binary=binary, row_factory=rows)
            # A cursor of its own for each statement that reads rows and for each COMMIT,
            # whose results tell how its transaction ended; the rest share one.
            self.cursors = {
                i: [
                    connection.cursor(binary=binary, row_factory=rows)
                    if statement.fetch or statement is COMMIT
                    else self.control
                    for statement in (*transactions[i], COMMIT)
                ]
                for i in range(len(transactions))
                if i not in self.done
            }
            yield self

    def calls(self) -> Iterator[tuple[Any, Statement]]:
        """Each call of the round, in order: its cursor and its statement."""
        for i, cursors in self.cursors.items():
            yield self.control, BEGIN
            yield from zip(cursors, (*self.apart.transactions[i], COMMIT), strict=True)

    def settle(self, errors: list[Exception]) -> list[Any]:
        """Note how the round's transactions ended, for those that did (`errors`: what the
        round raised, in order): those that committed, then the one that failed, aborted
        (at its first statement that reads rows and has none; those after it did not
        run). The cursors whose rows `record` is to be given.

        Raises:
            RuntimeError: If the round ended no transaction (the next round would only
                send them again).
        """
        self.committed = []
        aborted = False
        for i, cursors in self.cursors.items():
            statements = self.apart.transactions[i]
            if cursors[-1].statusmessage == COMMIT_SQL:  # its tag; "ROLLBACK" if it failed
                self.committed.append(i)
                continue
            if errors:  # the first failure: the transaction that raised it
                unread = (
                    at
                    for at, statement in enumerate(statements)
                    if statement.fetch and cursors[at].pgresult is None
                )
                self.done[i] = Aborted(next(unread, len(statements)), first_failure(errors))
                aborted = True
            break
        if not (self.committed or aborted):
            raise RuntimeError("a pipeline of transactions ended none of them")
        return [
            cursor
            for i in self.committed
            for cursor, statement in zip(
                self.cursors[i][:-1], self.apart.transactions[i], strict=True
            )
            if statement.fetch
        ]

    def record(self, fetched: list[list[Row]]) -> None:
        """The committed transactions' rows, as `settle` listed their cursors."""
        rows = iter(fetched)
        for i in self.committed:
            self.done[i] = [next(rows) if s.fetch else [] for s in self.apart.transactions[i]]

    def results(self) -> list[Done]:
        """How each transaction ended, in order."""
        return [self.done[i] for i in range(len(self.apart.transactions))]


def first_failure(errors: list[Exception]) -> Exception:
    """What failed first: the statements the server skipped after it raise
    `PipelineAborted`, which tells nothing."""
    real = [error for error in errors if not isinstance(error, pg_errors.PipelineAborted)]
    return (real or errors)[0]
