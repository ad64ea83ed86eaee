"""The admin index is a dashboard: every set's state, links, and SVG charts of 30 days."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from dashboard import charts
from journal.models import Outcome, Run, RunKind
from sitemaps.models import ChangePackage, ResourcePackage
from sources.models import Change, ResourceSet
from sources.services import ingest_events

from ..support import created, event, ingest, make_set, store_documents_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def dashboard(admin_client) -> str:
    response = admin_client.get(reverse("admin:index"))
    assert response.status_code == 200
    return response.content.decode()


def row_of(html: str, path: str) -> str:
    match = re.search(
        rf"<tr>\s*<th scope=\"row\"><a [^>]*>{re.escape(path)}</a>.*?</tr>", html, re.S
    )
    assert match, f"no row for {path}"
    return match[0]


def test_each_set_shows_resources_changes_today_pending_pages_and_last_regeneration(
    admin_client,
):
    articles = make_set(entries_per_document=10)
    created(articles, 25)  # regenerated at once (eager Celery)
    ingest(articles, [event("updated", "r/0000001", version=2), event("deleted", "r/0000002")])
    make_set(slug="empty")

    html = dashboard(admin_client)
    row = row_of(html, "acme/articles")
    cells = re.findall(r'<td class="number"><a href="([^"]+)">(\d+)</a></td>', row)
    (resources_url, resources), (today_url, today), (_, pending) = cells
    assert (resources, today, pending) == ("24", "27", "0")
    assert f"resource_set__id__exact={articles.pk}" in resources_url
    assert re.search(r"3 resource list, [34] change list", row)
    assert 'class="run-succeeded">succeeded</span>' in row
    assert "never" in row_of(html, "acme/empty")

    # The links lead to the lists filtered to this set (and to today).
    listed = admin_client.get(today_url.replace("&amp;", "&")).content.decode()
    assert "27 changes" in listed or listed.count('class="field-uri"') == 27


def test_the_pages_column_counts_the_dump_packages_too(admin_client):
    """It counted Resource and Change List pages alone, as if the set published no dump."""
    articles = make_set(entries_per_document=10)
    created(articles, 25)
    for number, stored in ((1, "rd-1.zip"), (2, "rd-2.zip"), (3, "")):  # 3: planned, not written
        ResourcePackage.objects.create(
            resource_set=articles, number=number, after_key=number, storage_name=stored
        )
    ChangePackage.objects.create(
        resource_set=articles, number=1, since=timezone.now(), storage_name="cd-1.zip"
    )
    make_set(slug="plain")

    html = dashboard(admin_client)
    published = "3 resource list, 3 change list pages; 2 resource dump, 1 change dump packages"
    assert published in row_of(html, "acme/articles")
    plain = row_of(html, "acme/plain")
    assert re.search(r"<td>0 resource list, [01] change list pages</td>", plain)
    set_page = admin_client.get(reverse("admin:sources_resourceset_change", args=[articles.pk]))
    assert published in set_page.content.decode()
    listed = admin_client.get(reverse("admin:sources_resourceset_changelist")).content.decode()
    assert published in listed


def test_the_pending_count_links_to_the_pending_changes_alone(admin_client):
    """It linked to every change of the set, on the dashboard and on the set page."""
    articles = make_set()
    created(articles, 3)  # regenerated at once (eager Celery)
    ingest_events(resource_set=articles, events=[event("deleted", "r/0000001")])  # not yet

    row = row_of(dashboard(admin_client), "acme/articles")
    pending_url, pending = re.findall(r'<td class="number"><a href="([^"]+)">(\d+)</a>', row)[2]
    set_page = admin_client.get(reverse("admin:sources_resourceset_change", args=[articles.pk]))
    on_set_page = re.search(r'<a href="([^"]+)">1 pending changes</a>', set_page.content.decode())

    assert pending == "1" and on_set_page and on_set_page[1] == pending_url
    listed = admin_client.get(pending_url.replace("&amp;", "&")).content.decode()
    assert listed.count('class="field-uri"') == 1 and "r/0000001" in listed


def test_the_dashboard_draws_its_charts_as_inline_svg_with_the_counts(admin_client):
    articles = make_set()
    created(articles, 3)
    ingest(articles, [event("updated", "r/0000001", version=2)])
    yesterday = timezone.now() - timedelta(days=1)
    Change.objects.filter(uri__endswith="r/0000000").update(timestamp=yesterday)

    html = dashboard(admin_client)
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg"') >= 3 + 1  # and the admin's own
    today = timezone.now().date().isoformat()
    assert f"<title>{today}: 2 created, 1 updated</title>" in html
    assert f"<title>{yesterday.date().isoformat()}: 1 created</title>" in html
    assert "Ingest rate: changes received per hour" in html
    assert "Regeneration durations" in html
    # Nothing is fetched from elsewhere: no script or stylesheet from another host.
    assert not re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', html)


def test_the_dashboard_costs_the_same_queries_for_one_set_or_five(admin_client):
    created(make_set(slug="s0"), 2)
    with CaptureQueriesContext(connection) as one:
        dashboard(admin_client)
    for n in range(1, 5):
        created(make_set(slug=f"s{n}"), 2)
    with CaptureQueriesContext(connection) as five:
        dashboard(admin_client)
    assert len(five.captured_queries) == len(one.captured_queries)


def test_regeneration_durations_come_from_the_journal_failed_runs_in_red(admin_client):
    resource_set = make_set()
    now = timezone.now()
    for seconds, outcome in ((2, Outcome.SUCCEEDED), (5, Outcome.FAILED)):
        Run.objects.create(
            kind=RunKind.REGENERATION,
            resource_set=resource_set,
            target="acme/articles",
            started_at=now - timedelta(minutes=seconds),
            finished_at=now - timedelta(minutes=seconds) + timedelta(seconds=seconds),
            outcome=outcome,
        )
    html = dashboard(admin_client)
    assert ": 5 seconds</title>" in html and ": 2 seconds</title>" in html
    assert f'fill="{charts.HIGHLIGHT}"' in html


def test_chart_labels_are_escaped_and_the_axis_is_rounded():
    svg = charts.bar_chart(
        ["<script>alert(1)</script>"],
        [charts.Series(name="a&b", values=[7], colour="#000")],
        title="t",
        unit="u",
    )
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "a&amp;b" in svg
    assert [charts.nice_ceiling(v) for v in (0, 7, 10, 11, 3400)] == [1, 10, 10, 20, 5000]
    assert "nothing yet" in charts.line_chart(["a", "b"], [0, 0], title="t", unit="u")


def test_staff_who_may_not_view_sets_get_the_plain_admin_index(client, django_user_model):
    """Every link and figure of the dashboard is about sets; without the right to view
    them the links answered 403 while the figures leaked every set's activity."""
    created(make_set(slug="secret"), 2)
    staff = django_user_model.objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_dataprovider"))
    client.force_login(staff)

    html = client.get(reverse("admin:index")).content.decode()

    assert "acme/secret" not in html and "set-overview" not in html
    assert 'class="chart"' not in html and "Ingest rate" not in html
    assert "Data providers" in html  # the app list of what this user may see

    staff.user_permissions.add(Permission.objects.get(codename="view_resourceset"))
    staff = django_user_model.objects.get(pk=staff.pk)  # permissions are cached per instance
    client.force_login(staff)
    assert "acme/secret" in client.get(reverse("admin:index")).content.decode()


