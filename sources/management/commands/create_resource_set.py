"""Create or update a resource set (and its provider) from a script."""

from __future__ import annotations

import argparse
import os
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from sources.generators import get_generator
from sources.models import DataProvider, ResourceSet


class Command(BaseCommand):
    help = (
        "Create a resource set, and its provider if needed. If the set exists, the given "
        "options update it, so the command can run on every deployment."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("provider", help="Provider slug; the provider is created if missing.")
        parser.add_argument("set", help="Resource set slug.")
        parser.add_argument(
            "--url-prefix",
            required=True,
            help="Prefix joined to abs_path and rel_path locations (http or https URL).",
        )
        parser.add_argument(
            "--resource-root",
            help="Absolute directory that abs_path locations must lie inside.",
        )
        parser.add_argument(
            "--protected",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="Documents need a token of the provider (default for a new set: public).",
        )
        parser.add_argument("--name", help="Set name (default: the set slug).")
        parser.add_argument("--description", help="Set description.")
        parser.add_argument(
            "--provider-name", help="Name of a provider created now (default: its slug)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if urlsplit(options["url_prefix"]).scheme not in {"http", "https"}:
            raise CommandError("--url-prefix must be an http or https URL.")
        root = options["resource_root"]
        if root and not os.path.isabs(root):
            raise CommandError("--resource-root must be an absolute path.")
        # Asked first: with the copy down, the work after the commit fails, with a
        # traceback per retry; nothing is saved, and the one line says so.
        down = get_generator().unavailable()
        if down is not None:
            raise CommandError(f"{down}: nothing was saved; run this again once it answers.")
        try:
            with transaction.atomic():
                resource_set, created = self._save(options)
        except ValidationError as exc:
            messages = "; ".join(
                f"{field}: {' '.join(errors)}" for field, errors in exc.message_dict.items()
            )
            raise CommandError(messages) from exc
        verb = "Created" if created else "Updated"
        self.stdout.write(self.style.SUCCESS(f"{verb} resource set {resource_set.path}."))

    def _save(self, options: dict[str, Any]) -> tuple[ResourceSet, bool]:
        provider = DataProvider.objects.filter(slug=options["provider"]).first()
        if provider is None:
            provider = DataProvider(
                slug=options["provider"], name=options["provider_name"] or options["provider"]
            )
            provider.full_clean()
            provider.save()
        resource_set = ResourceSet.objects.filter(provider=provider, slug=options["set"]).first()
        created = resource_set is None
        if resource_set is None:
            resource_set = ResourceSet(provider=provider, slug=options["set"], name=options["set"])
        resource_set.url_prefix = options["url_prefix"]
        for option, attribute in (
            ("resource_root", "resource_root_dir"),
            ("protected", "protected"),
            ("name", "name"),
            ("description", "description"),
        ):
            if options[option] is not None:
                setattr(resource_set, attribute, options[option])
        resource_set.full_clean()
        resource_set.save()
        return resource_set, created
