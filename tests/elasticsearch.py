"""Point the portal at the test Elasticsearch node, with empty indices per test."""

from __future__ import annotations

import pytest
from elasticsearch.dsl.connections import connections

from sources.documents import changes_index, resources_index
from sources.indexing import ensure_indices

GENERATOR = "sources.generators.elasticsearch.ElasticsearchGenerator"


@pytest.fixture
def use_elasticsearch(settings, elasticsearch_url: str):
    """Mirror into (and, with `generator`, read from) fresh test indices."""
    settings.ELASTICSEARCH_URL = elasticsearch_url
    connections.configure(default={"hosts": elasticsearch_url, "request_timeout": 30})
    for index in (resources_index, changes_index):
        index.delete(ignore_unavailable=True)
    ensure_indices()
    yield elasticsearch_url
    for index in (resources_index, changes_index):
        index.delete(ignore_unavailable=True)


def read_from_elasticsearch(settings) -> None:
    settings.RESOURCESYNC_GENERATORS = {"default": {"BACKEND": GENERATOR}}
