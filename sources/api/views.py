"""The ingestion API for the harvester, and reads of what a set now holds."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework import serializers
from rest_framework.exceptions import NotAcceptable, NotFound
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from sources.models import ResourceSet
from sources.selectors import (
    change_page,
    resource_get,
    resource_get_by_uri,
    resource_set_get,
    resource_sets_visible_to,
)
from sources.services import ingest_events
from sources.tokens import EXPECTED_HEADER

from .authentication import ApiTokenAuthentication, StaffSessionAuthentication
from .exceptions import BodyError
from .parsers import JSONEventsParser, NDJSONEventsParser, request_events
from .permissions import CanReachResourceSet, HasApiToken
from .serializers import (
    ChangeCursorField,
    ChangePageSerializer,
    DetailSerializer,
    ErrorListSerializer,
    EventSerializer,
    IngestCountsSerializer,
    ResourceSerializer,
    ResourceSetSerializer,
)
from .throttling import ApiTokenRateThrottle
from .validation import EventValidator

CHANGES_DEFAULT_LIMIT = 100
CHANGES_MAX_LIMIT = 1000

INGEST_DESCRIPTION = f"""\
Apply events to the set's snapshot and append them to its change log.

The body is one event object or a JSON array of events (`application/json`),
or one event per line (`application/x-ndjson`), the way to send large batches,
uncompressed (a `Content-Encoding` such as gzip is refused with 415 and
`Accept-Encoding: identity`).
Bodies over {settings.INGEST_MAX_BODY_BYTES} bytes are refused with 413: send
more events in several requests. A body may be sent with
`Transfer-Encoding: chunked`; the limit is counted as it arrives.

A request is all or nothing: if any event is invalid, none is applied and the
answer is 400 with one error per invalid event (field as a dotted path, e.g.
`location.value`, `ln.0.href.type`; `body` for malformed JSON or NDJSON).

Semantics, applied in request order:

- `created` inserts the resource, `updated` changes it, `deleted` removes it
  from the snapshot. Every accepted event appends exactly one change.
- A `created` for an existing location is applied and logged as an update, an
  `updated` for an unknown location as a create; a `deleted` for an unknown
  location is accepted and logged.
- An event whose `id` was seen before (in this request or an earlier one) is
  a duplicate: counted, not applied again, so a failed request can be retried.
- `datetime` defaults to the time of receipt when left out (`null` is refused)
  and must not be earlier than the start of the set's open change list, nor
  later than the server's clock plus {settings.INGEST_CLOCK_SKEW_SECONDS} seconds
  (`INGEST_CLOCK_SKEW_SECONDS`).
- Changes are listed in the order they arrive: an event dated before the set's
  latest change (from an earlier request) is dated at its receipt, where a destination
  resuming from the newest datetime it read still finds it. Within one request, an
  event dated before an earlier event of its location is refused.
- `lastmod` must lie within the years 1 to 9999 in UTC, `datetime` from 1970 on.
- Locations, links, media types and ids must not contain characters that
  XML 1.0 forbids (control characters, lone surrogates, U+FFFE, U+FFFF); a
  link's `rel` must be printable, at most 2,048 characters; a location's `value`
  (or a link's `href`'s) at most 4,096 characters.
- A `mime` is kept as sent; documents write it as the ResourceSync schema takes it
  (`text/html; charset=utf-8` as `text/html`; one with `.` or `_`, such as
  `application/vnd.ms-excel`, is left out of the document).
"""


def api_endpoints(request: Request) -> dict[str, str]:
    """Absolute URLs of every endpoint; `{provider}` and `{set}` stand for a set's slugs."""

    def url(name: str, *args: str) -> str:
        return request.build_absolute_uri(reverse(name, args=args))

    def per_set(name: str) -> str:
        return url(f"api:{name}", "PROVIDER", "SET").replace("/PROVIDER/SET/", "/{provider}/{set}/")

    return {
        "sets": url("api:sets"),
        "events": per_set("events"),
        "resource": per_set("resource") + "?location={location} or ?uri={uri}",
        "changes": per_set("changes"),
        "schema": url("schema"),
        "docs": url("api-docs"),
        "authentication": EXPECTED_HEADER,
    }


