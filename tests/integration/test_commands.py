"""Scripted set-up: create_resource_set and create_api_token."""

from __future__ import annotations

import logging
import socket
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sitemaps.descriptions import missing_documents
from sources.models import ApiToken, DataProvider, ResourceSet, hash_token
from tests.conftest import ELASTICSEARCH_GENERATOR
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


# --- With Elasticsearch down ----------------------------------------------------------


@pytest.fixture
def elasticsearch_down(settings) -> str:
    """The Elasticsearch generator pointed at a port nothing listens on; yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    settings.RESOURCESYNC_GENERATORS = {
        "default": {"BACKEND": ELASTICSEARCH_GENERATOR, "HOSTS": [url], "TIMEOUT": 2}
    }
    return url


def logged_trouble(caplog) -> list[str]:
    """Tracebacks and errors a shell would show besides the command's own line (the
    client's one warning that it put the node on a timeout is fair)."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.ERROR or record.exc_info
    ]


def test_create_resource_set_with_elasticsearch_down_says_so_and_saves_nothing(
    elasticsearch_down, caplog
):
    """Tracebacks of every retry were printed, and the command said "Created" and exited 0
    although the set had no document."""
    with pytest.raises(CommandError) as raised:
        run("create_resource_set", "acme", "reports", "--url-prefix", "https://a.example.org/")

    message = str(raised.value)
    assert "\n" not in message
    assert f"Elasticsearch at {elasticsearch_down}" in message
    assert "nothing was saved; run this again once it answers" in message
    assert not ResourceSet.objects.exists()
    assert logged_trouble(caplog) == []


def test_regenerate_with_elasticsearch_down_says_so_in_one_line(elasticsearch_down, caplog):
    ResourceSet.objects.create(
        provider=DataProviderFactory(slug="acme"),
        slug="reports",
        name="Reports",
        url_prefix="https://a.example.org/",
    )

    with pytest.raises(CommandError) as raised:
        run("regenerate", "acme/reports")

    message = str(raised.value)
    assert "\n" not in message
    assert f"Elasticsearch at {elasticsearch_down}" in message
    assert "no set was regenerated" in message
    assert logged_trouble(caplog) == []


def test_regenerate_once_elasticsearch_answers_again_writes_the_set(use_elasticsearch):
    """What the lines above advise: on a cluster that never had the indices (down since
    the start), `regenerate` failed with NotFoundError; it indexes first, as a new set does."""
    resource_set = ResourceSet.objects.create(
        provider=DataProviderFactory(slug="acme"),
        slug="reports",
        name="Reports",
        url_prefix="https://a.example.org/",
    )
    use_elasticsearch.mirror.delete_indices()

    out, _ = run("regenerate", "acme/reports")

    assert "acme/reports: rewrote" in out
    assert not missing_documents(resource_set)


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
