"""Issue an API token from a script; the key is shown once and only its hash is kept."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sources.models import ApiToken, DataProvider


class Command(BaseCommand):
    help = (
        "Issue an API token for a provider (or, with --staff-user, a staff token that "
        "reaches every set) and print its key. Store the key now: it cannot be shown again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("provider", nargs="?", help="Slug of the provider owning the token.")
        parser.add_argument(
            "--staff-user", metavar="USERNAME", help="Issue a staff token for this staff user."
        )
        parser.add_argument("--name", default="", help="A label to tell tokens apart.")

    def handle(self, *args: Any, **options: Any) -> None:
        slug, username = options["provider"], options["staff_user"]
        if bool(slug) == bool(username):
            raise CommandError("Give either a provider slug or --staff-user USERNAME.")
        if slug:
            provider = DataProvider.objects.filter(slug=slug).first()
            if provider is None:
                raise CommandError(f"No provider {slug!r}.")
            token, key = ApiToken.issue(provider=provider, name=options["name"])
            owner = f"provider {slug}"
        else:
            user_model = get_user_model()
            user = user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).first()
            if user is None or not user.is_staff:
                raise CommandError(f"No staff user {username!r}.")
            token, key = ApiToken.issue(user=user, name=options["name"])
            owner = f"staff user {username}"
        # Only the key goes to stdout, so a script can capture it: KEY=$(manage.py ...).
        self.stdout.write(key)
        self.stderr.write(
            f"Issued token {token.prefix}… for {owner}. The key above is shown only once.",
            style_func=self.style.WARNING,
        )
