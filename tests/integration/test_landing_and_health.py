"""The pages people open first: `/` and `/healthz`, and the wrong-host warning."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from django.db.utils import OperationalError
from django.urls import reverse
from lxml import html

from resourcesync_portal import health, hosts
from sources.models import DataProvider

from ..conftest import _reset_celery_clients
from ..support import make_set, store_documents_in

pytestmark = pytest.mark.django_db


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the landing page ----------------------------------------------------------------


@pytest.fixture
def sets():
    public = make_set("acme", "articles")
    protected = make_set("acme", "secret", protected=True)
    hidden = make_set("gone", "old")
    DataProvider.objects.filter(slug="gone").update(active=False)
    return public, protected, hidden


def landing(client) -> html.HtmlElement:
    response = client.get("/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    return html.fromstring(response.content)


def test_landing_lists_the_public_sets_with_their_capability_lists(client, settings, sets):
    page = landing(client)
    base = settings.PUBLIC_BASE_URL
    hrefs = page.xpath("//a/@href")
    assert f"{base}/resourcesync/acme/articles/capabilitylist.xml" in hrefs
    text = page.text_content()
    assert "secret" not in text and "/acme/secret/" not in " ".join(hrefs)
    assert "old" not in text.split() and "/gone/" not in " ".join(hrefs)
    (link,) = page.xpath("/html/head/link[@rel='resourcesync']/@href")
    assert link == f"{base}/.well-known/resourcesync"
    assert f"{base}/.well-known/resourcesync" in hrefs
    assert {reverse("api-docs"), reverse("admin:index"), reverse("healthz")} <= set(hrefs)


def test_every_link_to_the_portal_on_the_landing_page_answers(client, settings, sets):
    page = landing(client)
    base = settings.PUBLIC_BASE_URL
    own = [
        href.removeprefix(base)
        for href in page.xpath("//a/@href | //link/@href")
        if href.startswith((base + "/", "/"))
    ]
    assert len(own) >= 6
    for path in own:
        response = client.get(path, follow=True)
        assert response.status_code == 200, path


def test_landing_without_public_sets_says_so(client):
    make_set("acme", "secret", protected=True)
    assert "No public set yet." in landing(client).text_content()


def test_every_page_has_an_icon_and_favicon_ico_answers(client, admin_client):
    """`/favicon.ico` was a 404 on every page: an error in the console and the log."""
    icon = client.get("/favicon.ico", follow=True)
    assert icon.status_code == 200 and icon["Content-Type"].startswith("image/svg+xml")
    assert "max-age" in client.get("/favicon.ico")["Cache-Control"]
    for page in (landing(client), html.fromstring(admin_client.get("/admin/").content)):
        (href,) = page.xpath("/html/head/link[@rel='icon']/@href")
        assert client.get(href).status_code == 200


# --- /healthz --------------------------------------------------------------------------


def healthz(client, status: int) -> dict:
    started = time.monotonic()
    response = client.get("/healthz")
    assert time.monotonic() - started < 10, "a health probe must answer quickly"
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    assert "no-cache" in response["Cache-Control"]
    return response.json()


def test_healthz_checks_database_and_storage_and_skips_what_is_not_configured(client):
    report = healthz(client, 200)
    assert report["status"] == "ok" and report["failing"] == []
    checks = report["checks"]
    assert checks["database"]["status"] == checks["storage"]["status"] == "ok"
    for part in ("elasticsearch", "redis", "celery_worker"):
        assert checks[part] == {"status": "not configured"}


def test_healthz_with_every_service_running(client, use_elasticsearch, celery_worker):
    report = healthz(client, 200)
    assert {name: check["status"] for name, check in report["checks"].items()} == {
        "database": "ok",
        "storage": "ok",
        "elasticsearch": "ok",
        "redis": "ok",
        "celery_worker": "ok",
    }


@pytest.fixture
def elasticsearch_down(settings, elasticsearch_generator):
    url = f"http://127.0.0.1:{closed_port()}"
    entry = {**elasticsearch_generator, "HOSTS": [url]}
    settings.RESOURCESYNC_GENERATORS = {"default": entry}
    return url


def test_healthz_names_elasticsearch_when_it_is_down(client, elasticsearch_down):
    report = healthz(client, 503)
    assert report["failing"] == ["elasticsearch"]
    assert report["checks"]["elasticsearch"]["status"] == "fail"


@pytest.fixture
def broker(settings):
    """Point Celery at a broker URL for one test (not eager), then restore it."""
    from resourcesync_portal.celery import app

    def use(url: str) -> None:
        settings.CELERY_BROKER_URL = url
        settings.CELERY_TASK_ALWAYS_EAGER = False
        _reset_celery_clients(app)

    yield use
    _reset_celery_clients(app)


def test_healthz_names_redis_and_the_worker_when_the_broker_is_down(client, broker):
    broker(f"redis://127.0.0.1:{closed_port()}/0")
    report = healthz(client, 503)
    assert report["failing"] == ["redis", "celery_worker"]


def test_healthz_names_the_worker_when_none_answers(client, broker, redis_url):
    broker(redis_url)
    report = healthz(client, 503)
    assert report["failing"] == ["celery_worker"]
    assert report["checks"]["redis"]["status"] == "ok"


def test_healthz_names_storage_that_cannot_be_written(client, settings, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store_documents_in(settings, blocker / "documents")
    assert healthz(client, 503)["failing"] == ["storage"]


def test_healthz_answers_503_not_500_for_a_misconfigured_storage(client, settings):
    settings.STORAGES = {**settings.STORAGES, "resourcesync": {"BACKEND": "no.such.Storage"}}
    assert healthz(client, 503)["failing"] == ["storage"]


class BrokenConnection:
    def cursor(self):
        raise OperationalError("connection refused")


def test_healthz_names_the_database_when_it_does_not_answer(client, monkeypatch):
    monkeypatch.setattr(health, "connection", BrokenConnection())
    report = healthz(client, 503)
    assert report["failing"] == ["database"]
    assert report["checks"]["database"]["error"] == "OperationalError"


# --- requests on another host than PUBLIC_BASE_URL's -------------------------------------


@pytest.fixture
def public_host(settings):
    settings.PUBLIC_BASE_URL = "http://portal.example.org"
    settings.ALLOWED_HOSTS = ["portal.example.org", "localhost"]
    hosts._warned.clear()
    yield
    hosts._warned.clear()


def test_a_request_on_another_host_is_warned_about_once(client, public_host, caplog):
    with caplog.at_level(logging.WARNING, logger="resourcesync_portal.hosts"):
        client.get("/", HTTP_HOST="portal.example.org")
        client.get("/", HTTP_HOST="portal.example.org:80")
        assert caplog.records == []
        client.get("/", HTTP_HOST="localhost:8080")
        client.get("/admin/", HTTP_HOST="localhost:8080")
    (record,) = caplog.records
    assert "localhost:8080" in record.getMessage()
    assert "http://portal.example.org" in record.getMessage()


def test_health_probes_on_internal_addresses_are_not_warned_about(client, public_host, caplog):
    with caplog.at_level(logging.WARNING, logger="resourcesync_portal.hosts"):
        client.get("/healthz", HTTP_HOST="localhost")
    assert caplog.records == []


def test_healthz_answers_plain_http_probes_when_https_is_enforced(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/").status_code == 301
    assert client.get("/healthz").status_code == 200
