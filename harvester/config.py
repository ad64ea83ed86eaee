"""The harvester's YAML configuration, checked key by key.

Only `destination` and where the source is are required: either a Capability
List, or a `source_url` from which the harvester discovers it::

    capability_list_url: https://example.org/resourcesync/capabilitylist.xml
    # or, instead: a Source Description (every set it lists is harvested, each into
    # its own folder, unless `set` names one), or a site's base URL (the harvester
    # tries /.well-known/resourcesync, robots.txt, then a rel="resourcesync" link)
    source_url: https://example.org/
    set: articles                      # with source_url: only the set whose Capability
                                       # List URL is this, or whose folder ends in /articles
    destination: /srv/mirror           # relative paths are taken from the file's folder
    bearer_token_env: SOURCE_TOKEN     # or bearer_token: "..." (prefer the environment)
    hash_algorithms: [md5, sha-256]    # digests verified when the source gives them
    concurrency: 4                     # parallel downloads
    timeout: 30                        # seconds, per connect and per read
    min_rate: 1024                     # bytes a second: a download that brings fewer over
                                       #   `timeout` seconds fails (retried); 0: no minimum
    retries: 3                         # extra attempts after a network error or a 5xx
    backoff: 0.5                       # seconds before the first retry, doubled each time
    max_document_bytes: 62914560       # larger ResourceSync documents are refused
    max_resource_bytes: 1073741824     # larger resources (and dump packages) fail, 1 GiB;
                                       # the only bound on one listed without a length
    use_dumps: true                    # prefer Resource/Change Dumps when advertised
    callback_host: 0.0.0.0             # --follow: where the WebSub callback listens,
    callback_port: 8765                #   on which port (0: any free one),
    callback_url: https://me.example.org/hooks  # the address the hub calls (default:
                                       #   http://callback_host:callback_port)
    lease_seconds: 86400               #   and the lease asked for (renewed before its end)
    delete: true                       # remove local copies of deleted resources
    allowed_hosts: [example.org]       # where we may fetch from, redirects included:
        # `example.org`: it and its subdomains, http and https on their default ports;
        # `example.org:8080`: the same on that port; `https://example.org:8443`: that
        # scheme and port only. Default: the origin (scheme, host, port) of the URL
        # given above, its subdomains, and for http on port 80 also https on port 443.
    allowed_networks: [10.0.0.0/8]     # private addresses we may connect to. Default: none
        # but addresses written out in the URL or allowed_hosts, and loopback for
        # `localhost` (a name's DNS answer opens nothing: the source controls it).
        # Hubs included, but a hub outside allowed_hosts only on a public address.
        # With a proxy in the environment the proxy connects, and neither these
        # nor min_rate apply.

Unknown keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from resourcesync_portal.addresses import IPNetwork
from sitemaps.protocol.reader import DEFAULT_MAX_BYTES

SUPPORTED_HASHES = ("md5", "sha-256")
#: The largest resource copied unless `max_resource_bytes` says otherwise: 1 GiB.
DEFAULT_MAX_RESOURCE_BYTES = 1024**3
DEFAULT_PORTS = {"http": 80, "https": 443}

_KNOWN_KEYS = frozenset(
    {
        "capability_list_url",
        "source_url",
        "set",
        "destination",
        "bearer_token",
        "bearer_token_env",
        "hash_algorithms",
        "concurrency",
        "timeout",
        "min_rate",
        "retries",
        "backoff",
        "max_document_bytes",
        "max_resource_bytes",
        "use_dumps",
        "delete",
        "allowed_hosts",
        "allowed_networks",
        "callback_host",
        "callback_port",
        "callback_url",
        "lease_seconds",
    }
)


class ConfigError(ValueError):
    """A configuration value is missing or invalid; `key` names the culprit."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config key {key!r}: {message}")
        self.key = key


