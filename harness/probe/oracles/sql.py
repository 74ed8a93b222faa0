"""The SQL oracle: a read-only query on the service's own database counts effects.

`dsn` is `postgresql://...` (psycopg 3) or `sqlite:///path` (the standard library;
`sqlite:////abs/path` for an absolute path, a relative one is the probe's working folder's).
The query names its parameters `:key`, `:id` or `:field` (a top-level field of the
request body); it returns either one row with one column called `count` (what
`SELECT count(*)` gives in PostgreSQL; `SELECT count(*) AS count` in SQLite), the
number of effects, or one row per effect (the first column is the effect's id).

Read-only on purpose, whatever the query says: PostgreSQL runs it in a READ ONLY
transaction with `statement_timeout`; SQLite opens the file with `mode=ro` and a
progress handler that interrupts a query past the timeout. Every failure (cannot
connect, syntax, timeout, a write refused) is an OracleError naming the endpoint and
the query. One connection per oracle, opened on first use.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

from harness.probe.config import EffectsSpec
from harness.probe.oracles.base import Effects, OracleError, Scalar

CONNECT_TIMEOUT = 5
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")


def psycopg_query(query: str) -> str:
    """`:name` parameters as psycopg's `%(name)s`; a literal `%` doubled."""
    return _PARAM.sub(lambda match: f"%({match.group(1)})s", query.replace("%", "%%"))


def effects_of_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Effects:
    """A count row (`count` or `count(*)`) or one row per effect."""
    if len(rows) == 1 and len(columns) == 1 and columns[0].lower() in ("count", "count(*)"):
        value = rows[0][0]
        if isinstance(value, int) and not isinstance(value, bool):
            return Effects(count=value)
    return Effects(count=len(rows), ids=tuple(str(row[0]) for row in rows if row))


class SqlOracle:
    per_identity = False

    def __init__(self, endpoint: str, spec: EffectsSpec) -> None:
        assert spec.dsn is not None and spec.query is not None
        self.endpoint = endpoint
        self.spec = spec
        self._connection: Any = None

    @property
    def _what(self) -> str:
        return f"effects of {self.endpoint}: query {self.spec.query!r}"

    def count(self, params: Mapping[str, Scalar], headers: Mapping[str, str]) -> Effects:
        values = {name: params[name] for name in self.spec.params}
        try:
            if (self.spec.dsn or "").startswith("sqlite:"):
                return self._sqlite(values)
            return self._postgres(values)
        except OracleError:
            raise
        except Exception as error:  # noqa: BLE001 - every driver error is the oracle's failure
            raise OracleError(f"{self._what} failed: {type(error).__name__}: "
                              f"{str(error).strip().splitlines()[0] if str(error).strip() else error!r}") from None

    def _postgres(self, values: Mapping[str, Scalar]) -> Effects:
        import psycopg

        if self._connection is None:
            self._connection = psycopg.connect(self.spec.dsn or "", connect_timeout=CONNECT_TIMEOUT)
            self._connection.read_only = True  # every transaction: BEGIN READ ONLY
        connection = self._connection
        try:
            with connection.transaction():
                connection.execute(f"SET LOCAL statement_timeout = {int(self.spec.timeout * 1000)}")
                cursor = connection.execute(psycopg_query(self.spec.query or ""), values)
                columns = [column.name for column in cursor.description or []]
                rows = cursor.fetchall()
        except psycopg.Error:
            self.close()  # a broken connection is not reused
            raise
        return effects_of_rows(columns, rows)

    def _sqlite(self, values: Mapping[str, Scalar]) -> Effects:
        if self._connection is None:
            # sqlite:///relative/path or sqlite:////absolute/path, as SQLAlchemy spells them.
            path = unquote((self.spec.dsn or "").removeprefix("sqlite:///"))
            self._connection = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=self.spec.timeout,
                                               check_same_thread=False)
        connection = self._connection
        deadline = time.monotonic() + self.spec.timeout
        # A non-zero return interrupts the statement: the query's timeout.
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        try:
            cursor = connection.execute(self.spec.query or "", dict(values))
            columns = [column[0] for column in cursor.description or []]
            rows = cursor.fetchall()
        finally:
            connection.set_progress_handler(None, 0)
        return effects_of_rows(columns, rows)

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            finally:
                self._connection = None
