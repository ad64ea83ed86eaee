"""Absolute URLs of every published document, built from PUBLIC_BASE_URL."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from sources.models import ResourceSet


def absolute(path: str) -> str:
    return settings.PUBLIC_BASE_URL + path


def _set_url(name: str, resource_set: ResourceSet, **kwargs: object) -> str:
    return absolute(
        reverse(
            f"sitemaps:{name}",
            kwargs={
                "provider": resource_set.provider.slug,
                "set_slug": resource_set.slug,
                **kwargs,
            },
        )
    )


def source_description_url() -> str:
    return absolute(reverse("sitemaps:source-description"))


def capability_list_url(resource_set: ResourceSet) -> str:
    return _set_url("capability-list", resource_set)


def resource_list_url(resource_set: ResourceSet) -> str:
    return _set_url("resource-list", resource_set)


def resource_list_page_url(resource_set: ResourceSet, number: int) -> str:
    return _set_url("resource-list-page", resource_set, number=number)


def change_list_url(resource_set: ResourceSet) -> str:
    return _set_url("change-list", resource_set)


def change_list_page_url(resource_set: ResourceSet, number: int) -> str:
    return _set_url("change-list-page", resource_set, number=number)


def change_list_archive_url(resource_set: ResourceSet) -> str:
    return _set_url("change-list-archive", resource_set)
