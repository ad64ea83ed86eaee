"""Load a demo provider and set backed by real small files, and a staff login."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from sitemaps.regeneration import regenerate
from sources.events import Event, LinkData
from sources.locations import resolve_location
from sources.models import (
    ApiToken,
    CapabilitySettings,
    DataProvider,
    LocationType,
    ResourceSet,
    hash_token,
)
from sources.services import ingest_events

CREDENTIALS_FILE = "demo-credentials.json"


def demo_url_prefix() -> str:
    return f"{settings.PUBLIC_BASE_URL}/files/demo/articles/"


class DemoCredentials:
    """The demo's staff login and API token, created once and kept.

    The plain password and key exist nowhere else (the database keeps hashes),
    so the first run writes them to a file only its owner can read; later runs
    show them again while they still work, or say how to reset them.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.saved: dict[str, str] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.saved = {}

    def save(self, **values: str) -> None:
        self.saved.update(values)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(self.saved, handle, indent=2)

    def staff_login(self, username: str) -> str:
        """Create the staff user with a new password once; afterwards leave it alone."""
        user, created = get_user_model().objects.get_or_create(username=username)
        user.is_staff = user.is_superuser = True
        if created or not user.password or not user.has_usable_password():
            password = secrets.token_urlsafe(12)
            user.set_password(password)
            self.save(username=username, password=password)
        user.save()
        password = self.saved.get("password", "")
        if self.saved.get("username") == username and password and user.check_password(password):
            return f"Admin login: {username} / {password} (kept in {self.path})"
        return (
            f"Admin login: {username}, with the password set earlier (kept); "
            f"to reset it: manage.py changepassword {username}"
        )

    def provider_token(self, provider: DataProvider) -> str:
        """Issue the provider's demo token once; afterwards show it or say how to get one."""
        tokens = ApiToken.objects.filter(provider=provider, name="demo", revoked=False)
        key = self.saved.get("token", "")
        if key and tokens.filter(key_hash=hash_token(key)).exists():
            return f"API token for provider '{provider.slug}': {key} (kept in {self.path})"
        if not tokens.exists():
            _, key = ApiToken.issue(provider=provider, name="demo")
            self.save(token=key)
            return f"API token for provider '{provider.slug}': {key} (kept in {self.path})"
        return (
            f"API token for provider '{provider.slug}': issued earlier (kept; its key was "
            f"shown once); to issue another: manage.py create_api_token {provider.slug}"
        )


class Command(BaseCommand):
    help = "Create demo data: articles with linked metadata records, updates and deletes."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--articles", type=int, default=2000)
        parser.add_argument("--username", default="admin")

    def handle(self, *args, articles: int, username: str, **options) -> None:
        provider, _ = DataProvider.objects.get_or_create(
            slug="demo", defaults={"name": "Demo publisher", "contact": "demo@example.org"}
        )
        root = Path(settings.DATA_DIR) / "demo-files" / "articles"
        self.follow_public_base_url(provider)
        resource_set, created = ResourceSet.objects.get_or_create(
            provider=provider,
            slug="articles",
            defaults={
                "name": "Demo articles",
                "description": "Small text articles, each described by a metadata record.",
                "url_prefix": demo_url_prefix(),
                "resource_root_dir": str(root),
            },
        )
        CapabilitySettings.objects.get_or_create(
            resource_set=resource_set, defaults={"entries_per_document": 1000}
        )
        if created or not resource_set.resources.exists():
            self.load(resource_set, root, articles)
        else:
            self.stdout.write(
                f"The demo set was already loaded: --articles (DEMO_ARTICLES) sizes a new one "
                f"(remove {settings.DATA_DIR} to load it again)."
            )
        credentials = DemoCredentials(Path(settings.DATA_DIR) / CREDENTIALS_FILE)
        login = credentials.staff_login(username)
        token = credentials.provider_token(provider)
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo set {resource_set.path}: {resource_set.resources.count()} resources, "
                f"{resource_set.changes.count()} changes.\n{login}\n{token}"
            )
        )

    def follow_public_base_url(self, provider: DataProvider) -> None:
        """Move the demo set to this PUBLIC_BASE_URL when it was loaded for another: saving
        its url_prefix resolves its stored URIs again and rewrites its documents
        (sitemaps.receivers), so the resources and their history are kept."""
        resource_set = ResourceSet.objects.filter(provider=provider, slug="articles").first()
        if resource_set is None or resource_set.url_prefix == demo_url_prefix():
            return
        self.stdout.write(
            self.style.WARNING(
                f"The demo set was loaded for {resource_set.url_prefix}; moving it to "
                f"PUBLIC_BASE_URL {settings.PUBLIC_BASE_URL} (its documents are rewritten)."
            )
        )
        resource_set.url_prefix = demo_url_prefix()
        resource_set.save()

    def load(self, resource_set: ResourceSet, root: Path, articles: int) -> None:
        root.mkdir(parents=True, exist_ok=True)
        created = [self.write(resource_set, root, n, version=1) for n in range(1, articles + 1)]
        self.ingest(resource_set, [event for pair in created for event in pair])
        updated = [self.write(resource_set, root, n, version=2) for n in range(1, articles, 10)]
        self.ingest(resource_set, [event for pair in updated for event in pair])
        deleted = []
        for n in range(5, articles, 40):
            for name in (f"article-{n:05d}.txt", f"article-{n:05d}.xml"):
                path = root / name
                path.unlink(missing_ok=True)
                deleted.append(
                    Event(
                        change="deleted",
                        location_type=LocationType.ABS_PATH,
                        location_value=str(path),
                        uri=self.uri(resource_set, str(path)),
                    )
                )
        self.ingest(resource_set, deleted)
        regenerate(resource_set)

    def ingest(self, resource_set: ResourceSet, events: list[Event]) -> None:
        ingest_events(resource_set=resource_set, events=events)

    def uri(self, resource_set: ResourceSet, path: str) -> str:
        return resolve_location(
            LocationType.ABS_PATH,
            path,
            url_prefix=resource_set.url_prefix,
            resource_root_dir=resource_set.resource_root_dir,
        )

    def write(self, resource_set: ResourceSet, root: Path, n: int, version: int) -> list[Event]:
        """Write one article and its metadata record; return their two events."""
        change = "created" if version == 1 else "updated"
        text = root / f"article-{n:05d}.txt"
        record = root / f"article-{n:05d}.xml"
        text.write_text(f"Demo article {n}, version {version}.\n" + "Lorem ipsum. " * (n % 20))
        record.write_text(
            f'<?xml version="1.0"?>\n<record><title>Demo article {n}</title>'
            f"<version>{version}</version></record>\n"
        )
        events = []
        for path, mime, rel, other in (
            (text, "text/plain", "describedby", record),
            (record, "application/xml", "describes", text),
        ):
            content = path.read_bytes()
            link = LinkData(
                rel=rel,
                href_type=LocationType.ABS_PATH,
                href_value=str(other),
                mime="application/xml" if rel == "describedby" else "text/plain",
                uri=self.uri(resource_set, str(other)),
            )
            events.append(
                Event(
                    change=change,
                    location_type=LocationType.ABS_PATH,
                    location_value=str(path),
                    uri=self.uri(resource_set, str(path)),
                    length=len(content),
                    md5=hashlib.md5(content, usedforsecurity=False).hexdigest(),
                    sha256=hashlib.sha256(content).hexdigest(),
                    mime=mime,
                    lastmod=datetime.fromtimestamp(path.stat().st_mtime, tz=UTC),
                    links=(link,),
                )
            )
        return events
