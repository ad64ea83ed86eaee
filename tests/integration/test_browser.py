"""The pages people open, in a real browser: Debian's Chromium driven by Playwright.

`make test` installs Chromium with apt-get when it is missing (scripts/services.sh);
no browser is ever downloaded. Screenshots of every page are saved under
`.cache/screenshots/` (the path is printed) for people to look at.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connections
from django.test import TestCase

from sitemaps import regeneration
from sitemaps.tasks import regenerate_resource_set
from sources.models import ResourceSet

from ..support import created, event, ingest, make_set, store_documents_in

SCREENSHOTS = Path(__file__).resolve().parents[2] / ".cache" / "screenshots"
WIDTH, HEIGHT = 1400, 900
PASSWORD = "browser-pw-123"

pytestmark = pytest.mark.django_db(transaction=True)


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "Chromium is not installed: `apt-get install -y chromium` "
            "(make test installs it through scripts/services.sh).",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the ORM calls made
    # between browser steps (and the test database's setup) are still synchronous.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        yield from _launch(sync_playwright)
    finally:
        if previous is None:
            del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def _launch(sync_playwright) -> Iterator[object]:
    with sync_playwright() as playwright:
        # Chromium's sandbox needs user namespaces, which root in a container lacks.
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=args)
        yield launched
        launched.close()


@pytest.fixture
def page(browser, settings, tmp_path, live_server):
    settings.PUBLIC_BASE_URL = live_server.url
    store_documents_in(settings, tmp_path / "documents")
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    opened = context.new_page()
    yield opened
    context.close()


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def log_in(page, live_server, django_user_model) -> None:
    django_user_model.objects.create_superuser("librarian", "l@example.org", PASSWORD)
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "librarian")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#set-overview, .portal-dashboard")


def overflow(page) -> int:
    """How many pixels the page, or a table in its box, is wider than it may be (0: none)."""
    return page.evaluate(
        """Math.max(
            document.documentElement.scrollWidth - window.innerWidth,
            ...Array.from(document.querySelectorAll("table"), table =>
                table.scrollWidth - table.parentElement.clientWidth))"""
    )


def page_overflow(page) -> int:
    """How many pixels the page is wider than the window; a wide table scrolls in its box."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def a_set_with_history() -> ResourceSet:
    resource_set = make_set(entries_per_document=10)
    with TestCase.captureOnCommitCallbacks(execute=True):
        created(resource_set, 25)
        ingest(resource_set, [event("updated", "r/0000001", version=2)])
    return resource_set


def test_the_landing_page(page, live_server):
    a_set_with_history()
    page.goto(f"{live_server.url}/")
    assert page.inner_text("h1") == "ResourceSync portal"
    assert page.locator("link[rel=resourcesync]").count() == 1
    assert page.locator("a[href$='/resourcesync/acme/articles/capabilitylist.xml']").count() == 1
    assert overflow(page) <= 0
    screenshot(page, "landing")


def test_log_in_and_read_the_dashboard_with_its_charts(page, live_server, django_user_model):
    a_set_with_history()
    log_in(page, live_server, django_user_model)
    assert page.locator("svg.chart").count() == 3
    for chart in page.locator("svg.chart").all():
        box = chart.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 80  # drawn, not collapsed
    assert page.locator("svg.chart rect[fill='#2e7d32']").count() >= 1  # today's created
    row = page.locator("#set-overview tbody tr").first
    assert "acme/articles" in row.inner_text() and "succeeded" in row.inner_text()
    assert overflow(page) <= 0
    screenshot(page, "dashboard")
    row.locator("a", has_text="25").first.click()  # resources: the filtered list
    assert (
        "25 resources" in page.inner_text("#changelist-form")
        or page.locator("#result_list tbody tr").count() == 24
    )


