"""factory-boy factories for the sources models."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import factory
from django.contrib.auth import get_user_model

from sitemaps.protocol.constants import ChangeType
from sources.models import (
    ApiToken,
    Change,
    DataProvider,
    LocationType,
    Resource,
    ResourceSet,
)

FIXED_TIME = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    is_staff = False


class DataProviderFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DataProvider

    slug = factory.Sequence(lambda n: f"provider-{n}")
    name = factory.LazyAttribute(lambda provider: provider.slug.replace("-", " ").title())
    active = True


class ResourceSetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ResourceSet

    provider = factory.SubFactory(DataProviderFactory)
    slug = factory.Sequence(lambda n: f"set-{n}")
    name = factory.LazyAttribute(lambda resource_set: resource_set.slug)
    url_prefix = factory.LazyAttribute(
        lambda resource_set: f"https://data.example.org/{resource_set.slug}/"
    )
    resource_root_dir = ""
    protected = False


class ResourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Resource

    resource_set = factory.SubFactory(ResourceSetFactory)
    location_type = LocationType.REL_PATH
    location_value = factory.Sequence(lambda n: f"files/resource-{n}.txt")
    uri = factory.LazyAttribute(
        lambda resource: resource.resource_set.url_prefix.rstrip("/")
        + "/"
        + resource.location_value
    )
    length = 1024
    md5 = "0cc175b9c0f1b6a831c399e269772661"
    sha256 = ""
    mime = "text/plain"
    lastmod = FIXED_TIME
    ln = factory.LazyFunction(list)
    timestamp = FIXED_TIME


class ChangeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Change

    resource_set = factory.SubFactory(ResourceSetFactory)
    resource_key = None
    change = ChangeType.CREATED
    location_type = LocationType.REL_PATH
    location_value = factory.Sequence(lambda n: f"files/change-{n}.txt")
    uri = factory.LazyAttribute(
        lambda change: change.resource_set.url_prefix.rstrip("/") + "/" + change.location_value
    )
    length = 1024
    md5 = "0cc175b9c0f1b6a831c399e269772661"
    mime = "text/plain"
    lastmod = FIXED_TIME
    ln = factory.LazyFunction(list)
    datetime = FIXED_TIME
    timestamp = FIXED_TIME


class ApiTokenFactory(factory.django.DjangoModelFactory):
    """Issues through `ApiToken.issue`; the plain key is kept on the instance as `plain_key`."""

    class Meta:
        model = ApiToken

    provider = factory.SubFactory(DataProviderFactory)
    user = None
    name = ""

    class Params:
        staff = factory.Trait(provider=None, user=factory.SubFactory(UserFactory, is_staff=True))

    @classmethod
    def _create(cls, model_class: type[ApiToken], *args: Any, **kwargs: Any) -> ApiToken:
        revoked = kwargs.pop("revoked", False)
        token, key = model_class.issue(**kwargs)
        if revoked:
            token.revoked = True
            token.save(update_fields=["revoked"])
        token.plain_key = key
        return token
