"""Which database errors are the client's to retry rather than bugs.

A lock held past our wait, or a database down, restarting or out of room:
nothing was done, and the same request may succeed shortly. The API answers
them with its own 503s (sources.api.exceptions), every other view through
`DatabaseUnavailableMiddleware`.
"""

from __future__ import annotations

from enum import Enum

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

#: PostgreSQL's SQLSTATE classes of a server that cannot serve now: connection
#: exceptions, insufficient resources (disk full, too many connections), shutdown.
UNAVAILABLE_SQLSTATES = ("08", "53", "57P")
#: SQLite's result codes of a disk that is full or failing.
UNAVAILABLE_SQLITE = {"SQLITE_FULL", "SQLITE_IOERR", "SQLITE_CANTOPEN"}


class Trouble(Enum):
    """What kept the database from answering, and how long to wait before trying again."""

    BUSY = 1
    UNAVAILABLE = 5


def trouble(exc: BaseException) -> Trouble | None:
    """The retryable trouble `exc` is, or None for any other error (a bug: 500)."""
    if isinstance(exc, InterfaceError):  # "connection already closed"
        return Trouble.UNAVAILABLE
    if not isinstance(exc, OperationalError):
        return None
    if "locked" in str(exc):  # "database is locked", "database table is locked"
        return Trouble.BUSY
    cause = exc.__cause__
    sqlite_code = getattr(cause, "sqlite_errorname", None)
    if sqlite_code is not None:
        return Trouble.UNAVAILABLE if _sqlite_unavailable(sqlite_code) else None
    if type(cause).__module__.startswith("psycopg"):
        sqlstate = getattr(cause, "sqlstate", None)  # None: the connection itself failed
        if sqlstate is None or sqlstate.startswith(UNAVAILABLE_SQLSTATES):
            return Trouble.UNAVAILABLE
    return None


def _sqlite_unavailable(name: str) -> bool:
    """Whether an SQLite result code is one of UNAVAILABLE_SQLITE or an extended code of one
    (a full disk met while growing the WAL index is `SQLITE_IOERR_SHMSIZE`)."""
    return any(name == code or name.startswith(code + "_") for code in UNAVAILABLE_SQLITE)


#: What each trouble tells a reader: a busy lock is no outage to go looking for.
TROUBLE_MESSAGES = {
    Trouble.BUSY: "The database is busy; try again shortly.",
    Trouble.UNAVAILABLE: "The database is unavailable; retry shortly.",
}


class DatabaseUnavailableMiddleware:
    """A page or document read while the database is down or busy (SQLite's write lock)
    is a 503 with Retry-After that says which, as the API answers, not Django's 500 (a
    destination cannot tell that from a bug)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        found = trouble(exc)
        if found is None:
            return None
        response = HttpResponse(
            TROUBLE_MESSAGES[found] + "\n",
            status=503,
            content_type="text/plain; charset=utf-8",
        )
        response["Retry-After"] = str(found.value)
        return response