EVENT_BODY = PolymorphicProxySerializer(
    component_name="EventBody",
    serializers=[EventSerializer, EventSerializer(many=True)],
    resource_type_field_name=None,
    many=False,
)
ERROR_RESPONSES = {
    400: OpenApiResponse(ErrorListSerializer, description="Invalid events; nothing applied."),
    401: OpenApiResponse(DetailSerializer, description="No token, or an invalid or revoked one."),
    403: OpenApiResponse(DetailSerializer, description="The token does not reach this set."),
    404: OpenApiResponse(DetailSerializer, description="No such set, or its provider is inactive."),
    413: OpenApiResponse(ErrorListSerializer, description="The body is over the size limit."),
    415: OpenApiResponse(
        DetailSerializer,
        description="Not JSON or NDJSON, or sent with a Content-Encoding (the answer "
        "carries `Accept-Encoding: identity`).",
    ),
    429: OpenApiResponse(DetailSerializer, description="Too many requests for this token."),
}
#: A read's bad query parameters, as DRF answers them: not the events' `errors` list.
QUERY_ERRORS = OpenApiResponse(
    {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
    description='Invalid query parameters, each named with its messages: `{"limit": ["..."]}`.',
)


class JsonWhateverAccepted(DefaultContentNegotiation):
    """JSON when nothing the client accepts is on offer (a browser, not logged in as staff)."""

    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except NotAcceptable:
            return renderers[0], renderers[0].media_type


class JsonOrBrowsableView(APIView):
    """JSON for clients; the browsable API as well for staff logged in to the admin."""

    renderer_classes = [JSONRenderer, BrowsableAPIRenderer]
    content_negotiation_class = JsonWhateverAccepted

    def get_renderers(self) -> list[BaseRenderer]:
        request = getattr(self.request, "_request", self.request)
        user = getattr(request, "user", None)
        if user is not None and user.is_active and user.is_staff:
            return super().get_renderers()
        return [JSONRenderer()]


#: A quoted URL in escaped JSON, with no `{` (no URI template) and no `&` (nothing escaped).
QUOTED_CONCRETE_URL = re.compile(r"&quot;(https?://[^\s{}&]+)&quot;")


class BrowsableApiRoot(BrowsableAPIRenderer):
    """The root's page: its URLs are links, its URI templates text.

    The page runs the JSON through Django's `urlize`, which linked each template
    too (`{provider}` quoted to `%7Bprovider%7D`, a URL that answers 404). Given
    escaped, urlize links nothing; so only concrete URLs get their quotes back.
    """

    def get_content(self, *args: Any, **kwargs: Any) -> SafeString:
        content = escape(super().get_content(*args, **kwargs))
        # Escaped above; the URLs put back hold no `&`, `<` or whitespace.
        return mark_safe(QUOTED_CONCRETE_URL.sub(r'"\1"', content))  # noqa: S308


class ApiRootApi(JsonOrBrowsableView):
    """`/api/v1/`: the endpoints, where the docs are, and how to authenticate."""

    permission_classes = [AllowAny]
    renderer_classes = [JSONRenderer, BrowsableApiRoot]

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        return Response(api_endpoints(request))


class ApiTokenView(JsonOrBrowsableView):
    """Every API view: token authentication, per-token throttling, JSON answers."""

    authentication_classes = [ApiTokenAuthentication, StaffSessionAuthentication]
    permission_classes = [HasApiToken]
    throttle_classes = [ApiTokenRateThrottle]


class ResourceSetView(ApiTokenView):
    """A view under `sets/<provider>/<set>/`, for tokens that reach that set."""

    permission_classes = [HasApiToken, CanReachResourceSet]

    def get_resource_set(self) -> ResourceSet:
        provider_slug, set_slug = self.kwargs["provider_slug"], self.kwargs["set_slug"]
        resource_set = resource_set_get(provider_slug=provider_slug, set_slug=set_slug)
        if resource_set is None:
            raise NotFound(f"No resource set {provider_slug}/{set_slug}.")
        self.check_object_permissions(self.request, resource_set)
        return resource_set


class ResourceSetListApi(ApiTokenView):
    """The sets a client may post to and read: its provider's, or all for staff."""

    @extend_schema(
        operation_id="sets_list",
        summary="The resource sets this token reaches",
        responses={200: ResourceSetSerializer(many=True), 401: ERROR_RESPONSES[401]},
        tags=["sets"],
    )
    def get(self, request: Request) -> Response:
        resource_sets = resource_sets_visible_to(token=request.auth)
        return Response(ResourceSetSerializer(resource_sets, many=True).data)


class EventIngestApi(ResourceSetView):
    """The harvester's write path; its browsable page states what the API docs state."""

    description = INGEST_DESCRIPTION
    parser_classes = [JSONEventsParser, NDJSONEventsParser]

    @extend_schema(
        operation_id="events_create",
        summary="Post resource events",
        description=INGEST_DESCRIPTION,
        request={"application/json": EVENT_BODY, "application/x-ndjson": EventSerializer},
        responses={200: IngestCountsSerializer, **ERROR_RESPONSES},
        examples=[
            OpenApiExample(
                "A created event",
                request_only=True,
                media_type="application/json",
                value={
                    "change": "created",
                    "location": {"type": "rel_path", "value": "reports/2024/a.pdf"},
                    "length": 8876,
                    "md5": "1e0d5cb8ef6ba40c99b14c0237be735e",
                    "mime": "application/pdf",
                    "lastmod": "2024-05-01T09:30:00Z",
                    "id": "dit-000001",
                },
            )
        ],
        tags=["events"],
    )
    def post(self, request: Request, provider_slug: str, set_slug: str) -> Response:
        resource_set = self.get_resource_set()
        items = request_events(request, self.get_parser_context(request))
        if items is None:
            raise BodyError("is empty.")
        # Parsed and validated before ingestion takes the set's write lock. Invalid
        # events, a body over the limit, chunked or cut short: exceptions.API_ERRORS.
        events = EventValidator(resource_set).validate_body(items)
        result = ingest_events(resource_set=resource_set, events=events)
        return Response(IngestCountsSerializer(result.counts()).data)


class ResourceDetailApi(ResourceSetView):
    """What the snapshot holds for one location, to check that an event landed."""

    class FilterSerializer(serializers.Serializer):
        location = serializers.CharField(
            required=False, help_text="The resolved URI, or the location value as posted."
        )
        uri = serializers.CharField(
            required=False, help_text="The resolved URI only (the `loc` in the documents)."
        )

        def validate(self, attrs: dict[str, str]) -> dict[str, str]:
            if "location" in attrs and "uri" in attrs:
                raise serializers.ValidationError({"uri": "Give location or uri, not both."})
            if not attrs:
                raise serializers.ValidationError(
                    {"location": "Give location (a URI or a posted location value) or uri."}
                )
            return attrs

    @extend_schema(
        operation_id="resource_retrieve",
        summary="The current state of one resource, by location or by URI",
        parameters=[FilterSerializer],
        responses={
            200: ResourceSerializer,
            400: QUERY_ERRORS,
            **{code: ERROR_RESPONSES[code] for code in (401, 403, 404, 429)},
        },
        tags=["reads"],
    )
    def get(self, request: Request, provider_slug: str, set_slug: str) -> Response:
        resource_set = self.get_resource_set()
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = filters.validated_data
        if "uri" in params:
            resource = resource_get_by_uri(resource_set=resource_set, uri=params["uri"])
        else:
            resource = resource_get(resource_set=resource_set, location=params["location"])
        if resource is None:
            raise NotFound("No resource at this location.")
        return Response(ResourceSerializer(resource).data)


class ChangeLogApi(ResourceSetView):
    """The change log as accepted (JSON), for clients that audit or replay it.

    Not a ResourceSync Change List: those are the XML documents under /resourcesync/.
    """

    class FilterSerializer(serializers.Serializer):
        until = serializers.DateTimeField(required=False, help_text="Inclusive upper bound.")
        cursor = ChangeCursorField(required=False, help_text="From a `next` link.")
        limit = serializers.IntegerField(
            required=False,
            min_value=1,
            max_value=CHANGES_MAX_LIMIT,
            default=CHANGES_DEFAULT_LIMIT,
        )

        def get_fields(self) -> dict[str, Any]:
            fields = super().get_fields()
            # `from` is a Python keyword, so it cannot be declared as an attribute.
            fields["from"] = serializers.DateTimeField(
                required=False, help_text="Inclusive lower bound."
            )
            return fields

    @extend_schema(
        operation_id="changes_list",
        summary="The change log, oldest first",
        description="Changes ordered by (datetime, id), paged with an opaque cursor: "
        "follow `next` until it is null.",
        parameters=[FilterSerializer],
        responses={
            200: ChangePageSerializer,
            400: QUERY_ERRORS,
            **{code: ERROR_RESPONSES[code] for code in (401, 403, 404, 429)},
        },
        tags=["reads"],
    )
    def get(self, request: Request, provider_slug: str, set_slug: str) -> Response:
        resource_set = self.get_resource_set()
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = filters.validated_data
        page = change_page(
            resource_set=resource_set,
            since=params.get("from"),
            until=params.get("until"),
            after=params.get("cursor"),
            limit=params["limit"],
        )
        next_url = None
        if page.after is not None:
            query = {
                name: request.query_params[name]
                for name in ("from", "until", "limit")
                if name in request.query_params
            }
            query["cursor"] = ChangeCursorField().to_representation(page.after)
            next_url = request.build_absolute_uri(f"{request.path}?{urlencode(query)}")
        return Response(ChangePageSerializer({"next": next_url, "results": page.changes}).data)
