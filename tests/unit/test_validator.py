"""The validator on a small in-memory source: clean, then broken one way at a time.

The source is served through httpx.MockTransport by a well-behaved server
(XML type, ETag, Last-Modified, 304, gzip), so the clean source has no
problem and each test's one defect is the only thing reported.
"""

from __future__ import annotations

import gzip
import hashlib
import time

import httpx
import pytest

from sitemaps.protocol.reader import MAX_ENTRY_ELEMENTS
from validator import Report, validate_source
from validator import parsing as parsing_module
from validator import rules as rules_module
from validator import schema as schema_module
from validator.problems import SHOWN_PER_KIND

BASE = "http://source.example.org"
SD = f"{BASE}/.well-known/resourcesync"
CAP = f"{BASE}/set/capabilitylist.xml"
RL = f"{BASE}/set/resourcelist.xml"
CLI = f"{BASE}/set/changelist.xml"
CL1 = f"{BASE}/set/changelist-1.xml"
CL2 = f"{BASE}/set/changelist-2.xml"
RD = f"{BASE}/set/resourcedump.xml"
MANIFEST = f"{BASE}/set/manifest-1.xml"
MD5 = hashlib.md5(b"a", usedforsecurity=False).hexdigest()
SHA256 = hashlib.sha256(b"a").hexdigest()
HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<{root} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/">\n'
)


def urlset(md: str, links: str, entries: str, root: str = "urlset") -> str:
    return f"{HEAD.format(root=root)}<rs:md {md}/>\n{links}\n{entries}\n</{root}>\n"


def ln(rel: str, href: str) -> str:
    return f'<rs:ln rel="{rel}" href="{href}"/>'


def url(loc: str, md: str = "", extra: str = "", tag: str = "url") -> str:
    return f"<{tag}><loc>{loc}</loc>{extra}<rs:md {md}/></{tag}>"


RESOURCE = f'hash="md5:{MD5} sha-256:{SHA256}" length="1" type="text/plain"'
CREATED = url(f"{BASE}/files/a", f'change="created" datetime="2026-01-01T00:00:00Z" {RESOURCE}')
DELETED = url(f"{BASE}/files/b", 'change="deleted" datetime="2026-01-02T00:00:00Z"')
CL1_PART = url(CL1, 'from="2026-01-01T00:00:00Z" until="2026-01-02T00:00:00Z"', tag="sitemap")
CL2_PART = url(CL2, 'from="2026-01-02T00:00:00Z"', tag="sitemap")


def clean_source() -> dict[str, str]:
    """A Source Description, a Capability List, a Resource List, a Change List Index
    over a closed and an open Change List, and a Resource Dump with its manifest."""
    resource = RESOURCE
    return {
        SD: urlset('capability="description"', "", url(CAP, 'capability="capabilitylist"')),
        CAP: urlset(
            'capability="capabilitylist"',
            ln("up", SD),
            url(RL, 'capability="resourcelist"')
            + url(CLI, 'capability="changelist"')
            + url(RD, 'capability="resourcedump"'),
        ),
        RL: urlset(
            'capability="resourcelist" at="2026-01-01T00:00:00Z" completed="2026-01-01T00:00:01Z"',
            ln("up", CAP),
            url(f"{BASE}/files/a", resource, "<lastmod>2025-12-31T00:00:00Z</lastmod>")
            + url(f"{BASE}/files/b", resource),
        ),
        CLI: urlset(
            'capability="changelist" from="2026-01-01T00:00:00Z"',
            ln("up", CAP),
            CL1_PART + CL2_PART,
            root="sitemapindex",
        ),
        CL1: urlset(
            'capability="changelist" from="2026-01-01T00:00:00Z" until="2026-01-02T00:00:00Z"',
            ln("up", CAP) + ln("index", CLI),
            CREATED + DELETED,
        ),
        CL2: urlset(
            'capability="changelist" from="2026-01-02T00:00:00Z"',
            ln("up", CAP) + ln("index", CLI),
            url(f"{BASE}/files/a", 'change="updated" datetime="2026-01-03T00:00:00+02:00"'),
        ),
        RD: urlset(
            'capability="resourcedump" at="2026-01-01T00:00:00Z"',
            ln("up", CAP),
            f'<url><loc>{BASE}/set/dump-1.zip</loc><rs:md type="application/zip" length="9"/>'
            f"{ln('contents', MANIFEST)}</url>",
        ),
        MANIFEST: urlset(
            'capability="resourcedump-manifest" at="2026-01-01T00:00:00Z"',
            ln("up", CAP),
            url(f"{BASE}/files/a", f'path="/files/a" {resource}'),
        ),
    }


