"""A destination that holds one of our resources can find the set it belongs to."""

from __future__ import annotations

import pytest
from django.test import Client

from sources.models import ResourceSet

from ..support import make_set, store_documents_in


@pytest.mark.django_db
def test_a_served_file_links_to_its_capability_list(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")
    root = tmp_path / "files"
    (root / "deep").mkdir(parents=True)
    (root / "deep" / "a.txt").write_text("a")
    resource_set = make_set("acme", "open")
    ResourceSet.objects.filter(pk=resource_set.pk).update(resource_root_dir=str(root))

    response = Client().get("/files/acme/open/deep/a.txt")

    assert response.status_code == 200
    url = "http://127.0.0.1:8000/resourcesync/acme/open/capabilitylist.xml"
    assert response["Link"] == f'<{url}>; rel="resourcesync"'
    capability_list = Client().get(url.removeprefix(settings.PUBLIC_BASE_URL))
    assert capability_list.status_code == 200