@dataclass(frozen=True, slots=True)
class HarvestConfig:
    """Everything one harvest needs to know about its source and destination.

    `source_url` is the URL the user gave; `capability_list_url` is known from
    the start when that is a Capability List, else once discovery has found it.
    """

    source_url: str
    destination: Path
    capability_list_url: str | None = None
    set_name: str | None = None
    bearer_token: str | None = None
    hash_algorithms: tuple[str, ...] = SUPPORTED_HASHES
    concurrency: int = 4
    timeout: float = 30.0
    min_rate: float = 1024.0
    retries: int = 3
    backoff: float = 0.5
    max_document_bytes: int = DEFAULT_MAX_BYTES
    max_resource_bytes: int = DEFAULT_MAX_RESOURCE_BYTES
    use_dumps: bool = True
    delete: bool = True
    allowed_hosts: tuple[str, ...] = ()
    allowed_networks: tuple[IPNetwork, ...] = ()
    #: --follow: where the WebSub callback listens (port 0: any free port), the URL the
    #: hub is given for it (when it differs, e.g. behind a proxy), and the lease asked for.
    callback_host: str = "127.0.0.1"
    callback_port: int = 0
    callback_url: str | None = None
    lease_seconds: int = 86400
    #: `harvest --delete`: a baseline also removes local files the source no longer lists.
    delete_unlisted: bool = False

    def require_capability_list_url(self) -> str:
        """The Capability List's URL, which a `source_url` only gives after discovery."""
        if self.capability_list_url is None:
            raise ValueError(f"no Capability List discovered yet from {self.source_url}")
        return self.capability_list_url

    @property
    def source_origin(self) -> str:
        """Scheme, host and port of the URL the user gave: the only place a token goes."""
        parts = urlsplit(self.source_url)
        return f"{parts.scheme}://{parts.netloc}".lower()


def load_config(path: str | os.PathLike[str]) -> HarvestConfig:
    """Read and check a YAML configuration file."""
    config_path = Path(path)
    try:
        text = config_path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError("file", f"cannot read {config_path}: {error}") from error
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError("file", f"{config_path} is not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError("file", f"{config_path} must hold a mapping of keys to values")
    return config_from_mapping(data, base_dir=config_path.resolve().parent)


def config_from_mapping(data: dict[str, Any], *, base_dir: Path) -> HarvestConfig:
    """Build a checked config from already-parsed values."""
    unknown = sorted(set(map(str, data)) - _KNOWN_KEYS)
    if unknown:
        raise ConfigError(unknown[0], "unknown key")
    url, capability_list_url = _source(data)
    destination = Path(_required_string(data, "destination")).expanduser()
    return HarvestConfig(
        source_url=url,
        capability_list_url=capability_list_url,
        set_name=_required_string(data, "set") if "set" in data else None,
        destination=destination if destination.is_absolute() else base_dir / destination,
        bearer_token=_bearer_token(data),
        hash_algorithms=_hash_algorithms(data),
        concurrency=_integer(data, "concurrency", 4, minimum=1, maximum=64),
        timeout=_number(data, "timeout", 30.0),
        min_rate=_number(data, "min_rate", 1024.0, allow_zero=True, unit="bytes a second"),
        retries=_integer(data, "retries", 3, minimum=0, maximum=20),
        backoff=_number(data, "backoff", 0.5, allow_zero=True),
        max_document_bytes=_integer(data, "max_document_bytes", DEFAULT_MAX_BYTES, minimum=1),
        max_resource_bytes=_integer(
            data, "max_resource_bytes", DEFAULT_MAX_RESOURCE_BYTES, minimum=1
        ),
        use_dumps=_boolean(data, "use_dumps", True),
        delete=_boolean(data, "delete", True),
        allowed_hosts=_allowed_hosts(data, url),
        allowed_networks=_allowed_networks(data),
        callback_host=_required_string(data, "callback_host")
        if "callback_host" in data
        else "127.0.0.1",
        callback_port=_integer(data, "callback_port", 0, minimum=0, maximum=65535),
        callback_url=_required_url(data, "callback_url") if "callback_url" in data else None,
        lease_seconds=_integer(data, "lease_seconds", 86400, minimum=300, maximum=2678400),
    )


def _source(data: dict[str, Any]) -> tuple[str, str | None]:
    """The URL given, and the Capability List's when that is what was given."""
    if "capability_list_url" in data and "source_url" in data:
        raise ConfigError("source_url", "give capability_list_url or source_url, not both")
    if "source_url" in data:
        return _required_url(data, "source_url"), None
    if "set" in data:
        raise ConfigError("set", "picks a set of a source_url; a Capability List is one set")
    if "capability_list_url" not in data:
        raise ConfigError("capability_list_url", "is required, or a source_url to discover it")
    url = _required_url(data, "capability_list_url")
    return url, url


def _required_string(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if value is None:
        raise ConfigError(key, "is required")
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, "must be a non-empty string")
    return value.strip()


def _required_url(data: dict[str, Any], key: str) -> str:
    value = _required_string(data, key)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(key, f"must be an absolute http(s) URL, got {value!r}")
    return value


def _bearer_token(data: dict[str, Any]) -> str | None:
    if "bearer_token" in data and "bearer_token_env" in data:
        raise ConfigError("bearer_token_env", "give bearer_token or bearer_token_env, not both")
    if "bearer_token_env" in data:
        name = _required_string(data, "bearer_token_env")
        token = os.environ.get(name)
        if not token:
            raise ConfigError("bearer_token_env", f"environment variable {name} is not set")
        return token
    if data.get("bearer_token") is None:
        return None
    return _required_string(data, "bearer_token")


def _hash_algorithms(data: dict[str, Any]) -> tuple[str, ...]:
    value = data.get("hash_algorithms", list(SUPPORTED_HASHES))
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError("hash_algorithms", "must be a list such as [md5, sha-256]")
    algorithms = tuple(dict.fromkeys(item.strip().lower() for item in value))
    unsupported = [item for item in algorithms if item not in SUPPORTED_HASHES]
    if unsupported:
        raise ConfigError(
            "hash_algorithms",
            f"unsupported {unsupported[0]!r}; choose from {', '.join(SUPPORTED_HASHES)}",
        )
    return algorithms


def _integer(
    data: dict[str, Any], key: str, default: int, *, minimum: int, maximum: int | None = None
) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(key, f"must be {bounds}, got {value}")
    return value


def _number(
    data: dict[str, Any],
    key: str,
    default: float,
    *,
    allow_zero: bool = False,
    unit: str = "seconds",
) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, f"must be a number of {unit}, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(key, f"must be positive, got {value}")
    return float(value)


def _boolean(data: dict[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r}")
    return value


def _allowed_hosts(data: dict[str, Any], url: str) -> tuple[str, ...]:
    """Normalised origins, `scheme://host:port`; a host also covers its subdomains."""
    value = data.get("allowed_hosts")
    if value is None:
        parts = urlsplit(url)
        origin = _origin(parts.scheme, str(parts.hostname), parts.port)
        if parts.scheme == "http" and (parts.port or 80) == 80:
            return (origin, _origin("https", str(parts.hostname), None))
        return (origin,)
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(item, str) and item.strip() for item in value)
    ):
        raise ConfigError("allowed_hosts", "must be a non-empty list of host names")
    return tuple(origin for item in value for origin in _allowed_origins(item.strip()))