class Body(httpx.SyncByteStream):
    """A streamed body, as from a socket (a bytes body would arrive already read)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self):
        yield self.data


def respond(status: int, headers: dict[str, str], body: bytes = b"") -> httpx.Response:
    return httpx.Response(
        status, headers={**headers, "Content-Length": str(len(body))}, stream=Body(body)
    )


class Server:
    """Serves documents as a careful web server would; tests break one thing at a time."""

    def __init__(self, documents: dict[str, str]) -> None:
        self.documents = documents
        self.headers: dict[str, dict[str, str | None]] = {}
        self.requested: list[str] = []
        self.no_304: set[str] = set()
        self.gzip_body: dict[str, bytes] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        address = str(request.url)
        self.requested.append(address)
        if address not in self.documents:
            return httpx.Response(404, text="not found")
        body = self.documents[address].encode()
        etag = f'"{hashlib.sha256(body).hexdigest()[:16]}"'
        headers: dict[str, str] = {
            "Content-Type": "application/xml",
            "ETag": etag,
            "Last-Modified": "Thu, 01 Jan 2026 00:00:00 GMT",
        }
        for name, value in self.headers.get(address, {}).items():
            headers.pop(name, None)
            if value is not None:
                headers[name] = value
        if _unchanged(request, headers) and address not in self.no_304:
            return respond(304, headers)
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            zipped = self.gzip_body.get(address, gzip.compress(body))
            return respond(200, {**headers, "Content-Encoding": "gzip"}, zipped)
        return respond(200, headers, body)


def _unchanged(request: httpx.Request, headers: dict[str, str]) -> bool:
    """If-None-Match names the ETag, else If-Modified-Since is the Last-Modified."""
    if "If-None-Match" in request.headers:
        return request.headers["If-None-Match"] == headers.get("ETag")
    since = request.headers.get("If-Modified-Since")
    return since is not None and since == headers.get("Last-Modified")


def validate(server: Server, start: str = SD, **options) -> Report:
    return validate_source(start, transport=httpx.MockTransport(server), **options)


def broken(document: str, old: str, new: str) -> Server:
    documents = clean_source()
    assert old in documents[document], f"{old!r} not in {document}"
    documents[document] = documents[document].replace(old, new, 1)
    return Server(documents)


def test_the_clean_source_has_no_problem() -> None:
    server = Server(clean_source())

    report = validate(server)

    assert report.problems == []
    assert report.documents == [SD, CAP, RL, CLI, RD, CL1, CL2, MANIFEST]
    assert report.summary() == "8 document(s) checked, 0 problems"
    # The resources themselves and the dump's package are never fetched.
    assert not any("/files/" in address or address.endswith(".zip") for address in server.requested)


def test_starting_from_a_capability_list_skips_the_source_description() -> None:
    report = validate(Server(clean_source()), start=CAP)

    assert report.problems == []
    assert report.documents == [CAP, RL, CLI, RD, CL1, CL2, MANIFEST]


# (document, text replaced, replacement, the one problem expected)
DEFECTS = [
    # The official schemas
    (
        CL1,
        'change="deleted"',
        'change="removed"',
        "schema: line 5: Element '{http://www.openarchives.org/rs/terms/}md', attribute 'change'",
    ),
    (
        RL,
        'type="text/plain"',
        'type="text/plain; charset=utf-8"',
        "schema: line 5: Element '{http://www.openarchives.org/rs/terms/}md', attribute 'type'",
    ),
    # Mandatory up links, index links, capabilities
    (RL, ln("up", CAP), "", f'no root <rs:ln rel="up"> (it must point to {CAP})'),
    (CAP, ln("up", SD), "", f'no root <rs:ln rel="up"> (it must point to {SD})'),
    (MANIFEST, ln("up", CAP), "", f'no root <rs:ln rel="up"> (it must point to {CAP})'),
    (
        RL,
        ln("up", CAP),
        ln("up", f"{BASE}/other/capabilitylist.xml"),
        f"the up link points to {BASE}/other/capabilitylist.xml; expected {CAP}",
    ),
    (
        RL,
        ln("up", CAP),
        ln("up", "http://elsewhere.example.com/cap.xml"),
        "the up link 'http://elsewhere.example.com/cap.xml' is outside the source's authority (http://source.example.org)",
    ),
    (CL2, ln("index", CLI), "", f'listed in the index {CLI} but no root <rs:ln rel="index">'),
    (CL2, ln("index", CLI), ln("index", RL), f"the index link points to {RL}; expected {CLI}"),
    (
        RL,
        'capability="resourcelist" at',
        'capability="resourcedump" at',
        "capability is 'resourcedump'; the linking document says 'resourcelist'",
    ),
    (
        RL,
        'capability="resourcelist" at',
        'capability="resourcelist-index" at',
        "unknown capability 'resourcelist-index'",
    ),
    (
        CAP,
        f"<url><loc>{RD}",
        f'<url><loc>{RL}</loc><rs:md capability="resourcelist"/></url><url><loc>{RD}',
        "'resourcelist' is listed more than once",
    ),
    (
        CAP,
        'capability="resourcedump"/>',
        'capability="dump"/>',
        "'dump' is not a capability a Capability List may list",
    ),
    (
        CAP,
        f'<url><loc>{RD}</loc><rs:md capability="resourcedump"/></url>',
        f"<url><loc>{RD}</loc></url>",
        f"entry {RD} (line 5): a Capability List entry needs <rs:md capability=...>",
    ),
    (
        SD,
        '<rs:md capability="capabilitylist"/>',
        "",
        f"entry {CAP} (line 5): a Source Description entry needs "
        '<rs:md capability="capabilitylist">',
    ),
    (
        RL,
        '<rs:md capability="resourcelist"',
        '<rs:md capability="resourcelist" at="2026-01-01T00:00:00Z"/>'
        '<rs:md capability="resourcelist"',
        "more than one root <rs:md>",
    ),
    # at / completed / from / until
    (RL, ' at="2026-01-01T00:00:00Z"', "", "the root <rs:md> of a resourcelist needs 'at'"),
    (
        RL,
        'completed="2026-01-01T00:00:01Z"',
        'completed="2025-12-31T00:00:00Z"',
        "completed 2025-12-31T00:00:00Z is before at 2026-01-01T00:00:00Z",
    ),
    (
        RL,
        'completed="2026-01-01T00:00:01Z"',
        'from="2025-12-31T00:00:00Z"',
        "'from' does not belong on a resourcelist (use 'at')",
    ),
    (
        MANIFEST,
        ' at="2026-01-01T00:00:00Z"',
        "",
        "the root <rs:md> of a resourcedump-manifest needs 'at'",
    ),
    (
        CL2,
        ' from="2026-01-02T00:00:00Z"',
        "",
        "the root <rs:md> of a changelist needs 'from'",
    ),
    (
        CL1,
        'from="2026-01-01T00:00:00Z" until="2026-01-02T00:00:00Z"',
        'from="2026-01-01T00:00:00Z" until="2026-01-02T00:00:00Z" at="2026-01-01T00:00:00Z"',
        "'at' does not belong on a changelist (use 'from')",
    ),
    (
        RL,
        'at="2026-01-01T00:00:00Z"',
        'at="2026-01-01T00:00:00"',
        "at '2026-01-01T00:00:00' is not a W3C Datetime with a time zone",
    ),
    # Change Lists: window, order, agreement with the index
    (
        CL1,
        'datetime="2026-01-02T00:00:00Z"',
        'datetime="2026-01-02T00:00:01Z"',
        "datetime 2026-01-02T00:00:01Z is outside the document's window "
        "[2026-01-01T00:00:00Z, 2026-01-02T00:00:00Z]",
    ),
    (
        CL1,
        CREATED + DELETED,
        DELETED + CREATED,
        "datetime 2026-01-01T00:00:00Z is earlier than the entry before it",
    ),
    (
        CL1,
        'change="deleted" ',
        "",
        "a change entry needs rs:md change",
    ),
    (
        CL2,
        'from="2026-01-02T00:00:00Z"/>',
        'from="2026-01-02T00:00:00Z" until="2026-01-04T00:00:00Z"/>',
        "only the document has 'until': a closed part has it in both, an open part in neither",
    ),
    (
        CLI,
        'until="2026-01-02T00:00:00Z"',
        'until="2026-01-02T00:00:01Z"',
        f"{CL1}: its index entry says until=2026-01-02T00:00:01Z, "
        "the document 2026-01-02T00:00:00Z",
    ),
    (
        CLI,
        CL1_PART + CL2_PART,
        CL2_PART + CL1_PART,
        f"entry {CL1} (line 5): from 2026-01-01T00:00:00Z is earlier than the entry before it",
    ),
    (
        CLI,
        'capability="changelist" from="2026-01-01T00:00:00Z"',
        'capability="changelist" from="2026-01-01T00:00:01Z"',
        f"entry {CL1} (line 5): from 2026-01-01T00:00:00Z is outside the document's window",
    ),
    # Hashes, lengths, paths, locs
    (
        RL,
        f"md5:{MD5} sha-256",
        f"md5:{MD5[:-1]} sha-256",
        f"hash 'md5:{MD5[:-1]}': md5 needs 32 lowercase hex digits",
    ),
    (RL, f"md5:{MD5} sha-256", f"md5:{MD5.upper()} sha-256", "md5 needs 32 lowercase hex digits"),
    (
        RL,
        f"sha-256:{SHA256}",
        f"sha256:{SHA256}",
        f"hash 'sha256:{SHA256}': algorithm is not one of md5, sha-1, sha-256",
    ),
    (
        RL,
        f"sha-256:{SHA256}",
        "sha-1:86f7e437faa5a7fce15d1ddcb9eaeaea377667b",
        "sha-1 needs 40 lowercase hex digits",
    ),
    (RL, f"sha-256:{SHA256}", f"md5:{MD5}", "md5 given twice"),
    (RL, 'length="1"', 'length="-1"', "length '-1' is not a non-negative integer"),
    (MANIFEST, 'path="/files/a" ', "", "a Resource Dump Manifest entry needs rs:md path"),
    (
        RL,
        f"<loc>{BASE}/files/b</loc>",
        "<loc>files/b-is-relative</loc>",
        "<loc> 'files/b-is-relative' is not an absolute http(s) URL",
    ),
    (
        RL,
        f"<loc>{BASE}/files/b</loc>",
        "<loc>https://source.example.org/files/b</loc>",
        "<loc> https://source.example.org/files/b is outside the source's authority (http://source.example.org)",
    ),
    (
        RL,
        f"<loc>{BASE}/files/b</loc>",
        "<loc>http://source.example.org:8080/files/b</loc>",
        "is outside the source's authority",
    ),
]


@pytest.mark.parametrize(("document", "old", "new", "expected"), DEFECTS)
def test_each_defect_is_reported_once(document: str, old: str, new: str, expected: str) -> None:
    report = validate(broken(document, old, new))

    problems = [str(problem) for problem in report.problems]
    assert len(problems) == 1, problems
    where = "" if expected.startswith("http") else f"{document}: "
    assert problems[0].startswith(where + expected) or (where and expected in problems[0]), problems


def test_a_loc_on_a_subdomain_or_an_allowed_host_is_within_authority() -> None:
    server = broken(RL, f"<loc>{BASE}/files/b</loc>", "<loc>http://cdn.source.example.org/b</loc>")
    assert validate(server).problems == []
    server = broken(RL, f"<loc>{BASE}/files/b</loc>", "<loc>http://data.example.net/b</loc>")
    assert len(validate(server).problems) == 1
    assert validate(server, extra_hosts=("data.example.net",)).problems == []


def test_links_back_on_an_allowed_host_may_differ_only_by_that_host() -> None:
    """Final Change Dump manifests and closed lists keep the host:port they were written
    under (a portal moved to another port): with that host allowed, their `up` and `index`
    pass as their `<loc>`s do, if nothing but the host[:port] differs."""
    old = "http://source.example.org:8147"
    documents = clean_source()
    documents[MANIFEST] = documents[MANIFEST].replace(CAP, CAP.replace(BASE, old))
    documents[CL1] = documents[CL1].replace(ln("index", CLI), ln("index", CLI.replace(BASE, old)))
    server = Server(documents)

    assert [str(problem) for problem in validate(server).problems] == [
        f"{CL1}: the index link points to {old}/set/changelist.xml; expected {CLI}",
        f"{MANIFEST}: the up link '{old}/set/capabilitylist.xml' is outside the source's "
        f"authority ({BASE})",
    ]
    assert validate(server, extra_hosts=("source.example.org",)).problems == []
    documents[MANIFEST] = documents[MANIFEST].replace("/set/capabilitylist.xml", "/other.xml")
    assert validate(server, extra_hosts=("source.example.org",)).messages(MANIFEST) == [
        f"the up link points to {old}/other.xml; expected {CAP}"
    ]


HOME = f"{BASE}/"
PAGE = "<!DOCTYPE html><html><head>{head}</head><body>Data</body></html>"


def web_page(documents: dict[str, str], head: str = "") -> Server:
    """`documents` and a home page, served as HTML."""
    server = Server({**documents, HOME: PAGE.format(head=head)})
    server.headers[HOME] = {"Content-Type": "text/html; charset=utf-8"}
    return server


def test_a_web_page_leads_to_the_source_description_at_the_well_known_uri() -> None:
    lines: list[str] = []

    report = validate(web_page(clean_source()), start=HOME, report=Report(emit=lines.append))

    assert report.problems == []
    assert report.documents == [SD, CAP, RL, CLI, RD, CL1, CL2, MANIFEST]
    assert lines == [f"{HOME} is a web page; checking the source it leads to: {SD}"]


def test_a_web_page_without_a_well_known_uri_leads_where_its_link_says() -> None:
    documents = clean_source()
    del documents[SD]
    server = web_page(documents, head=f'<link rel="resourcesync" href="{CAP}">')

    report = validate(server, start=HOME)

    assert report.problems == []
    assert report.documents == [CAP, RL, CLI, RD, CL1, CL2, MANIFEST]


def test_a_web_page_that_leads_to_no_source_is_one_problem() -> None:
    (problem,) = validate(web_page({}), start=HOME).problems

    assert problem.url == HOME
    assert problem.message.startswith(f"found no ResourceSync source from {HOME}; tried: ")
    assert f"GET {SD} failed: HTTP 404" in problem.message


def test_a_document_outside_the_authority_is_reported_not_fetched() -> None:
    foreign = "http://evil.example.com/changelist.xml"
    server = broken(CAP, f"<loc>{CLI}</loc>", f"<loc>{foreign}</loc>")

    report = validate(server)

    assert f"{CAP}: links {foreign}, outside the source's authority" in str(report.problems[-1])
    assert "<loc> http://evil.example.com/changelist.xml is outside" in report.messages(CAP)[0]
    assert not any("evil" in address for address in server.requested)


def test_a_redirect_out_of_the_authority_is_not_followed() -> None:
    server = Server(clean_source())
    server.headers[RL] = {}
    original = server.__call__

    def redirecting(request: httpx.Request) -> httpx.Response:
        if str(request.url) == RL:
            return httpx.Response(302, headers={"Location": "http://evil.example.com/rl.xml"})
        return original(request)

    report = validate_source(SD, transport=httpx.MockTransport(redirecting))

    assert report.messages(RL) == [
        "http://evil.example.com/rl.xml is outside the source's authority "
        "(http://source.example.org): not fetched"
    ]


def test_a_redirect_within_the_authority_is_followed() -> None:
    documents = clean_source()
    documents[f"{BASE}/set/current.xml"] = documents.pop(RL)
    server = Server(documents)

    def redirecting(request: httpx.Request) -> httpx.Response:
        if str(request.url) == RL:
            return httpx.Response(302, headers={"Location": "/set/current.xml"})
        return server(request)

    assert validate_source(SD, transport=httpx.MockTransport(redirecting)).problems == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"Content-Type": "text/html"}, "Content-Type is text/html, not an XML type"),
        ({"Content-Type": None}, "Content-Type is missing, not an XML type"),
        ({"ETag": None, "Last-Modified": None}, "neither ETag nor Last-Modified"),
    ],
)
def test_headers_are_checked(change: dict[str, str | None], expected: str) -> None:
    server = Server(clean_source())
    server.headers[RL] = change

    problems = [str(problem) for problem in validate(server).problems]

    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{RL}: {expected}")


def test_a_validator_without_304_is_reported_for_each() -> None:
    server = Server(clean_source())
    server.no_304.add(RL)

    messages = validate(server).messages()

    assert len(messages) == 2
    assert messages[0].startswith('a GET with If-None-Match: "')
    assert messages[0].endswith("answered 200, not 304")
    assert messages[1] == (
        "a GET with If-Modified-Since: Thu, 01 Jan 2026 00:00:00 GMT answered 200, not 304"
    )


def test_a_gzip_response_must_equal_the_plain_document() -> None:
    server = Server(clean_source())
    server.gzip_body[RL] = gzip.compress(clean_source()[CL2].encode())
    server.gzip_body[CL1] = b"not gzip at all"

    report = validate(server)

    assert report.messages(RL) == [
        "the response to Accept-Encoding: gzip does not decompress to the plain document"
    ]
    assert len(report.messages(CL1)) == 1
    assert report.messages(CL1)[0].startswith("the gzip response is unreadable")


def test_a_document_rewritten_between_the_validators_requests_is_no_problem() -> None:
    """The open Change List written again just after the validator read it (events
    posted meanwhile): its conditional and gzip requests get the new version. That was
    reported as 200 instead of 304, and as a gzip response that does not decompress to
    the plain document (a probe met it on a portal taking events); the server was right."""
    documents = clean_source()
    server = Server(documents)
    rewritten = documents[CL2].replace("2026-01-03T00:00:00+02:00", "2026-01-03T00:00:01+02:00")

    def rewritten_after_the_first_read(request: httpx.Request) -> httpx.Response:
        response = server(request)
        if str(request.url) == CL2 and documents[CL2] != rewritten:
            documents[CL2] = rewritten
            server.headers[CL2] = {"Last-Modified": "Thu, 01 Jan 2026 00:00:01 GMT"}
        return response

    report = validate_source(SD, transport=httpx.MockTransport(rewritten_after_the_first_read))

    assert report.problems == []
    assert server.requested.count(CL2) > 4  # read again, not skipped


def test_a_gzip_twin_switched_before_its_plain_document_is_no_problem(monkeypatch) -> None:
    """A front server's links are switched twin first: for a moment (up to 100 ms seen
    on a loaded portal, as long as nginx's answers to six requests) a gzip request gets
    the new version and a plain one still the old. Read again a little later, both agree."""
    documents = clean_source()
    server = Server(documents)
    rewritten = documents[CL2].replace("2026-01-03T00:00:00+02:00", "2026-01-03T00:00:01+02:00")
    server.gzip_body[CL2] = gzip.compress(rewritten.encode())
    clock = [0.0]
    monkeypatch.setattr(time, "sleep", lambda seconds: clock.append(clock[-1] + seconds))

    def twin_first(request: httpx.Request) -> httpx.Response:
        if str(request.url) == CL2 and clock[-1] >= 0.1:
            documents[CL2] = rewritten  # the plain link is switched too
        return server(request)

    report = validate_source(SD, transport=httpx.MockTransport(twin_first))

    assert report.problems == []
    assert clock[-1] < 2  # it waited, but not long


def test_a_server_without_gzip_is_fine_when_it_sends_the_same_bytes() -> None:
    documents = clean_source()
    plain = Server(documents)

    def identity_only(request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() != "accept-encoding"}
        return plain(httpx.Request(request.method, request.url, headers=headers))

    assert validate_source(SD, transport=httpx.MockTransport(identity_only)).problems == []


def test_http_errors_and_missing_documents() -> None:
    documents = clean_source()
    del documents[CL2]
    server = Server(documents)

    report = validate(server)

    assert [str(p) for p in report.problems] == [f"{CL2}: HTTP 404"]


def test_a_protected_source_without_token_is_a_401_and_the_token_is_sent() -> None:
    server = Server(clean_source())

    def protected(request: httpx.Request) -> httpx.Response:
        if request.headers.get("Authorization") != "Bearer s3cret":
            return httpx.Response(401, headers={"WWW-Authenticate": "Bearer"})
        return server(request)

    transport = httpx.MockTransport(protected)
    without = validate_source(CAP, transport=transport)
    assert [str(p) for p in without.problems] == [f"{CAP}: HTTP 401 (protected: pass --token)"]
    assert validate_source(CAP, token="s3cret", transport=transport).problems == []


@pytest.mark.parametrize(
    ("moved_to", "extra_hosts"),
    [
        ("http://cdn.source.example.org", ()),
        ("http://source.example.org:8080", ("source.example.org",)),
        ("http://data.example.net", ("data.example.net",)),
    ],
    ids=["subdomain", "another-port-of-an-allowed-host", "allowed-host"],
)
def test_the_token_goes_only_to_the_source_s_own_origin(moved_to: str, extra_hosts) -> None:
    """Documents on another origin are still fetched and checked, without the token."""
    documents = clean_source()
    moved = RL.replace(BASE, moved_to)
    documents[moved] = documents.pop(RL)
    documents[CAP] = documents[CAP].replace(f"<loc>{RL}</loc>", f"<loc>{moved}</loc>")
    server = Server(documents)
    sent: dict[str, str | None] = {}

    def recording(request: httpx.Request) -> httpx.Response:
        sent[str(request.url)] = request.headers.get("Authorization")
        return server(request)

    validate_source(
        SD, token="s3cret", extra_hosts=extra_hosts, transport=httpx.MockTransport(recording)
    )

    assert sent[moved] is None
    assert sent[CAP] == "Bearer s3cret"


def test_a_dtd_is_refused_without_being_read() -> None:
    documents = clean_source()
    documents[RL] = (
        documents[RL]
        .replace(
            "<urlset",
            '<!DOCTYPE urlset [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n<urlset',
            1,
        )
        .replace(f"{BASE}/files/b", f"{BASE}/files/&x;")
    )

    report = validate(Server(documents))

    assert report.messages(RL) == ["document contains <!DOCTYPE; DTDs and entities are refused"]


def test_a_document_that_is_not_xml_or_not_a_sitemap() -> None:
    documents = clean_source()
    documents[RL] = "<html><body>hello</body></html>"
    documents[CL2] = "<urlset"

    report = validate(Server(documents))

    assert report.messages(RL) == [
        "root element is html, not a sitemaps.org urlset or sitemapindex"
    ]
    assert report.messages(CL2)[0].startswith("not well-formed XML")


def test_an_entry_holding_more_elements_than_any_real_one_is_not_read() -> None:
    server = broken(RL, "<url><loc>", "<url>" + "<x/>" * MAX_ENTRY_ELEMENTS + "<loc>")

    (message,) = validate(server).messages(RL)

    assert f"more than {MAX_ENTRY_ELEMENTS} elements" in message


def test_a_document_of_more_elements_than_the_validator_holds_is_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(parsing_module, "MAX_ELEMENTS", 5)

    report = validate(Server(clean_source()), start=RL)

    assert report.messages(RL) == ["the document holds more than 5 elements"]


def test_schema_errors_stop_being_listed_past_the_limit() -> None:
    """One error per unknown attribute: 7.7 million of them took 9.9 GB and 216 s."""
    bogus = " ".join(f'x{n}="1"' for n in range(1_000))
    entries = "".join(url(f"{BASE}/files/{n}", bogus) for n in range(30))
    documents = clean_source()
    documents[RL] = urlset(
        'capability="resourcelist" at="2026-01-01T00:00:00Z"', ln("up", CAP), entries
    )

    schema = [m for m in validate(Server(documents), start=RL).messages(RL) if "schema" in m]

    assert len(schema) == schema_module.MAX_ERRORS + 1
    assert schema[-1] == f"schema: more errors: listing stopped at {schema_module.MAX_ERRORS}"


def test_the_schema_check_in_slices_finds_what_one_check_of_the_whole_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    documents = clean_source()
    documents[RL] = (
        urlset(
            'capability="resourcelist" at="2026-01-01T00:00:00Z"',
            ln("up", CAP),
            url(f"{BASE}/files/a", RESOURCE)
            + url("http://a/", RESOURCE)
            + url(f"{BASE}/files/c", 'change="removed"')
            + ln("describedby", f"{BASE}/about")
            + url(f"{BASE}/files/d", RESOURCE, extra="<other/>"),
        )
        .replace("<urlset ", '<urlset bogus="1" ')
        .replace("><", ">\n<")
        .replace("\n<rs:md", "text\n<rs:md", 1)
    )
    whole = validate(Server(documents), start=RL).messages(RL)

    monkeypatch.setattr(schema_module, "SLICE_ITEMS", 1)
    sliced = validate(Server(documents), start=RL).messages(RL)

    def lines(messages: list[str]) -> list[str]:
        return [m.split(":")[1].strip() for m in messages if m.startswith("schema")]

    # the root's attribute and text, the short <loc>, the unknown change type, the
    # root link after the entries; libxml2 checks none of the root's children after
    # that one, a slice checks those after it (the unknown element).
    assert lines(whole) == ["line 2", "line 2", "line 10", "line 15", "line 17"]
    assert lines(sliced) == [*lines(whole), "line 20"]
    assert [m for m in sliced if m not in whole] == [
        m for m in sliced if m.startswith("schema: line 20: Element '{http://www.sitemaps.org/")
    ]


def test_text_between_entries_across_a_chunk_boundary_is_read_safely() -> None:
    """Moving an entry out while libxml2 still wrote the text after it crashed the process."""
    entries = [url(f"{BASE}/files/{n:06d}", RESOURCE) for n in range(600)]
    text = "\r\n" * 30_000
    documents = clean_source()
    documents[RL] = urlset(
        'capability="resourcelist" at="2026-01-01T00:00:00Z"',
        ln("up", CAP),
        "".join(entries[:300]) + text + "".join(entries[300:]),
    )
    before = len(documents[RL].split(text)[0])
    assert before < 64 * 1024 < before + len(text)  # the text spans the first chunk's end

    assert validate(Server(documents), start=RL).problems == []


def test_an_entry_of_more_items_than_any_real_one_is_not_checked() -> None:
    many = " ".join(f'x{n}="1"' for n in range(schema_module.MAX_CHILD_ITEMS))
    server = broken(RL, "<url><loc>", f"<url><x {many}/><loc>")

    (message,) = validate(server, start=RL).messages(RL)

    assert f"has more than {schema_module.MAX_CHILD_ITEMS} elements and attributes" in message


def test_a_capability_list_as_an_index_and_nested_indexes() -> None:
    documents = clean_source()
    documents[CL2] = (
        documents[CLI]
        .replace("<loc>" + CL2, "<loc>" + f"{BASE}/set/changelist-9.xml")
        .replace(ln("up", CAP), ln("up", CAP) + ln("index", CLI))
    )
    documents[CL2] = documents[CL2].replace(
        'from="2026-01-02T00:00:00Z"/>\n</sitemap', 'from="2026-01-02T00:00:00Z"/>\n</sitemap'
    )
    report = validate(Server(documents))
    assert f"an index listed in the index {CLI}: indexes do not nest" in report.messages(CL2)
    # Parts of a nested index are not followed.
    assert f"{BASE}/set/changelist-9.xml" not in report.documents

    documents = clean_source()
    documents[CAP] = (
        documents[CAP].replace("<urlset", "<sitemapindex").replace("</urlset>", "</sitemapindex>")
    )
    report = validate(Server(documents))
    assert "a Capability List must not be an index (sitemapindex)" in report.messages(CAP)


def test_limits_on_entries_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rules_module, "MAX_ENTRIES_PER_DOCUMENT", 1)
    monkeypatch.setattr(rules_module, "MAX_DOCUMENT_BYTES", 500)

    report = validate(Server(clean_source()))

    size = len(clean_source()[RL].encode())
    assert "2 entries; at most 1 per document" in report.messages(RL)
    assert f"{size} bytes; at most 500 per document" in report.messages(RL)


def test_a_document_over_the_cap_is_not_read() -> None:
    report = validate(Server(clean_source()), start=RL, max_bytes=500)

    assert any("over the cap of 500 bytes" in message for message in report.messages(RL))


def test_a_gzip_bomb_stops_at_the_cap() -> None:
    server = Server(clean_source())
    server.gzip_body[RL] = gzip.compress(b"x" * 100_000)

    report = validate(server, start=RL, max_bytes=2000)

    assert report.messages(RL) == [
        "the gzip response is unreadable: the gzip stream decompresses to more than the cap"
    ]


def test_many_problems_of_one_kind_print_a_few_and_a_count() -> None:
    entries = "".join(
        url(f"http://other.example.com/{n}", 'length="1"') for n in range(SHOWN_PER_KIND + 5)
    )
    documents = clean_source()
    documents[RL] = urlset(
        'capability="resourcelist" at="2026-01-01T00:00:00Z"', ln("up", CAP), entries
    )
    lines: list[str] = []

    report = validate(Server(documents), report=Report(emit=lines.append))

    assert len(report.problems) == SHOWN_PER_KIND + 5
    assert len(lines) == SHOWN_PER_KIND
    assert report.summary().splitlines() == [
        f"{RL}: 5 more like the above (loc)",
        f"8 document(s) checked, {SHOWN_PER_KIND + 5} problems",
    ]
