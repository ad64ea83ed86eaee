"""Pluggable generators, chosen by the RESOURCESYNC_GENERATORS setting.

Each entry names a BACKEND and the options that backend takes, e.g.
``{"default": {"BACKEND": "...ElasticsearchGenerator", "HOSTS": [...]}}``.
A setting that cannot give a working backend raises `InvalidGeneratorError`,
which names the entry and the cause.
"""

from __future__ import annotations

import copy
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .base import BaseGenerator, ReconcileReport

__all__ = ["BaseGenerator", "InvalidGeneratorError", "ReconcileReport", "get_generator"]

SETTING = "RESOURCESYNC_GENERATORS"

#: Per alias, the settings entry a generator was built from, and the generator.
_built: dict[str, tuple[dict[str, Any], BaseGenerator]] = {}


class InvalidGeneratorError(ImproperlyConfigured):
    """The generator setting names a backend that cannot be imported or built."""


def _entry(alias: str) -> dict[str, Any]:
    configured = getattr(settings, SETTING, {})
    if alias not in configured:
        raise InvalidGeneratorError(f"{SETTING} has no {alias!r} entry.")
    entry = configured[alias]
    if not isinstance(entry, dict) or "BACKEND" not in entry:
        raise InvalidGeneratorError(f"{SETTING}[{alias!r}] must be a dict with a BACKEND.")
    return entry


def _backend_class(alias: str, path: Any) -> type[BaseGenerator]:
    where = f"{SETTING}[{alias!r}]['BACKEND']"
    try:
        backend = import_string(path)
    except (ImportError, TypeError) as error:
        raise InvalidGeneratorError(f"{where} = {path!r} cannot be imported: {error}") from error
    if not (isinstance(backend, type) and issubclass(backend, BaseGenerator)):
        raise InvalidGeneratorError(f"{where} = {path!r} is not a BaseGenerator subclass.")
    return backend


def _build(alias: str, entry: dict[str, Any]) -> BaseGenerator:
    params = dict(entry)
    backend = _backend_class(alias, params.pop("BACKEND"))
    try:
        return backend(params)
    except ImproperlyConfigured as error:
        raise InvalidGeneratorError(f"{SETTING}[{alias!r}]: {error}") from error


def get_generator(alias: str = "default") -> BaseGenerator:
    """The configured generator: one instance per alias, built again if its entry changes."""
    entry = _entry(alias)
    built = _built.get(alias)
    if built is None or built[0] != entry:
        built = copy.deepcopy(entry), _build(alias, entry)
        _built[alias] = built
    return built[1]
