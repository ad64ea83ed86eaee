"""Cache-Control of the served documents: how long a cache may answer without asking.

The rules of the capacity plan (docs/scaling.md, "Documents on S3 behind a
CDN"), which deploy/nginx.conf follows for the published tree too. Every
answer also carries an ETag and Last-Modified, so a revalidation costs a 304.
Protected sets are `private`: a shared cache never keeps them.
"""

from __future__ import annotations

from .models import ChangeListPage, ChangePackage, ResourceListPage

#: Changes under the same URL at any time (indexes, the open Change List, the capability
#: documents): revalidate every time, the freshness goal is 1 to 2 s end to end.
REVALIDATE = "no-cache"
#: A Resource List page, rewritten in place when one of its resources changes: a minute
#: old is fine, the change is in the open Change List meanwhile. (Not a Resource Dump
#: package: `resourcedump.xml` lists its length and hashes, so it revalidates with it.)
PAGE = "max-age=60"
#: Final (a closed Change List or Change Dump package): no run rewrites it. A day, not a
#: year: a set deleted and created again under its slug, or `regenerate --full` after
#: PUBLIC_BASE_URL changed, writes other bytes under the same URL.
FINAL = "max-age=86400"


def freshness(document: object) -> str:
    """The rule for one stored document or dump package (a manifest copy: its package's)."""
    if isinstance(document, ResourceListPage):
        return PAGE
    if isinstance(document, ChangeListPage | ChangePackage) and document.final:
        return FINAL
    return REVALIDATE


def cache_control(rule: str, *, private: bool) -> str:
    """The header value: `private` for what a token unlocked, `public` otherwise."""
    return f"{'private' if private else 'public'}, {rule}"
