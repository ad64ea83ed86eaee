"""The URI rule ingestion applies is the schemas' own (`sitemaps.protocol.uris`)."""

from __future__ import annotations

import random

from lxml import etree

from sitemaps.protocol.uris import is_any_uri, loc_problem

ANY_URI = etree.XMLSchema(
    etree.fromstring(
        b'<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
        b'<xs:element name="u" type="xs:anyURI"/></xs:schema>'
    )
)
ALPHABET = "ab9F%#[]/?:@.\u00e9 ~!$&'()*+,;=-_"
STARTS = [
    "http://e.org/",
    "https://e.org",
    "http://[::1]/",
    "http://e.org:80",
    "http://e.org:2147483647",
    "http://e.org:2147483648",  # past libxml2's largest port
    "http://e.org:99999999999999999999",
    "",
    "a:",
    "//h/",
]


def libxml2_takes(value: str) -> bool:
    element = etree.Element("u")
    element.text = value
    return bool(ANY_URI.validate(element))


def test_it_agrees_with_libxml2_on_odd_strings():
    rng = random.Random(13)
    for _ in range(5000):
        value = rng.choice(STARTS) + "".join(rng.choices(ALPHABET, k=rng.randint(0, 10)))
        assert is_any_uri(value) == libxml2_takes(value), value


def test_a_loc_has_the_length_the_sitemap_schema_gives():
    assert loc_problem("http://a.b/") is not None  # 11 characters
    assert loc_problem("http://a.bc/") is None
    assert loc_problem("http://e.org/" + "a" * 2035) is None  # 2,048
    assert loc_problem("http://e.org/" + "a" * 2036) is not None