def _allowed_networks(data: dict[str, Any]) -> tuple[IPNetwork, ...]:
    """Networks such as `10.0.0.0/8`, or single addresses."""
    value = data.get("allowed_networks", [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError("allowed_networks", "must be a list of networks such as 10.0.0.0/8")
    try:
        return tuple(ipaddress.ip_network(item.strip(), strict=False) for item in value)
    except ValueError as error:
        raise ConfigError("allowed_networks", str(error)) from error


def _allowed_origins(item: str) -> list[str]:
    """`host`, `host:port` or `scheme://host[:port]` as the origins it allows."""
    parts = urlsplit(item if "://" in item else f"//{item}")
    try:
        port = parts.port
    except ValueError:
        port = -1
    schemes = [parts.scheme.lower()] if parts.scheme else list(DEFAULT_PORTS)
    if (
        not parts.hostname
        or port == -1
        or parts.path
        or parts.query
        or any(scheme not in DEFAULT_PORTS for scheme in schemes)
    ):
        raise ConfigError(
            "allowed_hosts",
            f"{item!r} is not a host, host:port or http(s)://host[:port] such as example.org",
        )
    return [_origin(scheme, parts.hostname, port) for scheme in schemes]


def _origin(scheme: str, host: str, port: int | None) -> str:
    """`scheme://host:port` with the default port written out, the host lower-cased."""
    scheme = scheme.lower()
    return f"{scheme}://{host.lower().rstrip('.')}:{port or DEFAULT_PORTS[scheme]}"
