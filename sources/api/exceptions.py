"""The API's errors, and the one handler that renders them.

Errors about the events or the body as a whole are answered as
`{"errors": [{"index", "field", "message"}, ...]}`; DRF's own errors (401,
403, 404, 415, 429, bad query parameters) keep DRF's shapes. Services and
parsers raise plain exceptions that know nothing of HTTP; the handler maps
them here, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from django.db import InterfaceError, OperationalError
from django.http import UnreadablePostError
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import exception_handler, set_rollback

from resourcesync_portal.database_errors import Trouble, trouble
from sources.services import EventsRejected, LocationsChanged

from .parsers import BodyTooLarge, LengthRequired
from .serializers import ErrorListSerializer


class ApiErrorList(APIException):
    """An error answered as a list of `{"index", "field", "message"}` objects."""

    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(detail=errors[0]["message"] if errors else None)
        self.errors = errors


class InvalidEvents(ApiErrorList):
    """At least one event was invalid, so none was applied."""


class BodyError(ApiErrorList):
    """The body as a whole is wrong, not one event: its index is null."""

    def __init__(self, message: str) -> None:
        super().__init__([{"index": None, "field": "body", "message": message}])


class PayloadTooLarge(BodyError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE


class ChunkedBodyUnreadable(BodyError):
    """The server in front did not decode a chunked body (Django's runserver)."""

    status_code = status.HTTP_411_LENGTH_REQUIRED

    def __init__(self) -> None:
        super().__init__("is chunked, which this server cannot read; send a Content-Length.")


class RetryLater(APIException):
    """A 503 with `Retry-After`: nothing was applied, and the same request may succeed."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    retry_after = 1

    @property
    def response_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class DatabaseBusy(RetryLater):
    """SQLite's one writer held its lock past our wait: nothing was applied, try again."""

    default_detail = "The database is busy with another write; nothing was applied. Retry shortly."
    default_code = "database_busy"
    retry_after = Trouble.BUSY.value


class SetMoved(RetryLater):
    """The set's url_prefix changed while the request waited for it: resend to resolve anew."""

    default_detail = (
        "The set's url_prefix or resource_root_dir changed while this request was applied; "
        "nothing was applied. Retry shortly."
    )
    default_code = "set_moved"


class DatabaseUnavailable(RetryLater):
    """The database is down, restarting or out of room: nothing was applied, try again."""

    default_detail = "The database is unavailable; nothing was applied. Retry shortly."
    default_code = "database_unavailable"
    retry_after = Trouble.UNAVAILABLE.value


def _database_error(exc: Exception) -> APIException | None:
    """A lock timeout, or a database down or full, is the client's to retry; any other
    error is a bug (500)."""
    found = trouble(exc)
    if found is None:
        return None
    return DatabaseBusy() if found is Trouble.BUSY else DatabaseUnavailable()


#: Exceptions of the services and parsers, and the API error each one is.
API_ERRORS: dict[type[Exception], Callable[[Any], APIException | None]] = {
    EventsRejected: lambda exc: InvalidEvents([asdict(error) for error in exc.errors]),
    BodyTooLarge: lambda exc: PayloadTooLarge(str(exc)),
    LengthRequired: lambda exc: ChunkedBodyUnreadable(),
    OperationalError: _database_error,
    InterfaceError: _database_error,
    LocationsChanged: lambda exc: SetMoved(),
    UnreadablePostError: lambda exc: BodyError("could not be read to the end."),
}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """`REST_FRAMEWORK["EXCEPTION_HANDLER"]`: every API error is rendered here."""
    for exception_class, api_error in API_ERRORS.items():
        if isinstance(exc, exception_class):
            exc = api_error(exc) or exc
            break
    if isinstance(exc, ApiErrorList):
        set_rollback()
        body = ErrorListSerializer({"errors": exc.errors}).data
        return Response(body, status=exc.status_code)
    response = exception_handler(exc, context)
    if response is not None:
        # What an error adds to DRF's answer (Retry-After, Accept-Encoding), by its class.
        for name, value in getattr(exc, "response_headers", {}).items():
            response[name] = value
    return response
