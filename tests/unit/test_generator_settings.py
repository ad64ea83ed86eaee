"""RESOURCESYNC_GENERATORS: one entry per backend, and a bad one is a configuration error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from sources.generators import get_generator
from sources.generators.database import DatabaseGenerator
from sources.generators.elasticsearch import ElasticsearchGenerator

REPO = Path(__file__).resolve().parents[2]
DATABASE = "sources.generators.database.DatabaseGenerator"
ELASTICSEARCH = "sources.generators.elasticsearch.ElasticsearchGenerator"


@pytest.mark.parametrize(
    ("entry", "cause"),
    [
        ({"BACKEND": "sources.generators.nowhere.Generator"}, "cannot be imported"),
        ({"BACKEND": "sources.generators.database.NoSuchGenerator"}, "cannot be imported"),
        ({"BACKEND": "DatabaseGenerator"}, "cannot be imported"),
        ({"BACKEND": "sources.models.ResourceSet"}, "is not a BaseGenerator subclass"),
        ({"HOSTS": ["http://es:9200"]}, "must be a dict with a BACKEND"),
        ({"BACKEND": DATABASE, "HOSTS": ["http://es:9200"]}, "has no option HOSTS"),
        ({"BACKEND": ELASTICSEARCH, "HOST": "http://es:9200"}, "has no option HOST"),
        ({"BACKEND": ELASTICSEARCH, "HOSTS": "http://es:9200"}, "HOSTS must be a list of URLs"),
        ({"BACKEND": ELASTICSEARCH, "HOSTS": []}, "HOSTS must be a list of URLs"),
        ({"BACKEND": ELASTICSEARCH, "INDEX_PREFIX": "Portal"}, "INDEX_PREFIX must be"),
        ({"BACKEND": ELASTICSEARCH, "INDEX_PREFIX": "a,b"}, "INDEX_PREFIX must be"),
        ({"BACKEND": ELASTICSEARCH, "TIMEOUT": "30"}, "TIMEOUT must be a number of seconds"),
        ({"BACKEND": ELASTICSEARCH, "OPTIONS": ["basic_auth"]}, "OPTIONS must be a dict"),
    ],
)
def test_a_bad_entry_raises_improperly_configured_naming_the_setting(settings, entry, cause):
    settings.RESOURCESYNC_GENERATORS = {"default": entry}
    with pytest.raises(ImproperlyConfigured) as raised:
        get_generator()
    message = str(raised.value)
    assert message.startswith("RESOURCESYNC_GENERATORS['default']")
    assert cause in message


def test_an_unknown_alias_is_a_configuration_error(settings):
    settings.RESOURCESYNC_GENERATORS = {"default": {"BACKEND": DATABASE}}
    with pytest.raises(ImproperlyConfigured, match=r"RESOURCESYNC_GENERATORS has no 'archive'"):
        get_generator("archive")


def test_the_elasticsearch_backend_reads_its_own_entry(settings):
    settings.RESOURCESYNC_GENERATORS = {
        "default": {
            "BACKEND": ELASTICSEARCH,
            "HOSTS": ["http://es-1:9200", "http://es-2:9200"],
            "INDEX_PREFIX": "portal-a",
            "TIMEOUT": 5,
            "OPTIONS": {"max_retries": 7},
        }
    }
    generator = get_generator()
    assert isinstance(generator, ElasticsearchGenerator)
    mirror = generator.mirror
    assert (mirror.resources_index, mirror.changes_index) == (
        "portal-a-resources",
        "portal-a-changes",
    )
    nodes = generator.client.transport.node_pool.all()
    assert sorted(node.base_url for node in nodes) == ["http://es-1:9200", "http://es-2:9200"]
    # What each request is sent with (the client keeps it unexposed).
    assert (generator.client._request_timeout, generator.client._max_retries) == (5, 7)


def test_a_changed_setting_gives_a_new_generator(settings):
    settings.RESOURCESYNC_GENERATORS = {"default": {"BACKEND": DATABASE}}
    assert isinstance(get_generator(), DatabaseGenerator)
    assert get_generator() is get_generator()
    settings.RESOURCESYNC_GENERATORS = {
        "default": {"BACKEND": ELASTICSEARCH, "INDEX_PREFIX": "other"}
    }
    assert get_generator().mirror.resources_index == "other-resources"
    # Changed in place, as a script may do: still noticed.
    settings.RESOURCESYNC_GENERATORS["default"]["INDEX_PREFIX"] = "third"
    assert get_generator().mirror.resources_index == "third-resources"


def _settings_from(environment: dict[str, str]) -> dict:
    """The generator and django-elasticsearch-dsl settings a fresh process reads."""
    script = (
        "import json; from resourcesync_portal import settings as s; "
        "print(json.dumps([s.RESOURCESYNC_GENERATORS, s.ELASTICSEARCH_DSL]))"
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("ELASTICSEARCH_URL", "ELASTICSEARCH_INDEX_PREFIX")
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**env, **environment},
        capture_output=True,
        text=True,
        check=True,
    )
    generators, dsl = json.loads(done.stdout)
    return {"generators": generators, "dsl": dsl}


def test_the_environment_fills_the_generator_entry_and_elasticsearch_dsl():
    found = _settings_from(
        {"ELASTICSEARCH_URL": "http://es:9200", "ELASTICSEARCH_INDEX_PREFIX": "portal"}
    )
    assert found["generators"] == {
        "default": {
            "BACKEND": ELASTICSEARCH,
            "HOSTS": ["http://es:9200"],
            "INDEX_PREFIX": "portal",
            "TIMEOUT": 30,
        }
    }
    assert found["dsl"] == {"default": {"hosts": ["http://es:9200"], "request_timeout": 30}}


def test_without_elasticsearch_url_the_database_generator_serves():
    found = _settings_from({})
    assert found["generators"] == {"default": {"BACKEND": DATABASE}}
