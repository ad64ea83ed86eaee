"""The admin is for staff and browses the log read-only; the demo serves real files."""

from __future__ import annotations

import hashlib

import pytest
from django.core.management import call_command
from django.urls import reverse
from lxml import etree

from sources.models import Change, DataProvider, Resource, ResourceSet

from ..support import NS, created, make_set, store_documents_in

pytestmark = pytest.mark.django_db


def test_admin_is_staff_only(client, django_user_model):
    user = django_user_model.objects.create_user("visitor", password="pw-visitor-123")
    client.force_login(user)
    response = client.get(reverse("admin:sources_resourceset_changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_resources_and_changes_are_browsed_read_only_with_filters(admin_client):
    resource_set = make_set()
    created(resource_set, 3)
    resources = admin_client.get(reverse("admin:sources_resource_changelist"), {"q": "0000001"})
    assert resources.status_code == 200
    assert b"r/0000001" in resources.content and b"r/0000002" not in resources.content
    assert admin_client.get(reverse("admin:sources_resource_add")).status_code == 403
    changes = admin_client.get(
        reverse("admin:sources_change_changelist"),
        {"change__exact": "created", "resource_set__id__exact": resource_set.pk},
    )
    assert changes.status_code == 200 and changes.content.count(b"r/000000") >= 3
    change = Change.objects.first()
    page = admin_client.post(reverse("admin:sources_change_change", args=[change.pk]), {})
    assert page.status_code == 403


def test_set_page_shows_its_documents(admin_client):
    resource_set = make_set(entries_per_document=2)
    created(resource_set, 5)
    page = admin_client.get(reverse("admin:sources_resourceset_change", args=[resource_set.pk]))
    assert page.status_code == 200
    assert b"3 resource list, 3 change list" in page.content
    assert b"capabilitylist.xml" in page.content


def test_admin_creates_a_set_with_its_capability_settings(admin_client):
    provider = DataProvider.objects.create(name="Acme", slug="acme")
    response = admin_client.post(
        reverse("admin:sources_resourceset_add"),
        {
            "provider": provider.pk,
            "slug": "new",
            "name": "New",
            "url_prefix": "https://data.example.org/new/",
            "capability_settings-TOTAL_FORMS": "1",
            "capability_settings-INITIAL_FORMS": "0",
            "capability_settings-MIN_NUM_FORMS": "1",
            "capability_settings-MAX_NUM_FORMS": "1",
            "capability_settings-0-publish_resource_list": "on",
            "capability_settings-0-entries_per_document": "100",
            "capability_settings-0-changelist_rotation": "1 00:00:00",
            "capability_settings-0-regenerate_after_changes": "10",
            "capability_settings-0-regenerate_after_seconds": "5",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    settings = ResourceSet.objects.get(slug="new").capability_settings
    assert settings.entries_per_document == 100 and not settings.publish_change_list


def test_entries_per_document_is_limited_to_the_sitemap_maximum(admin_client):
    resource_set = make_set()
    response = admin_client.post(
        reverse("admin:sources_resourceset_change", args=[resource_set.pk]),
        {
            "provider": resource_set.provider.pk,
            "slug": resource_set.slug,
            "name": "x",
            "url_prefix": resource_set.url_prefix,
            "capability_settings-TOTAL_FORMS": "1",
            "capability_settings-INITIAL_FORMS": "1",
            "capability_settings-MIN_NUM_FORMS": "1",
            "capability_settings-MAX_NUM_FORMS": "1",
            "capability_settings-0-id": resource_set.capability_settings.pk,
            "capability_settings-0-resource_set": resource_set.pk,
            "capability_settings-0-entries_per_document": "50001",
            "capability_settings-0-changelist_rotation": "1 00:00:00",
            "capability_settings-0-regenerate_after_changes": "10",
            "capability_settings-0-regenerate_after_seconds": "5",
        },
    )
    assert response.status_code == 200
    assert b"50000" in response.content  # the validation message names the limit


def test_demo_files_download_with_the_published_hashes(client, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    store_documents_in(settings, tmp_path / "documents")
    call_command("load_demo", articles=30)
    resource_set = ResourceSet.objects.get(slug="articles")
    # 30 articles with a metadata record each, less one deleted pair.
    assert Resource.objects.filter(resource_set=resource_set).count() == 58
    body = client.get("/resourcesync/demo/articles/resourcelist.xml")
    listed = etree.fromstring(b"".join(body.streaming_content))
    entries = listed.findall("sm:url", NS)
    assert len(entries) == 58
    for entry in entries[:10]:
        loc = entry.findtext("sm:loc", namespaces=NS)
        md = entry.find("rs:md", NS).attrib
        response = client.get(loc.removeprefix(settings.PUBLIC_BASE_URL))
        content = b"".join(response.streaming_content)
        assert response.status_code == 200
        assert f"md5:{hashlib.md5(content, usedforsecurity=False).hexdigest()}" in md["hash"]
        assert int(md["length"]) == len(content)
    assert client.get("/files/demo/articles/../../../etc/passwd").status_code == 404
    assert client.get("/files/demo/articles/%2e%2e/secret").status_code == 404
