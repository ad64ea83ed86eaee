"""A document GET answers exactly as before while skipping work it never needed.

Serving a stored page is the portal's hot path (bench item 4, gunicorn
alone): the message storage is no longer built for it, the lookup takes
named parameters. The answers, the
token checks and the admin's messages stay as they were.
"""

from __future__ import annotations

import pytest
from django.contrib.messages.storage.fallback import FallbackStorage
from django.urls import reverse

from sitemaps.document_lookup import find_document
from sitemaps.models import ResourceListPage
from sources.models import ApiToken

from ..support import created, make_set, store_documents_in

pytestmark = pytest.mark.django_db
PAGE = "/resourcesync/acme/articles/resourcelist-1.xml"
#: Every header a public page is sent with (Django's test client adds none of its own).
PAGE_HEADERS = {
    "Content-Type",
    "Content-Length",
    "Content-Disposition",
    "ETag",
    "Last-Modified",
    "Cache-Control",
    "Vary",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "Referrer-Policy",
    "Cross-Origin-Opener-Policy",
}


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")
    settings.SECURE_CONTENT_TYPE_NOSNIFF = True  # production's value (DEBUG off)


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_a_public_page_sends_the_same_headers(client, encoding):
    created(make_set(), 3)
    response = client.get(PAGE, headers={"Accept-Encoding": encoding})
    assert response.status_code == 200
    gzipped = encoding == "gzip"
    expected = PAGE_HEADERS | ({"Content-Encoding"} if gzipped else set())
    assert set(response.headers) == expected
    assert response["Content-Type"] == "application/xml"
    assert response["Cache-Control"] == "public, max-age=60"
    assert response["Vary"] == "Accept-Encoding, Authorization"
    assert response["ETag"].endswith('-gz"') == gzipped
    assert int(response["Content-Length"]) == len(b"".join(response.streaming_content))
    assert not response.cookies  # no session, CSRF or messages cookie


def test_a_document_get_builds_no_message_storage(client, monkeypatch):
    created(make_set(), 1)
    built = []
    init = FallbackStorage.__init__

    def counting_init(self, *args, **kwargs):
        built.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(FallbackStorage, "__init__", counting_init)
    assert client.get(PAGE).status_code == 200
    assert built == []


def test_admin_messages_still_reach_the_next_page(admin_client):
    resource_set = make_set()
    created(resource_set, 1)
    action = reverse("admin:sources_resourceset_regenerate", args=[resource_set.pk])
    response = admin_client.post(action, {"full": "0"}, follow=True)
    assert response.status_code == 200
    assert "Regenerated acme/articles" in response.content.decode()
    # Shown once: the page after it has no message left.
    again = admin_client.get(response.request["PATH_INFO"])
    assert "Regenerated acme/articles" not in again.content.decode()


def test_a_protected_page_still_needs_its_token(client):
    resource_set = make_set(protected=True)
    created(resource_set, 1)
    other = make_set("other", "open")
    _, key = ApiToken.issue(provider=resource_set.provider)
    _, foreign = ApiToken.issue(provider=other.provider)
    for encoding in ("identity", "gzip"):
        headers = {"Accept-Encoding": encoding}
        assert client.get(PAGE, headers=headers).status_code == 401
        refused = client.get(PAGE, headers={**headers, "Authorization": f"Bearer {foreign}"})
        assert refused.status_code == 403
        allowed = client.get(PAGE, headers={**headers, "Authorization": f"Bearer {key}"})
        assert allowed.status_code == 200
        assert allowed["Cache-Control"] == "private, max-age=60"


def find_page() -> ResourceListPage | None:
    return find_document(
        ResourceListPage, provider="acme", set_slug="articles", where={"number": 1}
    )


def test_looked_up_instances_are_saved_rows_with_their_relations_cached(
    django_assert_num_queries,
):
    resource_set = make_set()
    created(resource_set, 1)
    with django_assert_num_queries(1):
        found = find_page()
        assert found is not None
        assert found.resource_set.provider.slug == "acme"
        assert found.resource_set.capabilities.resource_set is found.resource_set
    assert found._state.adding is False and found._state.db == "default"
    assert found.resource_set_id == resource_set.pk
    found.save(update_fields=["size"])  # an UPDATE of its row, not an INSERT
    assert ResourceListPage.objects.count() == 1
