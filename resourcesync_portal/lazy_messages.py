"""Django's MessageMiddleware, with the message storage built on first use.

The stock middleware builds a cookie and a session storage (a cookie signer
among them) on every request, and the ResourceSync documents, the portal's
hot path, never show a message: that was about a tenth of the CPU of serving
a stored page. The admin and the dashboard use `django.contrib.messages` as
before: the storage is built when they first add or read a message, and only
then stored into the response.
"""

from __future__ import annotations

from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.messages.storage import default_storage
from django.http import HttpRequest, HttpResponse
from django.utils.functional import SimpleLazyObject, empty


class LazyMessageMiddleware(MessageMiddleware):
    """A subclass, so the admin's check for MessageMiddleware (admin.E409) still holds."""

    def process_request(self, request: HttpRequest) -> None:
        request._messages = SimpleLazyObject(lambda: default_storage(request))  # type: ignore[attr-defined]

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        messages = getattr(request, "_messages", None)
        if isinstance(messages, SimpleLazyObject) and messages._wrapped is empty:  # type: ignore[attr-defined]
            return response  # never added nor read: nothing to store
        return super().process_response(request, response)
