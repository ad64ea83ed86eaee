"""What tripped people up in the admin: help text, durations, times, columns, slugs."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from sources.admin import mirror_in_use
from sources.models import ApiToken, Change, DataProvider, Resource, ResourceSet

from ..support import ELASTICSEARCH_GENERATOR, created, make_set, store_documents_in
from .test_new_set_documents import ADMIN_FORM

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def test_help_text_shows_no_html_the_admin_would_eat(admin_client):
    created(make_set(), 1)
    resource = Resource.objects.get()
    html = admin_client.get(
        reverse("admin:sources_resource_change", args=[resource.pk])
    ).content.decode()
    assert "The resolved URL: the entry&#x27;s loc in the documents." in html or (
        "The resolved URL: the entry's loc in the documents." in html
    )
    assert "<loc>" not in html


def capability_form(resource_set, rotation: str) -> dict[str, object]:
    return {
        "provider": resource_set.provider.pk,
        "slug": resource_set.slug,
        "name": resource_set.name,
        "url_prefix": resource_set.url_prefix,
        "capability_settings-TOTAL_FORMS": "1",
        "capability_settings-INITIAL_FORMS": "1",
        "capability_settings-MIN_NUM_FORMS": "1",
        "capability_settings-MAX_NUM_FORMS": "1",
        "capability_settings-0-id": resource_set.capability_settings.pk,
        "capability_settings-0-resource_set": resource_set.pk,
        "capability_settings-0-entries_per_document": "100",
        "capability_settings-0-changelist_rotation": rotation,
        "capability_settings-0-regenerate_after_changes": "10",
        "capability_settings-0-regenerate_after_seconds": "5",
    }


@pytest.mark.parametrize(
    ("typed", "saved"),
    [
        ("12 hours", timedelta(hours=12)),
        ("1 day 6 hours", timedelta(days=1, hours=6)),
        ("90 min", timedelta(minutes=90)),
        ("1 00:00:00", timedelta(days=1)),  # what the form used to show is still read
    ],
)
def test_the_rotation_period_reads_and_is_typed_as_people_write_it(admin_client, typed, saved):
    resource_set = make_set()
    url = reverse("admin:sources_resourceset_change", args=[resource_set.pk])
    html = admin_client.get(url).content.decode()
    assert 'name="capability_settings-0-changelist_rotation" value="1 day"' in html
    assert admin_client.post(url, capability_form(resource_set, typed)).status_code == 302
    resource_set.capability_settings.refresh_from_db()
    assert resource_set.capability_settings.changelist_rotation == saved


def test_an_unreadable_rotation_period_is_refused_with_an_example(admin_client):
    resource_set = make_set()
    url = reverse("admin:sources_resourceset_change", args=[resource_set.pk])
    response = admin_client.post(url, capability_form(resource_set, "a fortnight"))
    assert response.status_code == 200
    assert "Enter a duration such as &quot;1 day&quot;" in response.content.decode()


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("0", "at least 1 minute"),
        ("-1 00:00:00", "at least 1 minute"),
        ("999999999 days", "at most 3650 days"),
        ("1e30 days", "Enter a duration such as"),
        ("999999999999999", "Enter a duration such as"),  # bare seconds, Django's reading
        ("1000000000 00:00:00", "Enter a duration such as"),
    ],
)
def test_a_rotation_period_out_of_bounds_is_refused_by_name(admin_client, typed, message):
    """0 or less closed the open list at every run (and beat ran one every 30 s); a huge
    one was a 500 (OverflowError) on saving."""
    resource_set = make_set()
    url = reverse("admin:sources_resourceset_change", args=[resource_set.pk])

    response = admin_client.post(url, capability_form(resource_set, typed))

    assert response.status_code == 200
    assert message in response.content.decode().replace("&quot;", '"')
    resource_set.capability_settings.refresh_from_db()
    assert resource_set.capability_settings.changelist_rotation == timedelta(days=1)


def test_a_regeneration_delay_past_ten_years_is_refused_by_name(admin_client):
    """9223372036854775807 was saved; with a worker, every ingest then failed to
    schedule the run (OverflowError) and the set stopped publishing."""
    resource_set = make_set()
    url = reverse("admin:sources_resourceset_change", args=[resource_set.pk])
    form = capability_form(resource_set, "1 day")
    form["capability_settings-0-regenerate_after_seconds"] = "9223372036854775807"

    response = admin_client.post(url, form)

    assert response.status_code == 200
    assert "less than or equal to 315360000" in response.content.decode()


def test_a_relative_resource_root_is_refused_by_name(admin_client):
    """It was saved, and each process then read files relative to where it started."""
    resource_set = make_set()
    url = reverse("admin:sources_resourceset_change", args=[resource_set.pk])
    form = {**capability_form(resource_set, "1 day"), "resource_root_dir": "relative/dir"}

    response = admin_client.post(url, form)

    assert response.status_code == 200
    assert "Give an absolute directory" in response.content.decode()


def test_lists_show_times_to_the_second(admin_client):
    created(make_set(), 1)
    Change.objects.update(datetime=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    html = admin_client.get(reverse("admin:sources_change_changelist")).content.decode()
    assert "2026-01-02 03:04:05" in html


def column_headers(admin_client) -> list[str]:
    html = admin_client.get(reverse("admin:sources_change_changelist")).content.decode()
    return re.findall(r'<th scope="col" class="[^"]*column-(\w+)', html)


def test_the_indexed_column_shows_only_when_a_mirror_is_in_use(admin_client, settings):
    created(make_set(), 1)
    assert not mirror_in_use()
    assert "indexed" not in column_headers(admin_client)
    settings.RESOURCESYNC_GENERATORS = {"default": {"BACKEND": ELASTICSEARCH_GENERATOR}}
    assert mirror_in_use()
    assert "indexed" in column_headers(admin_client)


def prepopulated(html: str) -> list[dict[str, object]]:
    found = re.search(r'data-prepopulated-fields="([^"]*)"', html)
    assert found, "no prepopulated fields on the page"
    return json.loads(found[1].replace("&quot;", '"'))


def test_the_set_slug_is_prefilled_from_its_name(admin_client):
    html = admin_client.get(reverse("admin:sources_resourceset_add")).content.decode()
    assert {"id": "#id_slug", "name": "slug", "dependency_ids": ["#id_name"]}.items() <= (
        prepopulated(html)[0].items()
    )
    provider = DataProvider.objects.create(name="Acme", slug="acme")
    page = admin_client.get(reverse("admin:sources_dataprovider_change", args=[provider.pk]))
    fields = prepopulated(page.content.decode())
    assert any(
        field["name"] == "slug" and "name" in str(field["dependency_list"]) for field in fields
    )


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("http://ex.org/a#b#c/", "no query or fragment"),  # every event was then refused
        ("http://ex.org/a%zz/", "not a valid URI"),
        ("http://ex.org/?q=1", "no query or fragment"),  # published http://ex.org/?q=1/a.txt
        ("http://127.0.0.1:99999/x/", "with a port from 1 to 65535"),
        ("http://user:pw@ex.org/x/", "no user name or password"),
        ("ftp://x.org/y/", "Give an http:// or https:// URL"),
        # Characters RFC 3986 allows nowhere: every URI under the prefix would be no URI.
        ("http://ex.org/a<b>/", "percent-encode it as %3C"),
        ('http://ex.org/"a"/', "percent-encode it as %22"),
        ("http://ex.org/a|b/", "percent-encode it as %7C"),
    ],
)
def test_a_url_prefix_that_cannot_start_a_resource_uri_is_refused_by_name(
    admin_client, prefix, message
):
    resource_set = make_set()
    url = reverse("admin:sources_resourceset_change", args=[resource_set.pk])
    form = {**capability_form(resource_set, "1 day"), "url_prefix": prefix}

    response = admin_client.post(url, form)

    assert response.status_code == 200
    assert message in response.content.decode()
    resource_set.refresh_from_db()
    assert resource_set.url_prefix == "http://data.example.org/acme/articles/"


def test_a_usable_url_prefix_is_saved(admin_client):
    resource_set = make_set()
    url = reverse("admin:sources_resourceset_change", args=[resource_set.pk])
    prefix = "https://data.example.org:8443/acme/a%20b/~c/"
    form = {**capability_form(resource_set, "1 day"), "url_prefix": prefix}

    assert admin_client.post(url, form).status_code == 302
    resource_set.refresh_from_db()
    assert resource_set.url_prefix == prefix


@pytest.mark.parametrize("field", ["slug", "provider"])
def test_a_published_set_keeps_its_place_in_every_url(admin_client, field):
    """A new slug or provider left every published document naming the old URLs, which
    then answered 404, and moved every /files/ resource URI."""
    resource_set = make_set()
    created(resource_set, 1)
    other = DataProvider.objects.create(slug="other", name="Other")
    url = reverse("admin:sources_resourceset_change", args=[resource_set.pk])
    form = capability_form(resource_set, "1 day")
    form[field] = "renamed" if field == "slug" else other.pk

    response = admin_client.post(url, form)

    assert response.status_code == 200
    assert "cannot change" in response.content.decode()
    resource_set.refresh_from_db()
    assert resource_set.path == "acme/articles"


@pytest.mark.django_db(transaction=True)
def test_a_set_without_changes_may_mend_a_mistyped_slug(admin_client, client, settings, tmp_path):
    """Before any change, nothing but its empty documents names the set's path: they are
    rewritten under the new one."""
    store_documents_in(settings, tmp_path / "documents")
    provider = DataProvider.objects.create(slug="acme", name="Acme")
    form = {**ADMIN_FORM, "provider": provider.pk, "slug": "artciles"}
    assert admin_client.post(reverse("admin:sources_resourceset_add"), form).status_code == 302
    resource_set = ResourceSet.objects.get()
    form.update(
        {
            "slug": "articles",
            "capability_settings-INITIAL_FORMS": "1",
            "capability_settings-0-id": resource_set.capability_settings.pk,
            "capability_settings-0-resource_set": resource_set.pk,
        }
    )
    url = reverse("admin:sources_resourceset_change", args=[resource_set.pk])

    assert admin_client.post(url, form).status_code == 302

    listing = client.get("/resourcesync/acme/articles/resourcelist.xml")
    assert listing.status_code == 200
    body = b"".join(listing.streaming_content)
    assert b"/resourcesync/acme/articles/capabilitylist.xml" in body
    assert b"artciles" not in body


def test_a_provider_with_sets_keeps_its_slug_and_one_without_may_change_it(admin_client):
    with_sets = make_set().provider
    without = DataProvider.objects.create(slug="empty", name="Empty")

    def rename(provider: DataProvider) -> int:
        url = reverse("admin:sources_dataprovider_change", args=[provider.pk])
        form = {
            "name": provider.name,
            "slug": provider.slug + "-renamed",
            "contact": "",
            "active": "on",
            "resource_sets-TOTAL_FORMS": "0",
            "resource_sets-INITIAL_FORMS": "0",
            "resource_sets-MIN_NUM_FORMS": "0",
            "resource_sets-MAX_NUM_FORMS": "1000",
        }
        if provider == with_sets:
            set_pk = with_sets.resource_sets.get().pk
            form.update(
                {
                    "resource_sets-TOTAL_FORMS": "1",
                    "resource_sets-INITIAL_FORMS": "1",
                    "resource_sets-0-id": set_pk,
                    "resource_sets-0-provider": provider.pk,
                    "resource_sets-0-name": "articles",
                    "resource_sets-0-slug": "articles",
                    "resource_sets-0-url_prefix": "http://data.example.org/acme/articles/",
                }
            )
        response = admin_client.post(url, form)
        assert response.status_code in (200, 302)
        if response.status_code == 200:
            assert "cannot change" in response.content.decode()
        return response.status_code

    assert rename(with_sets) == 200
    assert rename(without) == 302
    assert set(DataProvider.objects.values_list("slug", flat=True)) == {"acme", "empty-renamed"}


def add_token(admin_client, **fields):
    return admin_client.post(reverse("admin:sources_apitoken_add"), {"name": "t", **fields})


def test_a_token_is_added_in_force_and_the_form_offers_no_revoked_box(admin_client):
    """Ticking "Revoked" on the add form was ignored: the token was stored and worked."""
    provider = DataProvider.objects.create(slug="acme", name="Acme")
    form = admin_client.get(reverse("admin:sources_apitoken_add")).content.decode()
    assert 'name="revoked"' not in form

    response = add_token(admin_client, provider=provider.pk, revoked="on")

    assert response.status_code == 302
    assert ApiToken.objects.get().in_force


def test_a_token_that_could_reach_nothing_is_refused_by_name(admin_client, django_user_model):
    """A non-staff user's token without a provider was issued, and answered 403 everywhere."""
    user = django_user_model.objects.create_user("reader", password="x" * 20)

    response = add_token(admin_client, user=user.pk)

    assert response.status_code == 200
    html = response.content.decode()
    assert "Only a staff user" in html
    assert not ApiToken.objects.exists()

    response = add_token(admin_client)  # no owner at all: one message, not two

    assert response.status_code == 200
    html = response.content.decode()
    assert html.count("A token belongs to a provider or to a staff user.") == 1
    assert "is violated" not in html


