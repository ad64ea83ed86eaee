"""The harvester's YAML configuration: defaults, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harvester.config import ConfigError, HarvestConfig, config_from_mapping, load_config

URL = "https://source.example.org/rs/capabilitylist.xml"


def load(tmp_path: Path, text: str) -> HarvestConfig:
    path = tmp_path / "harvest.yaml"
    path.write_text(text)
    return load_config(path)


def build(**values: Any) -> HarvestConfig:
    return config_from_mapping(
        {"capability_list_url": URL, "destination": "/srv/mirror", **values}, base_dir=Path("/etc")
    )


def test_minimal_config_gets_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, f"capability_list_url: {URL}\ndestination: mirror\n")

    assert config.capability_list_url == URL
    assert config.destination == tmp_path / "mirror"  # relative to the config file
    assert config.hash_algorithms == ("md5", "sha-256")
    assert (config.concurrency, config.retries, config.timeout) == (4, 3, 30.0)
    assert (config.use_dumps, config.delete, config.bearer_token) == (True, True, None)
    assert config.allowed_hosts == ("https://source.example.org:443",)
    assert config.max_resource_bytes == 1024**3
    assert config.source_origin == "https://source.example.org"


def test_all_keys_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_TOKEN", "t0ken")

    config = build(
        bearer_token_env="SOURCE_TOKEN",
        hash_algorithms=["SHA-256"],
        concurrency=8,
        timeout=2.5,
        retries=0,
        backoff=0,
        max_document_bytes=1000,
        use_dumps=False,
        delete=False,
        max_resource_bytes=5000,
        allowed_hosts=["example.org", "Mirror.example.net.:8080", "HTTPS://data.example.com:443"],
    )

    assert config.bearer_token == "t0ken"
    assert config.hash_algorithms == ("sha-256",)
    assert (config.concurrency, config.timeout, config.retries, config.backoff) == (8, 2.5, 0, 0.0)
    assert (config.max_document_bytes, config.use_dumps, config.delete) == (1000, False, False)
    assert config.max_resource_bytes == 5000
    assert config.allowed_hosts == (
        "http://example.org:80",
        "https://example.org:443",
        "http://mirror.example.net:8080",
        "https://mirror.example.net:8080",
        "https://data.example.com:443",
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("destination: mirror\n", "capability_list_url"),
        (f"capability_list_url: {URL}\n", "destination"),
        ("capability_list_url: ftp://example.org/cl.xml\ndestination: m\n", "capability_list_url"),
        (f"capability_list_url: {URL}\ndestination: m\nconcurrency: 0\n", "concurrency"),
        (f"capability_list_url: {URL}\ndestination: m\nconcurrency: '4'\n", "concurrency"),
        (f"capability_list_url: {URL}\ndestination: m\nretries: true\n", "retries"),
        (f"capability_list_url: {URL}\ndestination: m\ntimeout: -1\n", "timeout"),
        (
            f"capability_list_url: {URL}\ndestination: m\nhash_algorithms: [sha-1]\n",
            "hash_algorithms",
        ),
        (f"capability_list_url: {URL}\ndestination: m\nhash_algorithms: md5\n", "hash_algorithms"),
        (f"capability_list_url: {URL}\ndestination: m\nuse_dumps: 'yes'\n", "use_dumps"),
        (f"capability_list_url: {URL}\ndestination: m\nallowed_hosts: []\n", "allowed_hosts"),
        (
            f"capability_list_url: {URL}\ndestination: m\nallowed_hosts: [ftp://example.org]\n",
            "allowed_hosts",
        ),
        (
            f"capability_list_url: {URL}\ndestination: m\nallowed_hosts: [example.org:x]\n",
            "allowed_hosts",
        ),
        (
            f"capability_list_url: {URL}\ndestination: m\nallowed_hosts: [example.org/a]\n",
            "allowed_hosts",
        ),
        (
            f"capability_list_url: {URL}\ndestination: m\nmax_resource_bytes: 0\n",
            "max_resource_bytes",
        ),
        (f"capability_list_url: {URL}\ndestination: m\nconcurency: 4\n", "concurency"),
        (
            f"capability_list_url: {URL}\ndestination: m\nbearer_token_env: UNSET_VAR_X\n",
            "bearer_token_env",
        ),
        ("- a list\n", "file"),
        ("capability_list_url: [unclosed\n", "file"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f"config key '{key}'") as raised:
        load(tmp_path, text)

    assert raised.value.key == key


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_a_source_url_instead_of_a_capability_list(tmp_path: Path) -> None:
    config = load(
        tmp_path, "source_url: http://data.example.org:8080/\nset: articles\ndestination: m\n"
    )

    assert (config.source_url, config.capability_list_url) == (
        "http://data.example.org:8080/",
        None,
    )
    assert config.set_name == "articles"
    assert config.allowed_hosts == ("http://data.example.org:8080",)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (f"capability_list_url: {URL}\nsource_url: {URL}\ndestination: m\n", "source_url"),
        (f"capability_list_url: {URL}\nset: a\ndestination: m\n", "set"),
        ("source_url: example.org\ndestination: m\n", "source_url"),
        (f"source_url: {URL}\nset: ''\ndestination: m\n", "set"),
    ],
)
def test_bad_source_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        load(tmp_path, text)
