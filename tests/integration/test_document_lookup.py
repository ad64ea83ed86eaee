"""The served document's lookup gives what the ORM's select_related gives, in one query."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sitemaps.document_lookup import find_document
from sitemaps.models import ChangeListPage, IndexDocument, ResourceListPage
from sources.models import CapabilitySettings, DataProvider

from ..support import created, make_set, store_documents_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def fields(instance) -> dict:
    return {k: v for k, v in vars(instance).items() if not k.startswith("_")}


def test_the_same_instances_as_select_related(django_assert_num_queries):
    resource_set = make_set(entries_per_document=2)
    created(resource_set, 5)
    expected = ResourceListPage.objects.select_related(
        "resource_set__provider", "resource_set__capability_settings"
    ).get(number=2)
    with django_assert_num_queries(1):
        found = find_document(
            ResourceListPage, provider="acme", set_slug="articles", where={"number": 2}
        )
        assert found is not None
        assert fields(found) == fields(expected)
        assert fields(found.resource_set) == fields(expected.resource_set)
        assert fields(found.resource_set.provider) == fields(expected.resource_set.provider)
        assert fields(found.resource_set.capabilities) == fields(expected.resource_set.capabilities)
    assert found.generated_at is not None and found.generated_at.tzinfo is not None


def test_the_open_change_list_an_index_and_what_is_not_there():
    resource_set = make_set(changelist_rotation=timedelta(seconds=0))
    created(resource_set, 2)
    created(resource_set, 2, start=10)
    open_list = ChangeListPage.objects.get(until__isnull=True)
    latest = find_document(
        ChangeListPage, provider="acme", set_slug="articles", where={"until": None}, latest=True
    )
    assert latest is not None and latest.pk == open_list.pk
    index = find_document(
        IndexDocument, provider="acme", set_slug="articles", where={"kind": "resourcelist"}
    )
    assert index is not None and index.public_name == "resourcelist.xml"
    assert (
        find_document(IndexDocument, provider="acme", set_slug="nope", where={"kind": "x"}) is None
    )
    DataProvider.objects.update(active=False)
    assert (
        find_document(ResourceListPage, provider="acme", set_slug="articles", where={"number": 1})
        is None
    )


def test_a_set_without_saved_settings_gets_the_defaults(django_assert_num_queries):
    resource_set = make_set()
    created(resource_set, 1)
    CapabilitySettings.objects.all().delete()
    with django_assert_num_queries(1):
        found = find_document(
            ResourceListPage, provider="acme", set_slug="articles", where={"number": 1}
        )
        assert found is not None
        assert found.resource_set.capabilities.publish_resource_list
