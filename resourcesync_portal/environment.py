"""Typed readers of the environment for settings.py.

A value the portal cannot use stops it at start with ImproperlyConfigured naming
the variable, rather than a traceback without the name (`int('abc')`), or a
failure per request or per run long after the deploy (a typo in
RESOURCESYNC_DUMP_COMPRESSION failed every dump; a PUBLIC_BASE_URL without a
scheme published relative URLs in every document).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
from collections.abc import Callable
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured

from sitemaps.protocol.uris import base_url_problem, link_target_problem, uri_problem

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
# DRF's SimpleRateThrottle.parse_rate: a count, then a period it reads by first letter.
_RATE = re.compile(r"[0-9]+/[smhd][a-z]*")
# Two slugs, as the admin takes them.
_SET_PATH = re.compile(r"[-a-zA-Z0-9_]+/[-a-zA-Z0-9_]+")


def _refuse(name: str, value: str, expected: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{name} must be {expected}, not {value!r}.")


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    word = value.strip().lower()
    if word not in _TRUE | _FALSE:
        raise _refuse(name, value, "1, true, yes or on, or 0, false, no or off")
    return word in _TRUE


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_int(name: str, default: int, *, minimum: int, maximum: int) -> int:
    expected = f"a whole number from {minimum} to {maximum}"
    return _bounded(name, default, int, minimum, maximum, expected)


def env_seconds(name: str, default: float, *, minimum: float, maximum: float) -> float:
    expected = f"a number of seconds from {minimum:g} to {maximum:g}"
    return _bounded(name, default, float, minimum, maximum, expected)


Number = TypeVar("Number", int, float)


def _bounded(
    name: str,
    default: Number,
    parse: Callable[[str], Number],
    minimum: Number,
    maximum: Number,
    expected: str,
) -> Number:
    """The variable read by `parse`, within the bounds (NaN is within none)."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = parse(value.strip())
    except ValueError:
        raise _refuse(name, value, expected) from None
    if not minimum <= number <= maximum:
        raise _refuse(name, value, expected)
    return number


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default).strip().lower()
    if value not in choices:
        raise _refuse(name, value, ", ".join(choices[:-1]) + " or " + choices[-1])
    return value


def env_log_level(name: str, default: str) -> str:
    """A level name as `logging` knows it (WARN and FATAL too), in any case."""
    value = os.environ.get(name, default).strip().upper()
    if value not in logging.getLevelNamesMapping():
        raise _refuse(name, value, "DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return value


def env_json_object(name: str) -> dict[str, object]:
    value = os.environ.get(name, "{}")
    try:
        options = json.loads(value)
    except ValueError:
        options = None
    if not isinstance(options, dict):
        raise _refuse(name, value, 'a JSON object, e.g. {"bucket_name": "docs"}')
    return options


def env_rate(name: str, default: str) -> str:
    """A rate as DRF's throttles read it, e.g. 100000/hour (else every API call fails)."""
    value = os.environ.get(name, default).strip()
    if not _RATE.fullmatch(value):
        raise _refuse(name, value, "a count per second, minute, hour or day, e.g. 1000/hour")
    return value


def env_networks(name: str) -> list[str]:
    """IP networks, comma-separated; checked now, not at the first request that needs them."""
    networks = env_list(name)
    for network in networks:
        try:
            ipaddress.ip_network(network)
        except ValueError:
            raise _refuse(name, network, "a network such as 10.0.0.0/8 or fd00::/8") from None
    return networks


def env_set_paths(name: str) -> list[str]:
    """`provider/set` paths, comma-separated (whether each set exists is told per scan)."""
    paths = env_list(name)
    for path in paths:
        if not _SET_PATH.fullmatch(path):
            raise _refuse(name, path, "provider/set paths such as acme/articles")
    return paths


def env_url(name: str) -> str:
    """An absolute http(s) URL published as it is (a hub's), or empty: unset.

    WebSub sets no rule on a hub's URL, so its query (a tenant, a key) is the hub's
    own; a fragment never reaches the hub, and a user would be in every Link header.
    """
    value = os.environ.get(name, "").strip()
    return checked_hub_url(name, value) if value else value


def checked_hub_url(name: str, value: str) -> str:
    """`value`, if a hub's URL may be it (else ImproperlyConfigured naming `name`)."""
    _check_link_target(name, value)
    base, _, query = value.partition("?")
    if _unprintable(value) or "#" in query or base_url_problem(base):
        raise _refuse(name, value, "an absolute http:// or https:// URL without user or fragment")
    if uri_problem(value):
        raise _refuse(name, value, "a URL the ResourceSync schemas take (percent-encode '%')")
    return value


def env_base_url(name: str, default: str) -> str:
    """An absolute http(s) URL that starts valid <loc>s: every document's URLs start with it."""
    return _checked_url(name, os.environ.get(name, default).strip().rstrip("/"))


def _unprintable(value: str) -> bool:
    return any(char.isspace() or not char.isprintable() for char in value)


def _checked_url(name: str, value: str) -> str:
    _check_link_target(name, value)
    if _unprintable(value) or base_url_problem(value) is not None:
        raise _refuse(
            name, value, "an absolute http:// or https:// URL without user, query or fragment"
        )
    return value


def _check_link_target(name: str, value: str) -> None:
    """The portal's and the hub's URLs start the targets of the Link headers it sends."""
    problem = link_target_problem(value)
    if problem is not None:
        raise ImproperlyConfigured(f"{name} {problem}, not {value!r}.")