def test_the_url_prefix_is_a_field_not_a_link(admin_client):
    """The admin's URL widget linked "Currently:" to the prefix, a folder that answers 404."""
    resource_set = make_set()
    url = reverse("admin:sources_resourceset_change", args=[resource_set.pk])

    html = admin_client.get(url).content.decode()

    assert 'name="url_prefix" value="http://data.example.org/acme/articles/"' in html
    assert 'href="http://data.example.org/acme/articles/"' not in html


def test_the_resource_root_dir_input_is_as_wide_as_the_url_prefix(admin_client):
    """The admin's 20em text input cut a folder's path off."""
    html = admin_client.get(reverse("admin:sources_resourceset_add")).content.decode()
    (root,) = re.findall(r'<input [^>]*name="resource_root_dir"[^>]*>', html)
    (prefix,) = re.findall(r'<input [^>]*name="url_prefix"[^>]*>', html)
    assert 'size="60"' in root and 'size="60"' in prefix and "vTextField" not in root


def test_the_token_of_a_user_who_left_the_staff_can_still_be_revoked(
    admin_client, django_user_model
):
    """Every save of it was refused once its user was no longer staff."""
    user = django_user_model.objects.create_user("former", password="x" * 20, is_staff=True)
    token, _ = ApiToken.issue(user=user, name="t")
    user.is_staff = False
    user.save()
    url = reverse("admin:sources_apitoken_change", args=[token.pk])

    response = admin_client.post(url, {"name": "t", "user": user.pk, "revoked": "on"})

    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked
