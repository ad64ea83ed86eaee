"""Reads: the sets a token sees, one resource's state, the change log, the API schema."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import pytest
from django.test import Client
from django.urls import reverse

from sources.models import ApiToken, ResourceSet
from tests.factories import (
    ApiTokenFactory,
    ChangeFactory,
    DataProviderFactory,
    ResourceFactory,
    ResourceSetFactory,
)

PREFIX = "https://data.example.org/reports/"
T0 = datetime(2024, 5, 1, tzinfo=UTC)


@pytest.fixture
def resource_set(db) -> ResourceSet:
    return ResourceSetFactory(provider__slug="acme", slug="reports", url_prefix=PREFIX)


@pytest.fixture
def token(resource_set: ResourceSet) -> ApiToken:
    return ApiTokenFactory(provider=resource_set.provider)


def get(client: Client, token: ApiToken, url: str, params: dict[str, Any] | None = None) -> Any:
    return client.get(url, params or {}, headers={"Authorization": f"Token {token.plain_key}"})


def set_url(name: str, provider: str = "acme", resource_set: str = "reports") -> str:
    return reverse(f"api:{name}", args=(provider, resource_set))


# --- GET /api/v1/sets/ ----------------------------------------------------------------


def test_provider_token_sees_its_own_sets(client, token, resource_set):
    ResourceSetFactory(provider=resource_set.provider, slug="images")
    ResourceSetFactory(provider__slug="other", slug="hidden")

    response = get(client, token, reverse("api:sets"))

    assert response.status_code == 200
    assert [(item["provider"], item["set"]) for item in response.json()] == [
        ("acme", "images"),
        ("acme", "reports"),
    ]
    assert response.json()[1] == {
        "provider": "acme",
        "set": "reports",
        "name": resource_set.name,
        "description": "",
        "url_prefix": PREFIX,
        "resource_root_dir": "",
        "protected": False,
        "changed_at": None,
        "accepts_changes_since": None,
    }


def test_staff_token_sees_the_sets_of_every_active_provider(client, resource_set):
    ResourceSetFactory(provider__slug="other", slug="x")
    ResourceSetFactory(provider__slug="gone", provider__active=False, slug="y")
    staff = ApiTokenFactory(staff=True)

    response = get(client, staff, reverse("api:sets"))

    assert {(item["provider"], item["set"]) for item in response.json()} == {
        ("acme", "reports"),
        ("other", "x"),
    }


# --- GET .../resources?location= -----------------------------------------------------


def test_resource_by_resolved_uri(client, token, resource_set):
    ResourceFactory(
        resource_set=resource_set,
        location_value="a b.txt",
        uri=PREFIX + "a%20b.txt",
        length=5,
        md5="0cc175b9c0f1b6a831c399e269772661",
        mime="text/plain",
        lastmod=T0,
        timestamp=T0,
        ln=[
            {
                "rel": "describedby",
                "href": {"type": "rel_path", "value": "a.xml"},
                "mime": "application/xml",
                "uri": PREFIX + "a.xml",
            }
        ],
    )

    response = get(client, token, set_url("resource"), {"location": PREFIX + "a%20b.txt"})

    assert response.status_code == 200
    assert response.json() == {
        "location": {"type": "rel_path", "value": "a b.txt"},
        "uri": PREFIX + "a%20b.txt",
        "length": 5,
        "md5": "0cc175b9c0f1b6a831c399e269772661",
        "sha256": "",
        "mime": "text/plain",
        "lastmod": "2024-05-01T00:00:00Z",
        "ln": [
            {
                "rel": "describedby",
                "href": {"type": "rel_path", "value": "a.xml"},
                "mime": "application/xml",
                "uri": PREFIX + "a.xml",
            }
        ],
        "timestamp": "2024-05-01T00:00:00Z",
    }


def test_resource_by_posted_location_value(client, token, resource_set):
    ResourceFactory(
        resource_set=resource_set, location_value="docs/a.txt", uri=PREFIX + "docs/a.txt"
    )

    response = get(client, token, set_url("resource"), {"location": "docs/a.txt"})

    assert response.status_code == 200
    assert response.json()["uri"] == PREFIX + "docs/a.txt"


def test_unknown_resource_is_404(client, token, resource_set):
    ResourceFactory(resource_set=resource_set, location_value="a.txt", uri=PREFIX + "a.txt")

    response = get(client, token, set_url("resource"), {"location": "b.txt"})

    assert response.status_code == 404


def test_resource_of_another_set_is_not_found(client, token, resource_set):
    other = ResourceSetFactory(provider=resource_set.provider, slug="images")
    ResourceFactory(resource_set=other, location_value="a.txt")

    assert get(client, token, set_url("resource"), {"location": "a.txt"}).status_code == 404


def test_resource_needs_a_location(client, token):
    response = get(client, token, set_url("resource"))

    assert response.status_code == 400
    assert "location" in response.json()


# --- GET .../changes -------------------------------------------------------------------


def changes_at(resource_set: ResourceSet, *moments: datetime) -> list[int]:
    return [
        ChangeFactory(resource_set=resource_set, location_value=f"f{n}.txt", datetime=moment).pk
        for n, moment in enumerate(moments)
    ]


def uris(response: Any) -> list[str]:
    return [item["uri"] for item in response.json()["results"]]


def test_changes_in_datetime_then_id_order(client, token, resource_set):
    changes_at(resource_set, T0 + timedelta(hours=2), T0, T0 + timedelta(hours=1), T0)

    response = get(client, token, set_url("changes"))

    assert response.status_code == 200
    assert uris(response) == [PREFIX + f"f{n}.txt" for n in (1, 3, 2, 0)]
    assert response.json()["next"] is None


def test_change_shape(client, token, resource_set):
    ChangeFactory(
        resource_set=resource_set,
        change="deleted",
        location_value="gone.txt",
        length=None,
        md5="",
        mime="",
        lastmod=None,
        datetime=T0,
        timestamp=T0 + timedelta(seconds=1),
        event_id="e-7",
    )

    (item,) = get(client, token, set_url("changes")).json()["results"]

    assert item == {
        "change": "deleted",
        "location": {"type": "rel_path", "value": "gone.txt"},
        "uri": PREFIX + "gone.txt",
        "length": None,
        "md5": "",
        "sha256": "",
        "mime": "",
        "lastmod": None,
        "ln": [],
        "datetime": "2024-05-01T00:00:00Z",
        "timestamp": "2024-05-01T00:00:01Z",
        "id": "e-7",
    }


def test_next_links_page_through_every_change_once(client, token, resource_set):
    # Equal datetimes across a page boundary: the id breaks the tie.
    changes_at(resource_set, *([T0] * 5 + [T0 + timedelta(minutes=1)] * 2))
    seen: list[str] = []

    response = get(client, token, set_url("changes"), {"limit": 3})
    pages = 1
    while response.json()["next"]:
        seen += uris(response)
        assert response.json()["next"].startswith("http://testserver/api/v1/sets/acme/reports/")
        response = client.get(
            response.json()["next"], headers={"Authorization": f"Token {token.plain_key}"}
        )
        pages += 1
    seen += uris(response)

    assert pages == 3
    assert seen == [PREFIX + f"f{n}.txt" for n in range(7)]


def test_from_and_until_are_inclusive_and_kept_in_next_links(client, token, resource_set):
    changes_at(resource_set, *(T0 + timedelta(hours=hour) for hour in range(6)))
    params = {"from": "2024-05-01T01:00:00Z", "until": "2024-05-01T04:00:00Z", "limit": 2}

    first = get(client, token, set_url("changes"), params)
    second = client.get(first.json()["next"], headers={"Authorization": f"Token {token.plain_key}"})

    assert uris(first) == [PREFIX + "f1.txt", PREFIX + "f2.txt"]
    assert uris(second) == [PREFIX + "f3.txt", PREFIX + "f4.txt"]
    assert second.json()["next"] is None


def test_limit_has_a_maximum(client, token):
    response = get(client, token, set_url("changes"), {"limit": 1001})

    assert response.status_code == 400
    assert "limit" in response.json()


def cursor_of(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "MjAyNHwx",
        "bm90LWEtZGF0ZXwx",
        # Valid shapes whose instant is outside what a UTC datetime holds, or whose id
        # is outside a database key: a 500 before.
        cursor_of("9999-12-31T23:59:59-12:00|1"),
        cursor_of("0001-01-01T00:00:00+14:00|1"),
        cursor_of("2024-05-01T00:00:00+00:00|" + "9" * 30),
        cursor_of("2024-05-01T00:00:00+00:00|-1"),
    ],
)
def test_bad_cursor_is_400(client, token, cursor):
    response = get(client, token, set_url("changes"), {"cursor": cursor})

    assert response.status_code == 400
    assert "cursor" in response.json()


def test_bad_from_is_400(client, token):
    response = get(client, token, set_url("changes"), {"from": "yesterday"})

    assert response.status_code == 400
    assert "from" in response.json()


def test_changes_of_an_unknown_set_are_404(client, token):
    assert get(client, token, set_url("changes", resource_set="nope")).status_code == 404


def test_reads_need_a_token_of_the_provider(client, resource_set):
    stranger = ApiTokenFactory(provider=DataProviderFactory())

    assert get(client, stranger, set_url("changes")).status_code == 403
    assert get(client, stranger, set_url("resource"), {"location": "a"}).status_code == 403


# --- Schema and docs -----------------------------------------------------------------


def test_openapi_schema_describes_the_api(client, db):
    response = client.get(reverse("schema"), HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    schema = response.json()
    paths = schema["paths"]
    events = paths["/api/v1/sets/{provider_slug}/{set_slug}/events"]["post"]
    assert set(events["requestBody"]["content"]) == {"application/json", "application/x-ndjson"}
    assert {"200", "400", "401", "403", "404", "413", "415"} <= set(events["responses"])
    assert "all or nothing" in events["description"]
    assert "/api/v1/sets/" in paths
    assert "get" in paths["/api/v1/sets/{provider_slug}/{set_slug}/changes"]
    assert "get" in paths["/api/v1/sets/{provider_slug}/{set_slug}/resources"]
    event_schema = schema["components"]["schemas"]["Event"]
    assert set(event_schema["properties"]) >= {"change", "location", "md5", "ln", "datetime", "id"}
    assert schema["components"]["securitySchemes"]["ApiToken"]["name"] == "Authorization"


def test_openapi_schema_generates_without_warnings(db, tmp_path):
    from django.core.management import call_command

    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml")
    )

    assert (
        "/api/v1/sets/{provider_slug}/{set_slug}/events" in (tmp_path / "schema.yaml").read_text()
    )


def test_api_docs_page_points_at_the_schema(client, db):
    response = client.get(reverse("api-docs"))

    assert response.status_code == 200
    assert reverse("schema").encode() in response.content
    # Served from the sidecar package: the docs work without internet access.
    assert b"/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in (
        response.content
    )


def test_api_docs_page_answers_options(client, db):
    # DRF answered OPTIONS with its metadata, which the docs' HTML renderer has no template
    # for: a 500 (found by the input probe).
    response = client.options(reverse("api-docs"))

    assert response.status_code == 200
    assert {"GET", "HEAD", "OPTIONS"} <= {name.strip() for name in response["Allow"].split(",")}


@pytest.mark.parametrize(
    ("name", "path", "params"),
    [
        ("changes", "changes", {"limit": 1001}),
        ("changes", "changes", {"from": "yesterday"}),
        ("resource", "resources", {}),
        ("resource", "resources", {"uri": "a", "location": "b"}),
    ],
)
def test_the_schema_describes_the_400_of_a_bad_query(client, token, name, path, params):
    # The schema gave the reads' 400 the events' `{"errors": [...]}` shape, or none at all,
    # where DRF answers `{"<parameter>": ["<message>", ...]}` (found by schemathesis).
    schema = client.get(reverse("schema"), HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = schema["paths"][f"/api/v1/sets/{{provider_slug}}/{{set_slug}}/{path}"]["get"]
    documented = operation["responses"]["400"]["content"]["application/json"]

    response = get(client, token, set_url(name), params)

    assert response.status_code == 400
    jsonschema.validate(response.json(), {**documented["schema"], **schema})