def test_staff_who_may_view_sets_only_get_figures_without_links_they_cannot_follow(
    client, django_user_model
):
    """The counts linked to resources, changes and runs, which answered them 403."""
    created(make_set(slug="secret"), 2)
    staff = django_user_model.objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_resourceset"))
    client.force_login(staff)

    html = client.get(reverse("admin:index")).content.decode()

    row = row_of(html, "acme/secret")
    secret = ResourceSet.objects.get(slug="secret")
    set_page = client.get(reverse("admin:sources_resourceset_change", args=[secret.pk]))
    assert set_page.status_code == 200
    for forbidden in ("sources/resource/", "sources/change/", "journal/run/"):
        assert forbidden not in html, forbidden
        assert forbidden not in set_page.content.decode(), forbidden
    assert re.search(r'<td class="number">2</td>', row)  # the figures stay

    for codename in ("view_resource", "view_change", "view_run"):
        staff.user_permissions.add(Permission.objects.get(codename=codename))
    staff = django_user_model.objects.get(pk=staff.pk)
    client.force_login(staff)
    html = client.get(reverse("admin:index")).content.decode()
    for allowed in ("sources/resource/", "sources/change/", "journal/run/"):
        assert allowed in html, allowed


def test_a_set_of_an_inactive_provider_says_it_is_not_published(admin_client, client):
    """Its documents answer 404 while the dashboard and its set page looked as usual."""
    hidden = make_set()
    created(hidden, 2)
    make_set(provider="other", slug="shown")
    hidden.provider.active = False
    hidden.provider.save()
    assert client.get("/resourcesync/acme/articles/capabilitylist.xml").status_code == 404

    notice = "Not published: its provider acme is inactive"
    assert notice in row_of(dashboard(admin_client), "acme/articles")
    assert "Not published" not in row_of(dashboard(admin_client), "other/shown")
    set_page = admin_client.get(reverse("admin:sources_resourceset_change", args=[hidden.pk]))
    assert notice in set_page.content.decode()


