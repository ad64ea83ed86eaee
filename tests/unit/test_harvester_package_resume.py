"""A dump package whose transfer breaks is resumed with Range, not downloaded again."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from harvester.client import HarvestClient
from harvester.config import config_from_mapping
from harvester.dumps import _download_package
from harvester.report import SyncReport
from harvester.session import HarvestSession
from harvester.state import SyncState
from harvester.storage import StoredFile
from sitemaps.protocol.reader import ParsedEntry

SOURCE = "https://source.example.org"
PACKAGE = bytes(range(256)) * 4000  # about 1 MB
URL = f"{SOURCE}/resourcedump-package-1.zip"


class BreaksAfter(httpx.SyncByteStream):
    """A body that stops with a network error after `size` bytes."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size = data, size

    def __iter__(self):
        yield self.data[: self.size]
        raise httpx.ReadError("connection reset by peer")


def session(tmp_path: Path, handler) -> HarvestSession:
    config = config_from_mapping(
        {"capability_list_url": f"{SOURCE}/cl.xml", "destination": "mirror", "backoff": 0},
        base_dir=tmp_path,
    )
    client = HarvestClient(config, transport=httpx.MockTransport(handler), sleep=lambda _: None)
    return HarvestSession(
        config=config,
        client=client,
        state=SyncState(capability_list_url=config.capability_list_url),
        report=SyncReport(mode="baseline"),
    )


def entry(data: bytes = PACKAGE) -> ParsedEntry:
    return ParsedEntry(
        loc=URL,
        length=len(data),
        hash={"md5": hashlib.md5(data, usedforsecurity=False).hexdigest()},
        type="application/zip",
    )


def serve(requests: list[httpx.Request], etag: str = '"v1"', data: bytes = PACKAGE):
    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        headers = {"ETag": etag, "Accept-Ranges": "bytes"}
        asked = request.headers.get("Range")
        if asked and request.headers.get("If-Range") == etag:
            start = int(asked.removeprefix("bytes=").rstrip("-"))
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            return httpx.Response(206, headers=headers, content=data[start:])
        if len(requests) == 1:
            return httpx.Response(200, headers=headers, stream=BreaksAfter(data, 300_000))
        return httpx.Response(200, headers=headers, content=data)

    return handler


def test_a_broken_package_download_resumes_where_it_stopped(tmp_path: Path) -> None:
    requests: list[httpx.Request] = []
    target = tmp_path / "package.zip"

    result = _download_package(session(tmp_path, serve(requests)), entry(), target)

    assert isinstance(result, StoredFile) and result.length == len(PACKAGE)
    assert target.read_bytes() == PACKAGE
    assert [r.headers.get("Range") for r in requests] == [None, "bytes=300000-"]
    assert requests[1].headers["If-Range"] == '"v1"'
    assert not (tmp_path / "package.zip.part").exists()


def test_a_package_replaced_meanwhile_comes_whole_again(tmp_path: Path) -> None:
    requests: list[httpx.Request] = []
    replaced = PACKAGE[::-1]
    first = serve(requests, etag='"v1"')
    then = serve(requests, etag='"v2"', data=replaced)
    calls = iter([first, then])

    def handler(request: httpx.Request) -> httpx.Response:
        return next(calls)(request)

    target = tmp_path / "package.zip"
    result = _download_package(session(tmp_path, handler), entry(replaced), target)

    assert isinstance(result, StoredFile)
    assert target.read_bytes() == replaced  # the If-Range did not match: a whole new copy
    assert requests[1].headers["Range"] == "bytes=300000-"


def test_a_resumed_package_is_still_checked_whole(tmp_path: Path) -> None:
    requests: list[httpx.Request] = []
    wrong = entry(PACKAGE[:-1] + b"!")
    result = _download_package(session(tmp_path, serve(requests)), wrong, tmp_path / "p.zip")
    assert isinstance(result, str) and "md5" in result
    assert not (tmp_path / "p.zip").exists() and not (tmp_path / "p.zip.part").exists()
