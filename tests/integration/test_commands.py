"""Scripted set-up: create_resource_set and create_api_token."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sources.models import ApiToken, DataProvider, ResourceSet, hash_token
from tests.factories import DataProviderFactory, UserFactory

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_resource_set_creates_the_provider_too():
    out, _ = run(
        "create_resource_set",
        "acme",
        "reports",
        "--url-prefix",
        "https://data.example.org/reports/",
        "--resource-root",
        "/srv/data/reports",
        "--protected",
        "--name",
        "Annual reports",
    )

    resource_set = ResourceSet.objects.get()
    assert resource_set.provider.slug == "acme"
    assert (
        resource_set.slug,
        resource_set.name,
        resource_set.url_prefix,
        resource_set.resource_root_dir,
        resource_set.protected,
    ) == (
        "reports",
        "Annual reports",
        "https://data.example.org/reports/",
        "/srv/data/reports",
        True,
    )
    assert "Created resource set acme/reports." in out


def test_create_resource_set_again_updates_only_what_is_given():
    run(
        "create_resource_set",
        "acme",
        "reports",
        "--url-prefix",
        "https://a.example.org/",
        "--protected",
        "--name",
        "R",
    )

    out, _ = run("create_resource_set", "acme", "reports", "--url-prefix", "https://b.example.org/")

    resource_set = ResourceSet.objects.get()
    assert (resource_set.url_prefix, resource_set.protected, resource_set.name) == (
        "https://b.example.org/",
        True,
        "R",
    )
    assert DataProvider.objects.count() == 1
    assert "Updated resource set acme/reports." in out


def test_no_protected_makes_a_set_public():
    run(
        "create_resource_set",
        "acme",
        "reports",
        "--url-prefix",
        "https://a.example.org/",
        "--protected",
    )
    run(
        "create_resource_set",
        "acme",
        "reports",
        "--url-prefix",
        "https://a.example.org/",
        "--no-protected",
    )

    assert ResourceSet.objects.get().protected is False


def test_create_resource_set_uses_an_existing_provider():
    provider = DataProviderFactory(slug="acme", name="ACME Corp")

    run("create_resource_set", "acme", "reports", "--url-prefix", "https://a.example.org/")

    assert ResourceSet.objects.get().provider == provider


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url-prefix", "ftp://a.example.org/"], "http or https"),
        (["--url-prefix", "not a url"], "http or https"),
        (["--url-prefix", "https://a.example.org/", "--resource-root", "relative/dir"], "absolute"),
        (["--url-prefix", "https://a.example.org/<x>/"], "url_prefix: .*percent-encode it as %3C"),
    ],
)
def test_create_resource_set_refuses_bad_options(args, message):
    with pytest.raises(CommandError, match=message):
        run("create_resource_set", "acme", "reports", *args)

    assert not ResourceSet.objects.exists()
    assert not DataProvider.objects.exists()


def test_create_resource_set_refuses_a_bad_slug():
    with pytest.raises(CommandError, match="slug"):
        run("create_resource_set", "acme", "not a slug", "--url-prefix", "https://a.example.org/")

    assert not DataProvider.objects.exists()


def test_create_api_token_prints_a_key_stored_only_as_hash():
    provider = DataProviderFactory(slug="acme")

    out, err = run("create_api_token", "acme", "--name", "harvester")

    key = out.strip()
    token = ApiToken.objects.get()
    assert token.provider == provider
    assert token.name == "harvester"
    assert token.key_hash == hash_token(key)
    assert key not in err
    assert "shown only once" in err


def test_create_api_token_for_a_staff_user():
    user = UserFactory(username="ops", is_staff=True)

    out, _ = run("create_api_token", "--staff-user", "ops")

    token = ApiToken.objects.get(key_hash=hash_token(out.strip()))
    assert (token.user, token.provider, token.is_staff) == (user, None, True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nobody"], "No provider"),
        (["--staff-user", "nobody"], "No staff user"),
        ([], "either a provider"),
        (["acme", "--staff-user", "ops"], "either a provider"),
    ],
)
def test_create_api_token_refuses(args, message):
    DataProviderFactory(slug="acme")
    UserFactory(username="ops", is_staff=True)

    with pytest.raises(CommandError, match=message):
        run("create_api_token", *args)

    assert not ApiToken.objects.exists()


def test_create_api_token_refuses_a_user_who_is_not_staff():
    UserFactory(username="bob", is_staff=False)

    with pytest.raises(CommandError, match="No staff user"):
        run("create_api_token", "--staff-user", "bob")
