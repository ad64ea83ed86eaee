"""Who may post and read: tokens, their owners, revocation, throttling."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from sources.models import ApiToken, Change, DataProvider, ResourceSet, hash_token
from tests.factories import (
    ApiTokenFactory,
    DataProviderFactory,
    ResourceSetFactory,
    UserFactory,
)

EVENT = {
    "change": "created",
    "location": {"type": "rel_path", "value": "a.txt"},
    "length": 1,
    "md5": "0cc175b9c0f1b6a831c399e269772661",
    "mime": "text/plain",
    "lastmod": "2024-05-01T10:00:00Z",
}


@pytest.fixture
def resource_set(db) -> ResourceSet:
    return ResourceSetFactory(provider__slug="acme", slug="reports")


@pytest.fixture
def token(resource_set: ResourceSet) -> ApiToken:
    return ApiTokenFactory(provider=resource_set.provider)


def post(
    client: Client, authorization: str | None, path: tuple[str, str] = ("acme", "reports")
) -> Any:
    headers = {"Authorization": authorization} if authorization is not None else {}
    return client.post(
        reverse("api:events", args=path),
        data=json.dumps(EVENT),
        content_type="application/json",
        headers=headers,
    )


def test_provider_token_posts_to_its_own_set(client, token):
    response = post(client, f"Token {token.plain_key}")

    assert response.status_code == 200
    assert Change.objects.count() == 1


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Token", "Token not-a-real-key", "Token a b", "Bearer", "Basic dXNlcjpwdw=="],
)
def test_missing_or_bad_token_is_401(client, token, authorization):
    response = post(client, authorization)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="resourcesync"'
    assert not Change.objects.exists()


def test_401_comes_before_looking_up_the_set(client, db):
    assert post(client, None, path=("acme", "no-such-set")).status_code == 401


def test_revoked_token_is_401(client, token):
    ApiToken.objects.filter(pk=token.pk).update(revoked=True)

    response = post(client, f"Token {token.plain_key}")

    assert response.status_code == 401
    assert not Change.objects.exists()


def test_token_of_another_provider_is_403(client, resource_set):
    stranger = ApiTokenFactory(provider=DataProviderFactory(slug="other"))

    response = post(client, f"Token {stranger.plain_key}")

    assert response.status_code == 403
    assert not Change.objects.exists()


def test_unknown_set_is_404_even_for_staff(client, db):
    staff = ApiTokenFactory(staff=True)

    assert post(client, f"Token {staff.plain_key}", path=("acme", "nope")).status_code == 404


def test_set_of_an_inactive_provider_is_404(client, token, resource_set):
    DataProvider.objects.filter(pk=resource_set.provider_id).update(active=False)
    staff = ApiTokenFactory(staff=True)

    # The provider's own token is refused before that (401, tests/integration/test_access.py).
    response = post(client, f"Token {staff.plain_key}")

    assert response.status_code == 404
    assert not Change.objects.exists()


def test_staff_token_reaches_every_set(client, resource_set):
    staff = ApiTokenFactory(staff=True)

    assert post(client, f"Token {staff.plain_key}").status_code == 200


def test_token_of_a_user_who_is_not_staff_reaches_nothing(client, resource_set):
    token = ApiTokenFactory(provider=None, user=UserFactory(is_staff=False))

    assert post(client, f"Token {token.plain_key}").status_code == 403


def test_token_of_an_inactive_staff_user_is_401(client, resource_set):
    token = ApiTokenFactory(staff=True)
    token.user.is_active = False
    token.user.save()

    assert post(client, f"Token {token.plain_key}").status_code == 401


def test_only_the_hash_of_a_key_is_stored(token):
    stored = ApiToken.objects.get(pk=token.pk)

    assert stored.key_hash == hash_token(token.plain_key)
    assert token.plain_key not in {stored.key_hash, stored.prefix, stored.name}


def test_last_used_at_is_written_at_most_once_a_minute(client, token):
    post(client, f"Token {token.plain_key}")
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None

    post(client, f"Token {token.plain_key}")
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first

    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    post(client, f"Token {token.plain_key}")
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first
    assert ApiToken.objects.get(pk=token.pk).last_used_at <= timezone.now()


def test_reads_need_a_token(client, resource_set):
    assert client.get(reverse("api:sets")).status_code == 401
    assert client.get(reverse("api:changes", args=("acme", "reports"))).status_code == 401


@pytest.fixture
def low_rate():
    cache.clear()
    with override_settings(
        REST_FRAMEWORK={
            "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
            "DEFAULT_THROTTLE_RATES": {"provider": "2/minute"},
        }
    ):
        yield
    cache.clear()


def test_requests_are_throttled_per_token(client, token, low_rate):
    other = ApiTokenFactory(provider=token.provider)
    authorization = f"Token {token.plain_key}"

    assert post(client, authorization).status_code == 200
    assert post(client, authorization).status_code == 200
    throttled = post(client, authorization)

    assert throttled.status_code == 429
    assert "Retry-After" in throttled
    assert post(client, f"Token {other.plain_key}").status_code == 200
