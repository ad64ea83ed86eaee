"""Public documents straight from the published tree, in front of Django's WSGI application.

Without nginx in front (deploy/gunicorn.conf.py) every document GET went
through Django and a database lookup: about 2 ms of CPU against nginx's
sendfile. The tree sitemaps/publishing.py keeps for nginx holds exactly the
public documents, so this layer answers the URL shapes deploy/nginx.conf
takes from it the same way (`final/` first, the gzip twin when accepted, 304
to a matching validator), with the headers Django's view sends: the ETag is
in the link target's content-addressed name, Last-Modified is the link's own
mtime (publishing sets it to the row's `generated_at`), Cache-Control follows
the path as nginx's map does. Anything else (other methods or URLs, a query
string, a missing link, a byte range, If-Match, a host or scheme Django would
refuse or redirect) goes to Django, which stays the authority.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable
from email.utils import formatdate
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import parse_etags, parse_http_date_safe

from . import caching
from .publishing import FINAL_DIR, URL_PREFIX, published_root
from .storage import GZIP_SUFFIX, document_storage

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Headers = list[tuple[str, str]]

#: The URLs deploy/nginx.conf answers from the tree; the slugs as Django's <slug:> takes them.
DOCUMENT_URL = re.compile(
    rf"/{URL_PREFIX}/(?P<set>[-a-zA-Z0-9_]+/[-a-zA-Z0-9_]+)/(?P<name>"
    r"(?P<stem>(?:resourcelist|changelist)(?:-[0-9]+)?"
    r"|(?:resourcedump|changedump)(?:-[0-9]+|-manifest-[0-9]+)?)\.xml"
    r"|(?P<package>(?:resourcedump|changedump)-package-[0-9]+)\.zip)"
)
#: Rewritten in place (as nginx's map and caching.freshness): a minute; the rest revalidate.
PAGE_NAME = re.compile(r"resourcelist-[0-9]+\.xml")
#: Chunk size the server's file wrapper reads with when it cannot sendfile.
BLOCK_SIZE = 256 * 1024


class PublishedFiles:
    """The WSGI layer: `application = PublishedFiles.wrap(get_wsgi_application())`."""

    def __init__(self, application: WSGIApp, root: Path, documents: str) -> None:
        self.application = application
        self.tree = str(root / URL_PREFIX)
        self.documents = os.path.realpath(documents) + os.sep

    @classmethod
    def wrap(cls, application: WSGIApp) -> WSGIApp:
        """The layer when the published tree is on, else the application itself."""
        root = published_root()
        if root is None:
            return application
        return cls(application, root, document_storage().path(""))

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]):
        answer = self.answer(environ)
        if answer is None:
            return self.application(environ, start_response)
        status, headers, handle = answer
        start_response(status, headers)
        if handle is None:
            return []
        wrapper = environ.get("wsgi.file_wrapper")
        if wrapper is None:
            return _chunks(handle)
        return wrapper(handle, BLOCK_SIZE)

    def answer(self, environ: dict[str, Any]) -> tuple[str, Headers, Any] | None:
        """(status, headers, open file or None), or None for Django to answer."""
        if not _plain_read(environ) or not _django_would_serve(environ):
            return None
        match = DOCUMENT_URL.fullmatch(environ.get("PATH_INFO", ""))
        if match is None:
            return None
        package = match["package"] is not None
        if package and ("HTTP_RANGE" in environ or "HTTP_IF_RANGE" in environ):
            return None
        gzipped = not package and "gzip" in environ.get("HTTP_ACCEPT_ENCODING", "").lower()
        found = self.find(match["set"], match["name"] + (GZIP_SUFFIX if gzipped else ""))
        if found is None:
            return None
        final, handle, size, target, modified = found
        stem, extension = (match["package"], ".zip") if package else (match["stem"], ".xml")
        etag = _etag(target, stem, extension + (GZIP_SUFFIX if gzipped else ""))
        if etag is None:
            handle.close()
            return None
        headers = _validators(etag, modified, final, match["name"], package)
        headers += _security_headers(environ)
        if _not_modified(environ, etag, modified):
            handle.close()
            return "304 Not Modified", [*headers, ("Content-Length", "0")], None
        headers += [
            ("Content-Type", "application/zip" if package else "application/xml"),
            ("Content-Length", str(size)),
        ]
        if gzipped:
            headers.append(("Content-Encoding", "gzip"))
        if environ["REQUEST_METHOD"] == "HEAD":
            handle.close()
            return "200 OK", headers, None
        # Django's FileResponse names the stored file (its HEAD answer does not).
        headers.append(("Content-Disposition", f'inline; filename="{target}"'))
        return "200 OK", headers, handle

    def find(self, set_path: str, name: str) -> tuple[bool, Any, int, str, int] | None:
        """(final, open file, size, target's name, link mtime) of `final/` then the set folder.

        The file must resolve inside the document storage: a link planted to
        anything else is never followed.
        """
        for final, place in (
            (True, f"{self.tree}/{set_path}/{FINAL_DIR}/{name}"),
            (False, f"{self.tree}/{set_path}/{name}"),
        ):
            try:
                link = os.lstat(place)
            except OSError:
                continue
            if not stat.S_ISLNK(link.st_mode):
                return None
            target = os.path.realpath(place)
            if not target.startswith(self.documents):
                return None
            try:
                handle = open(target, "rb")  # noqa: SIM115 - closed by the server or here
            except OSError:
                return None
            size = os.fstat(handle.fileno())
            again = _lstat(place)
            # Relinked meanwhile: this mtime may not be this version's. Django decides.
            relinked = again is None or (again.st_ino, again.st_mtime) != (
                link.st_ino,
                link.st_mtime,
            )
            if not stat.S_ISREG(size.st_mode) or relinked:
                handle.close()
                return None
            return final, handle, size.st_size, os.path.basename(target), int(link.st_mtime)
        return None


def _lstat(place: str) -> os.stat_result | None:
    try:
        return os.lstat(place)
    except OSError:
        return None


def _chunks(handle: Any) -> Iterable[bytes]:
    with handle:
        while chunk := handle.read(BLOCK_SIZE):
            yield chunk


def _plain_read(environ: dict[str, Any]) -> bool:
    """A GET or HEAD with nothing Django answers differently from a file."""
    return (
        environ.get("REQUEST_METHOD") in ("GET", "HEAD")
        and not environ.get("QUERY_STRING")
        and "HTTP_IF_MATCH" not in environ
        and "HTTP_IF_UNMODIFIED_SINCE" not in environ
    )


def _is_secure(environ: dict[str, Any]) -> bool:
    """As Django's `HttpRequest.is_secure`."""
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy:
        header, secure_value = proxy
        value = environ.get(header)
        if value is not None:
            return value.split(",", 1)[0].strip() == secure_value
    return environ.get("wsgi.url_scheme") == "https"


def _django_would_serve(environ: dict[str, Any]) -> bool:
    """The host is allowed and no HTTPS redirect is due (else Django answers 400 or 301)."""
    if settings.SECURE_SSL_REDIRECT and not _is_secure(environ):
        return False
    host = environ.get("HTTP_HOST", "")
    if settings.USE_X_FORWARDED_HOST and "HTTP_X_FORWARDED_HOST" in environ:
        host = environ["HTTP_X_FORWARDED_HOST"]
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


def _etag(target: str, stem: str, extension: str) -> str | None:
    """The content etag in a stored version's name (`<stem>.<etag><extension>`, storage.py)."""
    prefix = stem + "."
    if not (target.startswith(prefix) and target.endswith(extension)):
        return None
    etag = target[len(prefix) : -len(extension)]
    if not re.fullmatch(r"[0-9a-f]{32}", etag):
        return None
    return f'"{etag}-gz"' if extension.endswith(GZIP_SUFFIX) else f'"{etag}"'


def _validators(etag: str, modified: int, final: bool, name: str, package: bool) -> Headers:
    """ETag, Last-Modified, Cache-Control and Vary, as sitemaps.views sends them."""
    if final:
        rule = caching.FINAL
    elif PAGE_NAME.fullmatch(name):
        rule = caching.PAGE
    else:
        rule = caching.REVALIDATE
    vary = "Authorization" if package else "Accept-Encoding, Authorization"
    headers = [
        ("ETag", etag),
        ("Last-Modified", formatdate(modified, usegmt=True)),
        ("Cache-Control", caching.cache_control(rule, private=False)),
        ("Vary", vary),
    ]
    if package:
        headers.append(("Accept-Ranges", "bytes"))
    return headers


def _security_headers(environ: dict[str, Any]) -> Headers:
    """What SecurityMiddleware and XFrameOptionsMiddleware add to Django's answer."""
    headers = []
    if settings.SECURE_HSTS_SECONDS and _is_secure(environ):
        value = f"max-age={settings.SECURE_HSTS_SECONDS}"
        if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
            value += "; includeSubDomains"
        if settings.SECURE_HSTS_PRELOAD:
            value += "; preload"
        headers.append(("Strict-Transport-Security", value))
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append(("X-Content-Type-Options", "nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        policy = settings.SECURE_REFERRER_POLICY
        if not isinstance(policy, str):
            policy = ",".join(policy)
        headers.append(("Referrer-Policy", policy))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append(("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY))
    headers.append(("X-Frame-Options", getattr(settings, "X_FRAME_OPTIONS", "DENY").upper()))
    return headers


def _not_modified(environ: dict[str, Any], etag: str, modified: int) -> bool:
    """If-None-Match, else If-Modified-Since, as django.utils.cache.get_conditional_response."""
    header = environ.get("HTTP_IF_NONE_MATCH")
    etags = parse_etags(header) if header else []
    if etags:
        if etags == ["*"]:
            return True
        return etag.strip("W/") in (tag.strip("W/") for tag in etags)
    since = parse_http_date_safe(environ.get("HTTP_IF_MODIFIED_SINCE", ""))
    return since is not None and modified <= since
