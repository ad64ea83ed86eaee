"""The harvester's YAML configuration, checked key by key.

Only `capability_list_url` and `destination` are required::

    capability_list_url: https://example.org/resourcesync/capabilitylist.xml
    destination: /srv/mirror           # relative paths are taken from the file's folder
    bearer_token_env: SOURCE_TOKEN     # or bearer_token: "..." (prefer the environment)
    hash_algorithms: [md5, sha-256]    # digests verified when the source gives them
    concurrency: 4                     # parallel downloads
    timeout: 30                        # seconds, per connect and per read
    retries: 3                         # extra attempts after a network error or a 5xx
    backoff: 0.5                       # seconds before the first retry, doubled each time
    max_document_bytes: 62914560       # larger ResourceSync documents are refused
    use_dumps: true                    # prefer Resource/Change Dumps when advertised
    delete: true                       # remove local copies of deleted resources
    allowed_hosts: [example.org]       # hosts (and their subdomains) we may fetch from

Unknown keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from sitemaps.reader import DEFAULT_MAX_BYTES

SUPPORTED_HASHES = ("md5", "sha-256")

_KNOWN_KEYS = frozenset(
    {
        "capability_list_url",
        "destination",
        "bearer_token",
        "bearer_token_env",
        "hash_algorithms",
        "concurrency",
        "timeout",
        "retries",
        "backoff",
        "max_document_bytes",
        "use_dumps",
        "delete",
        "allowed_hosts",
    }
)


class ConfigError(ValueError):
    """A configuration value is missing or invalid; `key` names the culprit."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config key {key!r}: {message}")
        self.key = key


@dataclass(frozen=True, slots=True)
class HarvestConfig:
    """Everything one harvest needs to know about its source and destination."""

    capability_list_url: str
    destination: Path
    bearer_token: str | None = None
    hash_algorithms: tuple[str, ...] = SUPPORTED_HASHES
    concurrency: int = 4
    timeout: float = 30.0
    retries: int = 3
    backoff: float = 0.5
    max_document_bytes: int = DEFAULT_MAX_BYTES
    use_dumps: bool = True
    delete: bool = True
    allowed_hosts: tuple[str, ...] = ()

    @property
    def source_origin(self) -> str:
        """Scheme, host and port of the Capability List: the only place a token goes."""
        parts = urlsplit(self.capability_list_url)
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
    url = _required_url(data, "capability_list_url")
    destination = Path(_required_string(data, "destination")).expanduser()
    return HarvestConfig(
        capability_list_url=url,
        destination=destination if destination.is_absolute() else base_dir / destination,
        bearer_token=_bearer_token(data),
        hash_algorithms=_hash_algorithms(data),
        concurrency=_integer(data, "concurrency", 4, minimum=1, maximum=64),
        timeout=_number(data, "timeout", 30.0),
        retries=_integer(data, "retries", 3, minimum=0, maximum=20),
        backoff=_number(data, "backoff", 0.5, allow_zero=True),
        max_document_bytes=_integer(data, "max_document_bytes", DEFAULT_MAX_BYTES, minimum=1),
        use_dumps=_boolean(data, "use_dumps", True),
        delete=_boolean(data, "delete", True),
        allowed_hosts=_allowed_hosts(data, url),
    )


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


def _number(data: dict[str, Any], key: str, default: float, *, allow_zero: bool = False) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, f"must be a number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(key, f"must be positive, got {value}")
    return float(value)


def _boolean(data: dict[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r}")
    return value


def _allowed_hosts(data: dict[str, Any], url: str) -> tuple[str, ...]:
    value = data.get("allowed_hosts")
    if value is None:
        return (str(urlsplit(url).hostname),)
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(item, str) and item.strip() for item in value)
    ):
        raise ConfigError("allowed_hosts", "must be a non-empty list of host names")
    return tuple(item.strip().lower().rstrip(".") for item in value)
