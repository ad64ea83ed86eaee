"""The hub endpoint and the topic URLs: thin views over `hub` and `topics`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import (
    BadRequest,
    RequestDataTooBig,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.http.multipartparser import MultiPartParserError
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from sitemaps.access import SetReadView, denied_response
from sources.tokens import AccessDenied, request_token

from . import hub, tasks
from .conf import notification_settings
from .models import Topic, TopicKind
from .topics import link_header, publishes_notifications, topic_url


def _text(message: str, status: int) -> HttpResponse:
    return HttpResponse(message + "\n", status=status, content_type="text/plain")


def _form(request: HttpRequest) -> Mapping[str, str] | HttpResponse:
    """The request's form, or a 400 in the hub's words: Django's own page named nothing,
    and it logged the traceback of a multipart body it could not parse."""
    try:
        return request.POST
    except (TooManyFieldsSent, RequestDataTooBig) as error:
        return _text(f"request: too many form fields or bytes ({error})", 400)
    except (MultiPartParserError, TooManyFilesSent) as error:
        return _text(
            f"request: the multipart form could not be read ({error}); send the form as "
            "application/x-www-form-urlencoded, as WebSub does",
            400,
        )
    except BadRequest:  # Django reads a form only as UTF-8
        return _text("request: the form must be UTF-8 (send no other charset)", 400)


@method_decorator(csrf_exempt, name="dispatch")
class HubView(View):
    """WebSub subscribe/unsubscribe: 202, then verification of intent after the commit."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponseBase:
        if not notification_settings().embedded_hub:
            raise Http404("This portal publishes through another hub.")
        form = _form(request)
        if isinstance(form, HttpResponse):
            return form
        try:
            pending = hub.subscription_request(form, request_token(request))
        except AccessDenied as error:
            return denied_response(error)
        except hub.HubRequestError as error:
            return _text(str(error), error.status_code)
        if pending is not None:  # None: an unsubscribe with nothing to end, answered alike
            tasks.run_after_commit(tasks.verify_subscription, pending.pk)
        mode = form["hub.mode"].strip()
        return _text(f"Accepted: the hub will verify the intent to {mode}.", 202)


class TopicView(SetReadView):
    """A topic: 200, application/xml, its self and hub links, and its newest payload;
    204 with the links before its first payload (an empty body is no XML document)."""

    def get(self, request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        resource_set = self.get_resource_set()
        kind = TopicKind(self.kwargs["kind"])
        if not publishes_notifications(resource_set):
            raise Http404("This set publishes no notifications.")
        payload = (
            Topic.objects.filter(resource_set=resource_set, kind=kind)
            .values_list("last_payload", flat=True)
            .first()
        )
        body = bytes(payload or b"")
        if body:
            response = HttpResponse(
                b"" if request.method == "HEAD" else body, content_type="application/xml"
            )
            response["Content-Length"] = str(len(body))
        else:
            response = HttpResponse(status=204)
            del response["Content-Type"]
        response["Link"] = link_header(topic_url(resource_set, kind))
        response["Cache-Control"] = "no-cache"
        return response


hub_endpoint = HubView.as_view()
topic = TopicView.as_view()