def test_times_on_the_dashboard_and_the_set_page_name_their_zone(admin_client):
    """They were UTC shown without a zone, while the API and the documents say `Z`."""
    articles = make_set()
    created(articles, 2)  # regenerated at once: a run and a last regeneration to show
    moment = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"

    html = dashboard(admin_client)
    assert re.search(rf">{moment}</a>", row_of(html, "acme/articles"))
    assert re.search(rf"<title>{moment} acme/articles: ", html)  # a regeneration's duration
    assert re.search(r"peak \d+ at \d{4}-\d\d-\d\d \d\d:00 UTC", html)  # the ingest rate
    page = admin_client.get(reverse("admin:sources_resourceset_change", args=[articles.pk]))
    html = page.content.decode()
    last = re.search(r'<span id="last-regeneration">(.*?)</span></p>', html, re.S)
    runs = re.search(r'<table id="set-runs">.*?</table>', html, re.S)
    assert last and re.search(moment, last[1])
    assert runs and re.search(rf">{moment}</a>", runs[0])
    run = Run.objects.filter(resource_set=articles).first()
    title = admin_client.get(reverse("admin:journal_run_change", args=[run.pk])).content.decode()
    assert re.search(rf"<title>regeneration of acme/articles at {moment} ", title)


def _locked() -> Exception:
    import sqlite3

    from django.db import OperationalError

    error = OperationalError("database is locked")
    error.__cause__ = sqlite3.OperationalError("database is locked")
    return error


def _down() -> Exception:
    import psycopg
    from django.db import OperationalError

    error = OperationalError("connection refused")
    error.__cause__ = psycopg.OperationalError("connection refused")
    return error


@pytest.mark.parametrize(
    ("cause", "retry_after", "says", "not_said"),
    [
        # SQLite under write load: the database is there, another writer holds the lock.
        (_locked, "1", "The database is busy; try again shortly.", "unavailable"),
        (_down, "5", "The database is unavailable; retry shortly.", "busy"),
    ],
    ids=["sqlite-locked", "down"],
)
def test_the_admin_503_says_whether_the_database_is_busy_or_down(
    admin_client, monkeypatch, cause, retry_after, says, not_said
):
    """A busy lock was answered "The database is unavailable", which sends an operator
    looking for an outage that is not there."""
    from dashboard import overview

    def fail(*args, **kwargs):
        raise cause()

    monkeypatch.setattr(overview, "dashboard_context", fail)

    response = admin_client.get(reverse("admin:index"))

    assert response.status_code == 503
    assert response["Retry-After"] == retry_after
    text = response.content.decode()
    assert says in text
    assert not_said not in text
