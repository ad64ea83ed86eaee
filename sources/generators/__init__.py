"""Pluggable generators, chosen by the RESOURCESYNC_GENERATORS setting."""

from __future__ import annotations

from functools import cache

from django.conf import settings
from django.utils.module_loading import import_string

from .base import BaseGenerator

__all__ = ["BaseGenerator", "get_generator"]


@cache
def _generator(alias: str, backend: str) -> BaseGenerator:
    config = settings.RESOURCESYNC_GENERATORS[alias]
    params = {key.lower(): value for key, value in config.items() if key != "BACKEND"}
    return import_string(backend)(params)


def get_generator(alias: str = "default") -> BaseGenerator:
    """The configured generator; one instance per alias and backend."""
    return _generator(alias, settings.RESOURCESYNC_GENERATORS[alias]["BACKEND"])
