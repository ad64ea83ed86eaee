"""One token check for the API, the documents and /files/ (issues 10, 11 and 12)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import resolve, reverse

from sources.models import ApiToken, DataProvider, ResourceSet
from tests.factories import UserFactory

from ..support import created, make_set, store_documents_in

pytestmark = pytest.mark.django_db

DOCUMENT = "/resourcesync/acme/private/resourcelist.xml"
FILE = "/files/acme/private/a.txt"
API = "/api/v1/sets/acme/private/changes"
SOURCE_DESCRIPTION = "/.well-known/resourcesync"
CHALLENGE = 'Bearer realm="resourcesync"'


@pytest.fixture
def protected(settings, tmp_path) -> ResourceSet:
    """A protected set with a generated Resource List and a file under its root."""
    store_documents_in(settings, tmp_path / "documents")
    root = tmp_path / "files"
    root.mkdir()
    (root / "a.txt").write_text("a")
    resource_set = make_set("acme", "private", protected=True)
    ResourceSet.objects.filter(pk=resource_set.pk).update(resource_root_dir=str(root))
    resource_set.refresh_from_db()
    created(resource_set, 1)
    make_set("other", "open")
    return resource_set


def key_of(**owner) -> str:
    return ApiToken.issue(**owner)[1]


def staff_key(*, active: bool = True) -> str:
    user = UserFactory(username="staff", is_staff=True, is_active=active)
    return key_of(user=user)


def listed_sets(client: Client, **headers) -> int:
    return client.get(SOURCE_DESCRIPTION, headers=headers).content.count(b"capabilitylist.xml")


# --- Issue 11: a deactivated staff user's token reaches nothing ---------------------------


@pytest.mark.parametrize("path", [DOCUMENT, FILE, API, SOURCE_DESCRIPTION])
def test_token_of_a_deactivated_staff_user_is_401_everywhere(client, protected, path):
    key = staff_key(active=False)

    response = client.get(path, headers={"Authorization": f"Bearer {key}"})

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == CHALLENGE


def test_token_of_an_active_staff_user_reads_and_lists_protected_sets(client, protected):
    authorization = {"Authorization": f"Bearer {staff_key()}"}

    for path in (DOCUMENT, FILE, API):
        assert client.get(path, headers=authorization).status_code == 200
    assert listed_sets(client, **authorization) == 2
    assert listed_sets(client) == 1


# Its sets' documents and files are 404 to everyone: they do not exist while it is inactive.
@pytest.mark.parametrize("path", [SOURCE_DESCRIPTION, API])
def test_token_of_an_inactive_provider_is_401(client, protected, path):
    key = key_of(provider=protected.provider)
    DataProvider.objects.filter(pk=protected.provider_id).update(active=False)

    response = client.get(path, headers={"Authorization": f"Bearer {key}"})

    assert response.status_code == 401
    assert "provider is inactive" in response.content.decode()


# --- Every 401 carries WWW-Authenticate and names the header ----------------------------


@pytest.mark.parametrize("path", [DOCUMENT, FILE, API])
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic dXNlcjpwdw=="}],
    ids=["none", "unknown-key", "other-scheme"],
)
def test_every_401_carries_the_challenge_and_names_the_header(client, protected, path, headers):
    response = client.get(path, headers=headers)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == CHALLENGE
    if not headers:
        body = response.content.decode()
        assert "Authorization: Bearer <key>" in body and "Token <key>" in body


def test_unknown_token_on_the_source_description_is_401_with_the_challenge(client, protected):
    response = client.get(SOURCE_DESCRIPTION, headers={"Authorization": "Token nope"})

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == CHALLENGE


def test_foreign_token_is_403_everywhere(client, protected):
    key = key_of(provider=DataProvider.objects.get(slug="other"))

    for path in (DOCUMENT, FILE, API):
        assert client.get(path, headers={"Authorization": f"Token {key}"}).status_code == 403


# --- Issue 12: Bearer and Token both work everywhere ------------------------------------


@pytest.mark.parametrize("scheme", ["Bearer", "Token", "bearer", "token"])
@pytest.mark.parametrize("path", [DOCUMENT, FILE, API])
def test_both_schemes_are_accepted_everywhere(client, protected, scheme, path):
    key = key_of(provider=protected.provider)

    response = client.get(path, headers={"Authorization": f"{scheme} {key}"})

    assert response.status_code == 200


@pytest.mark.parametrize("scheme", ["Bearer", "Token"])
def test_both_schemes_list_protected_sets_in_the_source_description(client, protected, scheme):
    key = key_of(provider=protected.provider)

    assert listed_sets(client, Authorization=f"{scheme} {key}") == 2


def test_api_posts_with_a_bearer_token(client, protected):
    key = key_of(provider=protected.provider)

    response = client.post(
        reverse("api:events", args=("acme", "private")),
        data='{"change": "deleted", "location": {"type": "rel_path", "value": "x.txt"}}',
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )

    assert response.status_code == 200, response.content


# --- Issue 10: the JSON change log is not called a Change List --------------------------


def test_the_change_log_view_keeps_its_url():
    from sources.api.views import ChangeLogApi

    match = resolve(reverse("api:changes", args=("acme", "private")))

    assert match.func.view_class is ChangeLogApi


# --- Rate limits (the cross-process count: tests/integration/test_deployment.py) ---------


def test_an_unavailable_cache_does_not_refuse_requests(client, protected, monkeypatch):
    from django.core.cache import cache
    from django.db import OperationalError

    def locked(*args, **kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(cache, "get", locked)
    key = key_of(provider=protected.provider)

    assert client.get(API, headers={"Authorization": f"Token {key}"}).status_code == 200


def test_issued_keys_never_start_with_a_dash():
    """A key starting with '-' reads as an option to every CLI (resync-sync --access-token)."""
    provider = DataProvider.objects.create(slug="dash", name="Dash")
    keys = [key_of(provider=provider) for _ in range(1000)]
    assert not [key for key in keys if key.startswith("-")]


# --- /files/: a file swapped under the request ---------------------------------------------


def test_a_file_removed_while_it_is_looked_up_is_never_a_500(client, protected, monkeypatch):
    """It was checked, then opened: removed in between (a provider's sync replacing it),
    the open failed as a 500; a FIFO put there would have held the worker for good."""
    import mimetypes
    import os

    from sources import views

    guess = mimetypes.guess_type

    def removed_meanwhile(path, *args, **kwargs):
        os.remove(path)
        return guess(path, *args, **kwargs)

    monkeypatch.setattr(views.mimetypes, "guess_type", removed_meanwhile)
    response = client.get(FILE, headers={"Authorization": f"Bearer {staff_key()}"})

    assert response.status_code in (200, 404)


def test_a_file_is_sent_inline_under_its_own_name(client, protected):
    response = client.get(FILE, headers={"Authorization": f"Bearer {staff_key()}"})

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'inline; filename="a.txt"'
    assert b"".join(response.streaming_content) == b"a"
