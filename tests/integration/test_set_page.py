"""The set page: "Regenerate now", progress over every document, documents, runs."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from celery.result import AsyncResult
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from journal.models import Run
from sitemaps import lease
from sitemaps.models import ChangeListPage, RegenerationState, ResourceListPage
from sitemaps.regeneration import regenerate
from sitemaps.tasks import regenerate_resource_set

from ..support import created, event, ingest, make_set, store_documents_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def set_page(admin_client, resource_set) -> str:
    response = admin_client.get(reverse("admin:sources_resourceset_change", args=[resource_set.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_set_page_has_a_regenerate_button_that_says_what_the_run_did(admin_client):
    resource_set = make_set()
    created(resource_set, 3)
    html = set_page(admin_client, resource_set)
    action = reverse("admin:sources_resourceset_regenerate", args=[resource_set.pk])
    assert f'<form method="post" action="{action}"' in html and ">Regenerate now</button>" in html

    ingest(resource_set, [event("updated", "r/0000001", version=2)])
    response = admin_client.post(action, {"full": "0"})
    assert response.status_code == 302 and response["Location"].endswith("?watch=1")
    [message] = [str(m) for m in get_messages(response.wsgi_request)]
    # Eager Celery: it ran already; nothing "queued".
    assert message.startswith("Regenerated acme/articles: ") and "queued" not in message
    runs = re.search(
        r'<table id="set-runs">.*?</table>', set_page(admin_client, resource_set), re.S
    )
    assert runs and runs[0].count('class="run-succeeded"') == Run.objects.count()
    assert admin_client.get(action).status_code == 405


def test_a_run_with_nothing_to_do_says_so_instead_of_zero_pages(admin_client):
    resource_set = make_set()
    created(resource_set, 2)
    response = admin_client.post(
        reverse("admin:sources_resourceset_regenerate", args=[resource_set.pk]), {"full": "0"}
    )
    [message] = [str(m) for m in get_messages(response.wsgi_request)]
    assert message == (
        "Regenerated acme/articles: nothing to rewrite: every document was up to date."
    )
    listing = admin_client.get(reverse("admin:sources_resourceset_changelist")).content.decode()
    assert "(0 pages)" not in listing and "(nothing to rewrite)" in listing


def test_the_list_action_says_queued_only_when_it_is(admin_client, monkeypatch):
    resource_set = make_set()
    changelist = reverse("admin:sources_resourceset_changelist")
    data = {"action": "regenerate_now", "_selected_action": [resource_set.pk]}
    ran = admin_client.post(changelist, data, follow=True).content.decode()
    assert "Regenerated acme/articles" in ran and "queued" not in ran

    # With a broker, the task waits for a worker: then it is queued.
    monkeypatch.setattr(
        regenerate_resource_set, "delay", lambda *args, **kwargs: AsyncResult("pending-task")
    )
    queued = admin_client.post(changelist, data, follow=True).content.decode()
    assert "Regeneration of acme/articles queued" in queued


def test_progress_counts_change_lists_and_resource_list_pages(monkeypatch):
    resource_set = make_set(entries_per_document=10)
    created(resource_set, 25)
    beats: list[tuple[int, int]] = []
    real_beat = lease.Lease.beat

    def beat(self, **fields):
        if "progress_done" in fields:
            beats.append((fields["progress_done"], fields["progress_total"]))
        return real_beat(self, **fields)

    monkeypatch.setattr(lease.Lease, "beat", beat)
    report = regenerate(resource_set, full=True)
    documents = len(report.change_pages_written) + len(report.resource_pages_written)
    assert len(report.change_pages_written) >= 2 and len(report.resource_pages_written) == 3
    assert [done for done, _ in beats] == list(range(1, documents + 1))
    assert beats[-1] == (documents, documents)
    # While Change Lists are written, the Resource List pages are not counted yet.
    assert beats[0][0] == 1 and beats[0][1] <= len(report.change_pages_written)


def test_the_status_endpoint_reports_a_running_regeneration_by_kind(admin_client, client):
    resource_set = make_set(entries_per_document=10)
    created(resource_set, 25)
    status_url = reverse("admin:sources_resourceset_status", args=[resource_set.pk])
    idle = admin_client.get(status_url).json()
    assert idle["state"] == "idle" and idle["last_run_outcome"] == "succeeded"

    an_hour_ago = timezone.now() - timedelta(hours=1)
    for model in (ChangeListPage, ResourceListPage):
        model.objects.filter(resource_set=resource_set).update(generated_at=an_hour_ago)
    started = timezone.now() - timedelta(seconds=1)
    RegenerationState.objects.filter(resource_set=resource_set).update(
        running_since=started, heartbeat_at=timezone.now(), holder="web1 pid 7 #ab",
        progress_done=3, progress_total=6,
    )  # fmt: skip
    ChangeListPage.objects.filter(resource_set=resource_set, number=1).update(
        generated_at=timezone.now()
    )
    ResourceListPage.objects.filter(resource_set=resource_set, number__lte=2).update(
        generated_at=timezone.now()
    )
    running = admin_client.get(status_url)
    assert "no-store" in running["Cache-Control"]
    status = running.json()
    assert status["state"] == "running" and (status["done"], status["total"]) == (3, 6)
    assert status["change_lists_written"] == 1 and status["resource_list_pages_written"] == 2
    assert "3 of 6 documents written" in status["text"]
    html = set_page(admin_client, resource_set)
    assert 'data-state="running"' in html and "Change Lists written: 1" in html
    assert 'progress id="regeneration-progress" max="6" value="3"' in html

    # Staff only.
    anonymous = client.get(status_url)
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]


def test_documents_are_linked_and_readable_as_html(admin_client, settings):
    resource_set = make_set(entries_per_document=10)
    created(resource_set, 25)
    ingest(resource_set, [event("deleted", "r/0000003")])
    html = set_page(admin_client, resource_set)
    base = f"{settings.PUBLIC_BASE_URL}/resourcesync/acme/articles"
    for name in ("capabilitylist.xml", "resourcelist.xml", "resourcelist-3.xml", "changelist.xml"):
        assert f'<a href="{base}/{name}">' in html
    view = reverse("admin:sources_resourceset_document", args=[resource_set.pk, "resourcelist.xml"])
    assert f'<a href="{view}">view</a>' in html

    index = admin_client.get(view).content.decode()
    assert "Index: resourcelist" in index
    part = reverse(
        "admin:sources_resourceset_document", args=[resource_set.pk, "resourcelist-1.xml"]
    )
    assert f'(<a href="{part}">view</a>)' in index  # an index links its parts' views

    page = admin_client.get(part).content.decode()
    assert "Entries 1 to 9 of 9" in page  # r/0000003 was deleted
    assert "http://data.example.org/r/0000000" in page
    assert "md5:" in page
    changes = admin_client.get(
        reverse("admin:sources_resourceset_document", args=[resource_set.pk, "changelist.xml"])
    ).content.decode()
    assert "Index: changelist" in changes
    missing = reverse("admin:sources_resourceset_document", args=[resource_set.pk, "nope.xml"])
    assert admin_client.get(missing).status_code == 404
    capabilities = reverse(
        "admin:sources_resourceset_document", args=[resource_set.pk, "capabilitylist.xml"]
    )
    assert "List: capabilitylist" in admin_client.get(capabilities).content.decode()


@pytest.mark.parametrize(
    "path", ["abc/change/", "abc/", "abc/status/", "%s/documents/a%%2Fb", "²/change/"]
)
def test_a_set_url_without_a_set_id_says_the_set_does_not_exist(admin_client, path):
    """As every other admin model does; a ValueError (500) before."""
    resource_set = make_set()
    url = "/admin/sources/resourceset/" + (path % resource_set.pk if "%s" in path else path)

    response = admin_client.get(url, follow=True)

    assert response.status_code == 200
    [message] = [str(m) for m in get_messages(response.wsgi_request)]
    assert "doesn\u2019t exist" in message  # Django writes a typographic apostrophe


def test_a_protected_set_s_documents_are_read_through_the_admin_not_linked_raw(admin_client):
    """A browser sends no token, so the raw links answered 401 to the staff reading them."""
    resource_set = make_set(protected=True)
    created(resource_set, 3)
    html = set_page(admin_client, resource_set)

    documents = re.search(r'<table id="set-documents">.*?</table>', html, re.S)[0]
    assert 'href="http://127.0.0.1:8000/resourcesync/' not in documents
    assert "http://127.0.0.1:8000/resourcesync/acme/articles/resourcelist.xml" in documents
    view = reverse("admin:sources_resourceset_document", args=[resource_set.pk, "resourcelist.xml"])
    assert f'href="{view}"' in documents
    assert admin_client.get(view).status_code == 200
