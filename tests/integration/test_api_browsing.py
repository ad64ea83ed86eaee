"""The API tells what it offers: its root, local docs, the browsable API for staff, honest auth."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import ApiTokenFactory, ResourceFactory, ResourceSetFactory

pytestmark = pytest.mark.django_db
PREFIX = "https://data.example.org/reports/"


def test_the_api_root_lists_its_endpoints_without_a_token(client):
    response = client.get("/api/v1/")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    endpoints = response.json()
    assert endpoints["sets"] == "http://testserver/api/v1/sets/"
    assert endpoints["events"] == "http://testserver/api/v1/sets/{provider}/{set}/events"
    assert endpoints["changes"].endswith("/sets/{provider}/{set}/changes")
    assert "?uri={uri}" in endpoints["resource"]
    assert {"schema", "docs"} <= set(endpoints)
    assert "Authorization: Bearer <key>" in endpoints["authentication"]


def test_the_api_docs_load_nothing_from_outside_the_portal(client):
    """ReDoc fetched Google Fonts and Redocly's logo (offline: errors in the console);
    its bundle fetches the logo whatever the options, so the portal offers Swagger UI alone."""
    landing = client.get("/").content.decode()
    root = client.get("/api/v1/").json()
    docs = [path for path in re.findall(r'href="(/api/[^"]*)"', landing) if path != "/api/v1/"]
    for path in docs:
        page = client.get(path)
        assert page.status_code == 200, path
        script = client.get(path, {"script": ""}).content if b"?script" in page.content else b""
        hosts = re.findall(rb"https?://([^/\"'\s]+)", page.content + script)
        assert set(hosts) <= {b"testserver"}, (path, set(hosts))
    assert "/api/docs/" in docs and "redoc" not in landing.lower() and "redoc" not in root
    assert client.get("/api/redoc/").status_code == 404


def test_staff_logged_in_to_the_admin_browse_the_api(admin_client, django_user_model):
    ResourceSetFactory(provider__slug="acme", slug="reports")
    page = admin_client.get(reverse("api:sets"), headers={"Accept": "text/html"})
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    assert b"Django REST framework" in page.content and b"reports" in page.content
    as_json = admin_client.get(reverse("api:sets"))
    assert as_json["Content-Type"] == "application/json" and as_json.json()[0]["set"] == "reports"

    # Anyone else gets JSON, and needs a token.
    visitor = Client()
    for user in (None, django_user_model.objects.create_user("visitor", password="pw-12345678")):
        if user is not None:
            visitor.force_login(user)
        refused = visitor.get(reverse("api:sets"), headers={"Accept": "text/html"})
        assert refused.status_code == 401 and refused["Content-Type"] == "application/json"


def test_the_browsable_root_links_its_urls_and_leaves_its_uri_templates_as_text(admin_client):
    """Linked, `{provider}` became `%7Bprovider%7D`: a link that answered 404."""
    page = admin_client.get("/api/v1/", headers={"Accept": "text/html"}).content.decode()
    assert "%7B" not in page
    assert "http://testserver/api/v1/sets/{provider}/{set}/events" in page
    assert '<a href="http://testserver/api/v1/sets/"' in page
    assert '<a href="http://testserver/api/docs/"' in page


def test_the_browsable_event_ingest_page_states_the_semantics(admin_client):
    """It said "see INGEST_DESCRIPTION", a constant in the code no operator can read."""
    ResourceSetFactory(provider__slug="acme", slug="reports")
    url = reverse("api:events", args=("acme", "reports"))
    page = admin_client.get(url, headers={"Accept": "text/html"}).content.decode()
    assert "INGEST_DESCRIPTION" not in page
    assert "A request is all or nothing" in page and "application/x-ndjson" in page


def test_the_browsable_pages_render_their_description_as_markdown(admin_client):
    """It showed the Markdown as typed (backticks, `- ` bullets, hard-wrapped lines)."""
    ResourceSetFactory(provider__slug="acme", slug="reports")
    url = reverse("api:events", args=("acme", "reports"))
    page = admin_client.get(url, headers={"Accept": "text/html"}).content.decode()
    assert "<code>application/x-ndjson</code>" in page and "`application/x-ndjson`" not in page
    assert "<li><code>created</code> inserts the resource" in page
    sets = admin_client.get(reverse("api:sets"), headers={"Accept": "text/html"})
    assert "<p>The sets a client may post to and read" in sets.content.decode()


def test_a_staff_session_writes_only_with_its_csrf_token(admin_user):
    ResourceSetFactory(provider__slug="acme", slug="reports")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(admin_user)
    url = reverse("api:events", args=("acme", "reports"))
    response = browser.post(url, "[]", content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]


@pytest.fixture
def reports():
    resource_set = ResourceSetFactory(provider__slug="acme", slug="reports", url_prefix=PREFIX)
    ResourceFactory(
        resource_set=resource_set, location_value="docs/a.txt", uri=PREFIX + "docs/a.txt"
    )
    return resource_set, ApiTokenFactory(provider=resource_set.provider)


def find(client, token, **params):
    url = reverse("api:resource", args=("acme", "reports"))
    return client.get(url, params, headers={"Authorization": f"Bearer {token.plain_key}"})


def test_a_resource_is_found_by_its_uri(client, reports):
    _, token = reports
    found = find(client, token, uri=PREFIX + "docs/a.txt")
    assert found.status_code == 200 and found.json()["location"]["value"] == "docs/a.txt"
    # `uri` is the resolved URI only, never a posted location value.
    assert find(client, token, uri="docs/a.txt").status_code == 404
    assert find(client, token, location="docs/a.txt").status_code == 200


def test_uri_and_location_are_one_or_the_other(client, reports):
    _, token = reports
    both = find(client, token, uri=PREFIX + "docs/a.txt", location="docs/a.txt")
    assert both.status_code == 400 and "uri" in both.json()
    neither = find(client, token)
    assert neither.status_code == 400 and "location" in neither.json()


def test_authorize_offers_the_two_token_headers_and_nothing_else(client):
    schema = client.get(reverse("schema"), headers={"Accept": "application/vnd.oai.openapi+json"})
    document = schema.json()
    schemes = document["components"]["securitySchemes"]
    assert set(schemes) == {"BearerToken", "ApiToken"}
    assert (schemes["BearerToken"]["type"], schemes["BearerToken"]["scheme"]) == ("http", "bearer")
    assert (schemes["ApiToken"]["in"], schemes["ApiToken"]["name"]) == ("header", "Authorization")
    assert "Token <key>" in schemes["ApiToken"]["description"]
    assert "/api/schema/" not in document["paths"]
    for operations in document["paths"].values():
        for operation in operations.values():
            assert operation["security"] == [{"BearerToken": []}, {"ApiToken": []}]
    parameters = document["paths"]["/api/v1/sets/{provider_slug}/{set_slug}/resources"]["get"][
        "parameters"
    ]
    assert {"location", "uri"} <= {parameter["name"] for parameter in parameters}
