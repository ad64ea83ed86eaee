"""The HTTP client: retries with backoff, clear failures, limits, where the token goes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from harvester.client import FetchError, HarvestClient
from harvester.config import config_from_mapping

SOURCE = "https://source.example.org"


def make_client(
    handler: Callable[[httpx.Request], httpx.Response], sleeps: list[float], **settings: Any
) -> HarvestClient:
    config = config_from_mapping(
        {
            "capability_list_url": f"{SOURCE}/capabilitylist.xml",
            "destination": "mirror",
            "retries": 2,
            "backoff": 0.5,
            **settings,
        },
        base_dir=Path("/tmp"),
    )
    return HarvestClient(config, transport=httpx.MockTransport(handler), sleep=sleeps.append)


def test_server_errors_are_retried_with_exponential_backoff() -> None:
    statuses = [503, 500, 200]
    sleeps: list[float] = []
    client = make_client(lambda request: httpx.Response(statuses.pop(0), content=b"ok"), sleeps)

    assert client.fetch_document(f"{SOURCE}/a") == b"ok"
    assert sleeps == [0.5, 1.0]


def test_gives_up_after_the_configured_retries_with_a_clear_reason() -> None:
    calls: list[str] = []
    sleeps: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        raise httpx.ConnectError("connection refused", request=request)

    client = make_client(handler, sleeps)

    with pytest.raises(FetchError) as raised:
        client.fetch_document(f"{SOURCE}/a")

    assert len(calls) == 3
    assert sleeps == [0.5, 1.0]
    assert str(raised.value) == (
        f"GET {SOURCE}/a failed: ConnectError: connection refused (gave up after 3 attempts)"
    )


def test_client_errors_are_not_retried() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(404)

    client = make_client(handler, [])

    with pytest.raises(FetchError, match="HTTP 404"):
        client.fetch_document(f"{SOURCE}/missing")

    assert len(calls) == 1


def test_bearer_token_goes_only_to_the_source_origin() -> None:
    seen: dict[str, str | None] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[request.url.host] = request.headers.get("Authorization")
        return httpx.Response(200, content=b"ok")

    client = make_client(
        handler, [], bearer_token="s3cret", allowed_hosts=["source.example.org", "example.org"]
    )

    client.fetch_document(f"{SOURCE}/a")
    client.fetch_document("https://mirror.example.org/a")

    assert seen == {"source.example.org": "Bearer s3cret", "mirror.example.org": None}


def test_hosts_outside_the_allowed_list_are_refused_without_a_request() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200)

    client = make_client(handler, [])

    for url in ("http://169.254.169.254/latest", "https://evil-source.example.org/a", "file:///x"):
        with pytest.raises(FetchError, match="not on an allowed host"):
            client.fetch_document(url)

    assert calls == []
    assert client.is_allowed("https://cdn.source.example.org/a")


def test_redirects_to_other_hosts_are_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "http://127.0.0.1:9/admin"})

    client = make_client(handler, [])

    with pytest.raises(FetchError, match="redirected to a host that is not allowed"):
        client.fetch_document(f"{SOURCE}/a")


@pytest.mark.parametrize("declare_length", [True, False])
def test_documents_over_the_limit_are_refused(declare_length: bool) -> None:
    body = b"x" * 2000

    def handler(request: httpx.Request) -> httpx.Response:
        if declare_length:
            return httpx.Response(200, content=body)
        return httpx.Response(200, content=iter([body[:1000], body[1000:]]))

    client = make_client(handler, [], max_document_bytes=1500)

    with pytest.raises(FetchError, match="larger than the limit of 1500 bytes"):
        client.fetch_document(f"{SOURCE}/big.xml")


@pytest.mark.parametrize(
    "location",
    [
        "https://source.example.org:8443/a",  # same host, another port
        "http://source.example.org/a",  # same host and port number, another scheme
        "https://source.example.org:80/a",
    ],
)
def test_redirects_to_another_port_or_scheme_of_the_same_host_are_refused(location: str) -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        return httpx.Response(302, headers={"Location": location})

    client = make_client(handler, [])

    with pytest.raises(FetchError, match="redirected to a host that is not allowed"):
        client.fetch_document(f"{SOURCE}/a")
    assert calls == [f"{SOURCE}/a"]


def test_default_ports_are_the_same_origin_written_or_not() -> None:
    client = make_client(lambda request: httpx.Response(200), [])

    assert client.is_allowed("https://source.example.org:443/a")
    assert client.is_allowed("https://SOURCE.example.org./a")
    assert not client.is_allowed("https://source.example.org:444/a")


def test_allowed_hosts_entries_name_a_host_a_host_and_port_or_an_origin() -> None:
    client = make_client(
        lambda request: httpx.Response(200),
        [],
        allowed_hosts=["example.org", "data.example.net:8080", "https://mirror.example.com:8443"],
    )

    allowed = [
        "http://example.org/a",
        "https://cdn.example.org/a",
        "http://data.example.net:8080/a",
        "https://data.example.net:8080/a",
        "https://mirror.example.com:8443/a",
    ]
    refused = [
        "http://example.org:8080/a",
        "http://data.example.net/a",
        "http://mirror.example.com:8443/a",
        "https://mirror.example.com/a",
    ]
    assert [url for url in allowed if not client.is_allowed(url)] == []
    assert [url for url in refused if client.is_allowed(url)] == []


def test_a_plain_http_source_may_be_upgraded_to_https_on_the_same_host() -> None:
    client = make_client(
        lambda request: httpx.Response(200), [], capability_list_url="http://source.example.org/c"
    )

    assert client.is_allowed("https://source.example.org/a")
    assert not client.is_allowed("https://source.example.org:8443/a")
    assert not client.is_allowed("http://source.example.org:8080/a")
