"""Settings from the environment: a value the portal cannot use stops it at start, by name.

Each case imports the settings in a fresh interpreter, as a deploy would.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

IMPORT_SETTINGS = "import resourcesync_portal.settings as s; print(s.PUBLIC_BASE_URL)"


def load_settings(
    tmp_path, code: str = IMPORT_SETTINGS, **variables: str
) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DEBUG", "SECRET_KEY", "DATABASE_URL", "PUBLIC_BASE_URL"}
    }
    env.update(DATA_DIR=str(tmp_path), **variables)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PUBLIC_BASE_URL", "portal.example.org"),  # documents would hold relative URLs
        ("PUBLIC_BASE_URL", "ftp://portal.example.org"),
        ("PUBLIC_BASE_URL", "http://portal.example.org/rs?x=1"),
        ("PUBLIC_BASE_URL", "http://portal.example.org:99999"),
        ("PUBLIC_BASE_URL", "http://portal example.org"),
        ("INGEST_BATCH_SIZE", "0"),  # every ingestion request failed
        ("INGEST_BATCH_SIZE", "many"),
        ("INGEST_MAX_BODY_BYTES", "1023"),
        ("INGEST_CLOCK_SKEW_SECONDS", "1e9"),
        ("CONN_MAX_AGE", "forever"),
        ("RESOURCESYNC_MAX_DOCUMENT_BYTES", str(8 * 1024 * 1024 - 1)),  # a large entry: no page
        ("RESOURCESYNC_MAX_DOCUMENT_BYTES", str(51 * 1024 * 1024)),  # over the sitemap limit
        ("RESOURCESYNC_DUMP_COMPRESSION", "zstd"),  # every dump run failed
        ("RESOURCESYNC_DUMP_PACKAGE_BYTES", "0"),
        ("RESOURCESYNC_REGENERATION_LEASE_SECONDS", "0"),  # every run presumed dead
        ("RESOURCESYNC_REGENERATION_LEASE_SECONDS", "nan"),
        ("RESOURCESYNC_JOURNAL_SILENCE_SECONDS", "-5"),
        ("RESOURCESYNC_JOURNAL_RETENTION_DAYS", "999999999"),  # pruning overflowed
        ("RESOURCESYNC_SUPERSEDED_GRACE_SECONDS", "-1"),
        ("RESOURCESYNC_SCAN_SECONDS", "0"),  # beat would rescan without pause
        ("API_THROTTLE_RATE", "lots"),  # every API request failed
        ("API_THROTTLE_RATE", "100/fortnight"),
        ("RESOURCESYNC_ALLOWED_CALLBACK_NETWORKS", "10.0.0.0/33"),  # every subscription failed
        ("SERVE_RESOURCE_FILES", "flase"),  # silently read as off
        ("RESOURCESYNC_STORAGE_OPTIONS", "{bucket_name: docs}"),
        ("RESOURCESYNC_STORAGE_OPTIONS", '["docs"]'),
        ("LOG_LEVEL", "VERBOSE"),
        ("RESOURCESYNC_SCAN_SETS", "acme/articles,demo"),  # told only by each scan, later
        ("RESOURCESYNC_HUB_URL", "notaurl"),  # published as the hub, notifications lost
        ("RESOURCESYNC_HUB_URL", "javascript:alert(1)"),
        ("RESOURCESYNC_HUB_URL", "https://user:secret@hub.example.org/"),  # in every Link
        ("RESOURCESYNC_HUB_URL", "https://hub.example.org/hub#top"),  # never sent to the hub
        ("RESOURCESYNC_HUB_URL", "https://hub.example.org/hub?tenant=acme#top"),
        ("RESOURCESYNC_HUB_URL", "https://hub.example.org/hub?a=%zz"),  # no URI: no valid href
        # `Link: <topic>; rel="self", <hub>; rel="hub"`: a `>` or `"` ends the hub's target
        # early and breaks the header; a non-ASCII character no header value can carry.
        ("RESOURCESYNC_HUB_URL", "https://hub.example.org/a>b"),
        ("RESOURCESYNC_HUB_URL", "https://hub.example.org/<hub>"),
        ("RESOURCESYNC_HUB_URL", 'https://hub.example.org/hub?tenant="acme"'),
        ("RESOURCESYNC_HUB_URL", "https://hub.example.org/h{u}b|x"),
        ("RESOURCESYNC_HUB_URL", "https://hub.example.org/h\u00fcb"),
        ("PUBLIC_BASE_URL", "http://portal.example.org/rs>x"),  # every topic's and file's Link
        ("PUBLIC_BASE_URL", 'http://portal.example.org/"rs"'),
        ("PUBLIC_BASE_URL", "http://portal.example.org/r\u00e9s"),
    ],
)
def test_a_value_the_portal_cannot_use_stops_it_naming_the_variable(tmp_path, name, value):
    result = load_settings(tmp_path, **{name: value})

    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("django.core.exceptions.ImproperlyConfigured: " + name), last_line


@pytest.mark.parametrize(
    ("variables", "base_url"),
    [
        ({}, "http://127.0.0.1:8000"),
        ({"PUBLIC_BASE_URL": "https://portal.example.org/rs/"}, "https://portal.example.org/rs"),
        ({"PUBLIC_BASE_URL": "http://[::1]:8080"}, "http://[::1]:8080"),
        (
            {
                "INGEST_BATCH_SIZE": "1",
                "RESOURCESYNC_DUMP_COMPRESSION": "Deflated",
                "RESOURCESYNC_REGENERATION_LEASE_SECONDS": "2.5",
                "API_THROTTLE_RATE": "3/minute",
                "RESOURCESYNC_ALLOWED_CALLBACK_NETWORKS": "127.0.0.0/8, fd00::/8",
                "SERVE_RESOURCE_FILES": "off",
                "CONN_MAX_AGE": "0",
                "LOG_LEVEL": "warn",  # logging's own alias, in any case
                "RESOURCESYNC_SCAN_SETS": "acme/articles, demo/my_set",
                "RESOURCESYNC_MAX_DOCUMENT_BYTES": str(8 * 1024 * 1024),
                "INGEST_MAX_BODY_BYTES": "1024",
                "RESOURCESYNC_SUPERSEDED_GRACE_SECONDS": str(30 * 24 * 3600),
                "RESOURCESYNC_STORAGE_OPTIONS": '{"location": "/tmp/documents"}',
                "RESOURCESYNC_HUB_URL": "https://hub.example.org/",
            },
            "http://127.0.0.1:8000",
        ),
    ],
    ids=["defaults", "https-with-a-path", "ipv6", "values-at-their-bounds"],
)
def test_usable_values_start_the_portal(tmp_path, variables, base_url):
    result = load_settings(tmp_path, **variables)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == base_url


@pytest.mark.parametrize(
    ("name", "value", "encoded"),
    [
        ("RESOURCESYNC_HUB_URL", "https://hub.example.org/a>b", "%3E"),
        ("RESOURCESYNC_HUB_URL", "https://hub.example.org/h\u00fcb", "%C3%BC"),
        ("PUBLIC_BASE_URL", 'http://portal.example.org/"rs"', "%22"),
    ],
)
def test_a_character_no_link_header_can_carry_is_named_with_its_encoding(
    tmp_path, name, value, encoded
):
    result = load_settings(tmp_path, **{name: value})

    last_line = result.stderr.strip().splitlines()[-1]
    assert f"percent-encode it as {encoded}" in last_line, last_line


def test_an_external_hub_may_have_a_query_and_is_published_as_given(tmp_path):
    """WebSub sets no rule on a hub's URL: a query is the hub's own (a tenant, a key)."""
    hub = "https://hub.example.org/websub?tenant=acme&v=2"
    code = "import resourcesync_portal.settings as s; print(s.RESOURCESYNC_NOTIFICATIONS)"
    result = load_settings(tmp_path, code, RESOURCESYNC_HUB_URL=hub)

    assert result.returncode == 0, result.stderr
    assert f"'HUB_URL': '{hub}'" in result.stdout


def test_a_hub_url_set_in_python_settings_is_checked_too(settings):
    """The namespaced dict may be set without the environment; its hub is in every Link."""
    from django.core.exceptions import ImproperlyConfigured

    from notifications.conf import notification_settings

    settings.RESOURCESYNC_NOTIFICATIONS = {"HUB_URL": 'https://hub.example.org/"hub"'}

    with pytest.raises(ImproperlyConfigured, match=r"\['HUB_URL'\].*percent-encode it as %22"):
        notification_settings()


@pytest.mark.parametrize(
    "hub",
    [
        "https://hub.example.org/a b",  # a space inside `Link: <...>`
        "ftp://hub.example.org/x",
        "https://user:secret@hub.example.org/",
        "https://hub.example.org/#top",
        "https://hub.example.org/a%zz",
    ],
)
def test_a_hub_url_set_in_python_settings_gets_every_check_the_environments_gets(settings, hub):
    from django.core.exceptions import ImproperlyConfigured

    from notifications.conf import notification_settings

    settings.RESOURCESYNC_NOTIFICATIONS = {"HUB_URL": hub}

    with pytest.raises(ImproperlyConfigured, match=r"\['HUB_URL'\]"):
        notification_settings()
