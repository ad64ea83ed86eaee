"""`load_demo` (run by every `make run`) keeps the login and token it created."""

from __future__ import annotations

import io
import re
import stat

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from lxml import etree

from sources.models import ApiToken, ResourceSet

from ..support import NS, store_documents_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    store_documents_in(settings, tmp_path / "documents")
    return tmp_path


def load_demo() -> str:
    out = io.StringIO()
    call_command("load_demo", articles=3, stdout=out)
    return out.getvalue()


def printed(output: str) -> tuple[str, str]:
    """The (password, token) a run printed."""
    password = re.search(r"Admin login: admin / (\S+)", output)
    token = re.search(r"API token for provider 'demo': ([\w-]{20,})", output)
    assert password and token, output
    return password[1], token[1]


def test_rerunning_the_demo_keeps_the_password_and_the_token(client, data_dir):
    password, token = printed(load_demo())
    again = load_demo()
    assert printed(again) == (password, token)
    user = get_user_model().objects.get(username="admin")
    assert user.check_password(password) and user.is_staff and user.is_superuser
    assert ApiToken.objects.filter(provider__slug="demo").count() == 1
    assert client.login(username="admin", password=password)
    # The plain secrets are kept for their owner only.
    mode = stat.S_IMODE((data_dir / "demo-credentials.json").stat().st_mode)
    assert mode == 0o600


def test_a_changed_password_and_a_lost_key_are_kept_and_how_to_reset_is_shown(data_dir):
    load_demo()
    user = get_user_model().objects.get(username="admin")
    user.set_password("chosen-by-the-operator-42")
    user.save()
    (data_dir / "demo-credentials.json").unlink()
    output = load_demo()
    user.refresh_from_db()
    assert user.check_password("chosen-by-the-operator-42")
    assert "manage.py changepassword admin" in output
    assert "manage.py create_api_token demo" in output
    assert ApiToken.objects.filter(provider__slug="demo").count() == 1


def test_rerunning_on_another_address_moves_the_set_to_it(
    client, settings, data_dir, django_capture_on_commit_callbacks
):
    password, token = printed(load_demo())
    resource_set = ResourceSet.objects.get(slug="articles")
    first_prefix = resource_set.url_prefix
    keys = set(resource_set.resources.values_list("pk", flat=True))
    changes = resource_set.changes.count()
    settings.PUBLIC_BASE_URL = "http://127.0.0.1:8123"
    with django_capture_on_commit_callbacks(execute=True):  # committed, as `make run` does
        output = load_demo()
    assert f"loaded for {first_prefix}; moving it to" in output
    assert printed(output) == (password, token)
    resource_set = ResourceSet.objects.get(slug="articles")
    # The same resources and history, their URIs (and their links') moved.
    assert set(resource_set.resources.values_list("pk", flat=True)) == keys
    assert resource_set.changes.count() == changes
    hrefs = [
        link["uri"] for ln in resource_set.resources.values_list("ln", flat=True) for link in ln
    ]
    assert len(hrefs) == 6 and all(href.startswith("http://127.0.0.1:8123/") for href in hrefs)
    assert resource_set.url_prefix == "http://127.0.0.1:8123/files/demo/articles/"
    assert set(resource_set.resources.values_list("uri", flat=True)) == {
        f"http://127.0.0.1:8123/files/demo/articles/article-0000{n}.{ext}"
        for n in (1, 2, 3)
        for ext in ("txt", "xml")
    }
    body = client.get("/resourcesync/demo/articles/resourcelist.xml")
    listed = etree.fromstring(b"".join(body.streaming_content))
    locs = listed.xpath("sm:url/sm:loc/text()", namespaces=NS)
    assert len(locs) == 6 and all(loc.startswith("http://127.0.0.1:8123/") for loc in locs)
    body = client.get("/resourcesync/demo/articles/changelist-open.xml")
    listed = etree.fromstring(b"".join(body.streaming_content))
    locs = listed.xpath("sm:url/sm:loc/text()", namespaces=NS)
    assert locs and all(loc.startswith("http://127.0.0.1:8123/") for loc in locs)
    assert "loaded for" not in load_demo()


def test_a_size_asked_of_a_demo_already_loaded_is_said_to_apply_to_a_new_one(data_dir):
    """`make run DEMO_ARTICLES=500` on an existing var/ printed the old counts and said
    nothing: the size only sizes a new demo set."""
    load_demo()
    out = io.StringIO()
    call_command("load_demo", articles=500, stdout=out)
    assert "already loaded" in out.getvalue()
    assert "DEMO_ARTICLES" in out.getvalue()
    assert ResourceSet.objects.get(slug="articles").resources.count() < 500