def test_regenerate_now_shows_progress_then_the_run(
    page, live_server, django_user_model, monkeypatch, database_url
):
    a_set_with_history()
    log_in(page, live_server, django_user_model)
    page.click("#set-overview a:text('acme/articles')")
    screenshot(page, "set-page")
    assert page.locator("#set-documents a[href$='/acme/articles/resourcelist.xml']").count() == 1

    # A worker that takes its time: the page must follow the run as it goes.
    slow_store = regeneration.RegenerationRun.store_page

    def store_slowly(self, *args, **kwargs):
        time.sleep(0.6)
        return slow_store(self, *args, **kwargs)

    monkeypatch.setattr(regeneration.RegenerationRun, "store_page", store_slowly)
    worker: list[threading.Thread] = []

    def regenerate_in_thread(resource_set_id, full):
        try:
            regenerate_resource_set.apply((resource_set_id,), {"full": full})
        finally:
            connections.close_all()  # the thread's own, as a worker closes its after a task

    def to_worker(resource_set_id, full=False):
        thread = threading.Thread(target=regenerate_in_thread, args=(resource_set_id, full))
        worker.append(thread)
        thread.start()
        from celery.result import AsyncResult

        return AsyncResult("queued-for-the-browser-test")

    monkeypatch.setattr(regenerate_resource_set, "delay", to_worker)
    page.click("#regenerate-all")  # every page: 8 documents, 0.6 s each
    page.wait_for_selector("#regeneration-progress:not([hidden])", timeout=15_000)
    # Change Lists come first, then Resource List pages: both are counted.
    page.wait_for_function("document.getElementById('regeneration-progress').value >= 4")
    assert "documents written" in page.inner_text("#regeneration-text")
    assert "Change Lists written: 3" in page.inner_text("#regeneration-detail")
    screenshot(page, "set-page-regenerating")
    # When the run ends the page draws itself again, with the run in its history.
    page.wait_for_url(lambda url: "watch=1" not in url, timeout=30_000)
    page.wait_for_selector("#set-status[data-state='idle']")
    worker[0].join(timeout=30)
    assert page.locator("#set-runs tbody tr").count() >= 2
    assert "succeeded" in page.inner_text("#set-runs tbody tr:first-child")
    screenshot(page, "set-page-after-run")

    # A document, read as a table.
    page.click("#set-documents a:text('view') >> nth=1")
    page.wait_for_selector("#document-entries")
    screenshot(page, "document")


def test_lists_fit_a_1400_pixel_window_and_slugs_fill_themselves(
    page, live_server, django_user_model
):
    resource_set = make_set()
    long_name = "collection/" + "x" * 300 + ".pdf"
    with TestCase.captureOnCommitCallbacks(execute=True):
        ingest(resource_set, [event("created", long_name)])
    log_in(page, live_server, django_user_model)
    for path in ("sources/change/", "sources/resource/", "sources/resourceset/", "journal/run/"):
        page.goto(f"{live_server.url}/admin/{path}")
        assert overflow(page) <= 0, f"/admin/{path} is wider than {WIDTH} px"
    screenshot(page, "runs")

    page.goto(f"{live_server.url}/admin/sources/resourceset/add/")
    page.locator("#id_name").press_sequentially("Theses and Dissertations")
    assert page.input_value("#id_slug") == "theses-and-dissertations"
    assert page.input_value("#id_capability_settings-0-changelist_rotation") == "1 day"


def test_the_dashboard_and_a_document_fit_a_375_pixel_phone(page, live_server, django_user_model):
    """The charts' 28rem columns pushed today's bars off-screen, and the Set and loc
    columns (and the set page's document column) were squeezed to two or three
    characters a line."""
    resource_set = a_set_with_history()
    page.set_viewport_size({"width": 375, "height": 800})
    log_in(page, live_server, django_user_model)
    assert page_overflow(page) <= 0
    assert page.locator("#set-overview tbody th").first.bounding_box()["width"] >= 100
    for chart in page.locator("svg.chart").all():
        assert chart.bounding_box()["x"] + chart.bounding_box()["width"] <= 375
    screenshot(page, "dashboard-375")

    page.goto(f"{live_server.url}/admin/sources/resourceset/{resource_set.pk}/change/")
    assert page_overflow(page) <= 0
    assert page.locator("#set-documents tbody td").first.bounding_box()["width"] >= 150
    screenshot(page, "set-page-375")
    page.click("#set-documents a:text('view') >> nth=1")
    page.wait_for_selector("#document-entries")
    assert page_overflow(page) <= 0
    assert page.locator("#document-entries tbody td").first.bounding_box()["width"] >= 150
    screenshot(page, "document-375")
