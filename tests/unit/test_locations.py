"""How an event's location becomes the URI destinations fetch, and what is refused."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from sources.locations import LocationError, check_url, resolve_location

PREFIX = "https://data.example.org/set/"


def resolve(location_type: str, value: str, *, root: str = "/data", prefix: str = PREFIX) -> str:
    return resolve_location(location_type, value, url_prefix=prefix, resource_root_dir=root)


def refused(location_type: str, value: str, *, root: str = "/data") -> str:
    with pytest.raises(LocationError) as excinfo:
        resolve(location_type, value, root=root)
    return str(excinfo.value)


class TestUrl:
    def test_is_used_as_is(self):
        value = "https://other.example.org/a/b.pdf?version=2#page=3"
        assert resolve("url", value) == value

    def test_percent_encoding_is_kept(self):
        assert resolve("url", "http://other.example.org/a%20b") == "http://other.example.org/a%20b"

    @pytest.mark.parametrize(
        "value", ["ftp://other.example.org/a", "file:///etc/passwd", "javascript:alert(1)"]
    )
    def test_scheme_other_than_http_or_https_is_refused(self, value):
        assert "http or https" in refused("url", value)

    def test_needs_a_host(self):
        assert "host" in refused("url", "https:///a.txt")

    def test_spaces_must_be_encoded(self):
        assert "spaces" in refused("url", "https://other.example.org/a b")


class TestAbsPath:
    def test_inside_root_is_made_relative_and_joined_to_prefix(self):
        assert resolve("abs_path", "/data/x/y.txt") == PREFIX + "x/y.txt"

    def test_outside_root_is_refused(self):
        assert "outside the resource root" in refused("abs_path", "/etc/passwd")

    def test_sibling_directory_sharing_the_prefix_is_outside(self):
        assert "outside the resource root" in refused("abs_path", "/data2/x.txt")

    def test_climbing_out_with_dot_dot_is_refused(self):
        assert "'..'" in refused("abs_path", "/data/../etc/passwd")

    def test_root_itself_is_not_a_file(self):
        assert "root itself" in refused("abs_path", "/data")

    def test_must_be_absolute(self):
        assert "absolute" in refused("abs_path", "data/x.txt")

    def test_needs_a_resource_root(self):
        assert "resource_root_dir" in refused("abs_path", "/data/x.txt", root="")

    def test_symlink_out_of_the_root_is_refused(self, tmp_path: Path):
        root, outside = tmp_path / "root", tmp_path / "outside"
        root.mkdir()
        outside.mkdir()
        (outside / "secret.txt").write_text("no")
        (root / "escape").symlink_to(outside, target_is_directory=True)
        message = refused("abs_path", f"{root}/escape/secret.txt", root=str(root))
        assert "outside the resource root" in message

    def test_symlink_inside_the_root_is_fine(self, tmp_path: Path):
        root = tmp_path / "root"
        (root / "real").mkdir(parents=True)
        (root / "alias").symlink_to(root / "real", target_is_directory=True)
        assert resolve("abs_path", f"{root}/alias/a.txt", root=str(root)) == PREFIX + "alias/a.txt"


class TestRelPath:
    def test_is_joined_to_prefix(self):
        assert resolve("rel_path", "reports/2024/a.pdf") == PREFIX + "reports/2024/a.pdf"

    def test_prefix_without_trailing_slash(self):
        assert resolve("rel_path", "a.txt", prefix="https://h.example.org/p") == (
            "https://h.example.org/p/a.txt"
        )

    @pytest.mark.parametrize(
        "value",
        [
            "../etc/passwd",
            "a/../../b",
            "a/./b",
            "a/%2e%2e/b",
            "a/%2E%2E/b",
            "%2e%2e/b",
            "a/%252e%252e/b",
            "a/.%2e/b",
        ],
    )
    def test_dot_segments_plain_or_encoded_are_refused(self, value):
        assert "'..'" in refused("rel_path", value)

    def test_backslash_is_refused(self):
        assert "backslash" in refused("rel_path", "a\\..\\b")

    def test_leading_slash_is_refused(self):
        assert "relative" in refused("rel_path", "/a.txt")

    def test_symlink_out_of_the_root_is_refused(self, tmp_path: Path):
        root, outside = tmp_path / "root", tmp_path / "outside"
        root.mkdir()
        outside.mkdir()
        (root / "escape").symlink_to(outside, target_is_directory=True)
        assert "outside the resource root" in refused("rel_path", "escape/x.txt", root=str(root))

    def test_spaces_and_unicode_are_percent_encoded(self):
        assert resolve("rel_path", "my docs/ä b.txt") == PREFIX + "my%20docs/%C3%A4%20b.txt"

    def test_percent_sign_is_a_literal_character_of_the_name(self):
        assert resolve("rel_path", "a/100%25.txt") == PREFIX + "a/100%2525.txt"

    def test_query_and_fragment_characters_are_part_of_the_name(self):
        assert resolve("rel_path", "a/b?c#d") == PREFIX + "a/b%3Fc%23d"

    def test_empty_segments_are_dropped(self):
        assert resolve("rel_path", "a//b.txt") == PREFIX + "a/b.txt"


@pytest.mark.parametrize("location_type", ["url", "abs_path", "rel_path"])
def test_empty_value_is_refused(location_type):
    assert "empty" in refused(location_type, "")


@pytest.mark.parametrize("location_type", ["url", "abs_path", "rel_path"])
def test_control_characters_are_refused(location_type):
    assert "control characters" in refused(location_type, "/data/a\nb")


def test_unknown_location_type_is_refused():
    assert "unknown location type" in refused("path", "a.txt")


def test_too_long_uri_is_refused():
    assert "limit" in refused("rel_path", "a" * 3000)


@pytest.mark.parametrize(
    "value",
    [
        "http://a/b", "HTTPS://x.org/p?q#f", "ftp://x/y", "http:/x", "http:///x",
        "http://[::1]/a", "http://[::1/a", "http://a]/b", "mailto:x@y", "http://user@host:80/p",
        "//host/p", "http:x", "http://h", "https://h?x", "x", "1http://h/", "http://h:99999/",
    ],
)  # fmt: skip
def test_url_check_accepts_exactly_what_urlsplit_calls_http_with_a_host(value):
    """check_url parses with a regex for speed; it must agree with the standard library."""
    try:
        parts = urlsplit(value)
        expected = parts.scheme in {"http", "https"} and bool(parts.netloc)
    except ValueError:
        expected = False
    try:
        check_url(value)
        accepted = True
    except LocationError:
        accepted = False
    assert accepted == expected


@pytest.mark.parametrize(
    ("written", "uri"),
    [
        ("http://x.example.org/a%Af", "http://x.example.org/a%AF"),  # mixed case, both ways
        ("http://x.example.org/a%aF", "http://x.example.org/a%AF"),
        # IDNA 2008 (UTS 46), as browsers, httpx and requests resolve it: IDNA 2003 made
        # faß.de fass.de, another registered domain.
        ("http://faß.de/x", "http://xn--fa-hia.de/x"),
        ("http://Bücher.example:8080/ä", "http://xn--bcher-kva.example:8080/%C3%A4"),
    ],
)
def test_a_url_is_kept_in_one_uri_form(written: str, uri: str) -> None:
    assert resolve("url", written) == uri
