"""Mapping URIs to files: stable paths, and nothing ever outside the destination."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from harvester.mapping import (
    CheckedFolders,
    UnsafePathError,
    make_parents,
    member_name,
    resource_path,
    resource_relpath,
)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("http://example.org/a/b.pdf", "example.org/a/b.pdf"),
        ("https://Example.ORG/a/b%20c.pdf", "example.org/a/b c.pdf"),
        ("http://127.0.0.1:8000/r/1", "127.0.0.1_8000/r/1"),
        ("http://example.org:80/r", "example.org/r"),
        ("https://example.org:443/r", "example.org/r"),
        ("http://example.org/list?page=2&q=a/b", "example.org/list?page=2&q=a%2Fb"),
        ("http://example.org/docs/", "example.org/docs/_index"),
        ("http://example.org", "example.org/_index"),
        ("http://example.org/caf%C3%A9#section", "example.org/café"),
        ("http://[::1]:8080/x", "[::1]_8080/x"),
    ],
)
def test_uri_maps_to_host_and_path(uri: str, expected: str) -> None:
    assert resource_relpath(uri) == PurePosixPath(expected)


@pytest.mark.parametrize(
    "uri",
    [
        "http://example.org/../etc/passwd",
        "http://example.org/a/../../etc/passwd",
        "http://example.org/%2e%2e/%2E%2E/etc/passwd",
        "http://example.org/a/..%2F..%2Fetc",
        "http://example.org/a%5C..%5C..%5Cetc",
        "http://example.org/a/%00",
        "http://example.org/a//b",
        "http://example.org/a/./b",
        "http://example.org/%ff",
        "file:///etc/passwd",
        "ftp://example.org/a",
        "http:///no-host",
        "http://example.org:99999/a",
    ],
)
def test_unsafe_uris_are_refused(uri: str) -> None:
    with pytest.raises(UnsafePathError):
        resource_relpath(uri)


@pytest.mark.parametrize(
    ("path", "name"), [("/res/a.txt", "res/a.txt"), ("sub/b.txt", "sub/b.txt")]
)
def test_member_path_with_or_without_leading_slash(path: str, name: str) -> None:
    assert member_name(path) == name


@pytest.mark.parametrize(
    "path", ["/../escaped", "a/../../b", "..", "a\\..\\b", "", "/", "C:/x", "a//b"]
)
def test_unsafe_member_paths_are_refused(path: str) -> None:
    with pytest.raises(UnsafePathError):
        member_name(path)


def test_symlink_inside_destination_is_refused(tmp_path: Path) -> None:
    destination = tmp_path / "mirror"
    destination.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (destination / "example.org").symlink_to(tmp_path / "elsewhere")

    with pytest.raises(UnsafePathError, match="symbolic link"):
        resource_path(destination, "http://example.org/a")


def test_make_parents_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "example.org").mkdir()
    (tmp_path / "example.org" / "a").write_text("a file, not a folder")
    target = resource_path(tmp_path, "http://example.org/a/b")

    with pytest.raises(UnsafePathError, match="not a folder"):
        make_parents(tmp_path, target)


def test_make_parents_creates_folders_inside_the_destination(tmp_path: Path) -> None:
    target = resource_path(tmp_path, "http://example.org/a/b/c")

    make_parents(tmp_path, target)

    assert (tmp_path / "example.org" / "a" / "b").is_dir()


def test_a_checked_folder_is_not_walked_again_but_a_link_in_it_is_still_refused(
    tmp_path: Path,
) -> None:
    checked = CheckedFolders()
    first = resource_path(tmp_path, "http://example.org/a/one", checked)
    make_parents(tmp_path, first, checked)
    assert str(tmp_path / "example.org" / "a") in checked
    (tmp_path / "outside").write_text("not ours")
    (tmp_path / "example.org" / "a" / "two").symlink_to(tmp_path / "outside")

    with pytest.raises(UnsafePathError, match="symbolic link"):
        resource_path(tmp_path, "http://example.org/a/two", checked)


def test_host_folder_errors_still_name_the_uri() -> None:
    for uri in ("ftp://example.org/a", "http://example.org:99999/a", "http://exa mple.org/a"):
        with pytest.raises(UnsafePathError, match=f"^{uri}: "):
            resource_relpath(uri)
