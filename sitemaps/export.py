"""Export one set as a static copy any web server (or an S3 bucket) can serve (seed 004 "ISend").

The set's documents are read exactly as a destination would get them: each
URL is answered in process by the portal's own views, starting from the
Capability List and following what each document lists (index parts,
archives, dumps and their manifests), so whatever the portal publishes is
exported and nothing it withholds. Every URL in them is rewritten to the new
address through `sitemaps.rewriting` (reader and writer, never text edits).
A Source Description naming just this set goes to `.well-known/resourcesync`.

With resources, every `<loc>` under the set's `url_prefix` is rewritten to
`<base>/files/<provider>/<set>/...` and the file is copied from the set's
`resource_root_dir`. A file the Resource List names that is not there (or
would leave the root) is reported: its entry points into the export, where a
destination would get a 404.
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponseBase
from django.urls import Resolver404, resolve

from journal.models import RunKind
from journal.recording import record_run
from sources.models import ResourceSet

from . import links
from .export_targets import ExportCounts, ExportTarget, UnsafeExportPath, safe_relative
from .protocol.builders import CapabilityListRef, build_source_description
from .protocol.constants import Capability
from .protocol.reader import Document, ResourceSyncParseError, parse_document
from .rewriting import PrefixRewrite, render_parsed, rewrite_document

SOURCE_DESCRIPTION_PATH = ".well-known/resourcesync"
FILES_PATH = "files"
#: Lists whose entries are documents to export too.
_LISTS_OF_DOCUMENTS = {Capability.CAPABILITY_LIST, Capability.DESCRIPTION}
#: Lists whose entries are packages (binary), with manifests behind `contents` links.
_DUMPS = {Capability.RESOURCE_DUMP, Capability.CHANGE_DUMP}
_NOTIFICATIONS = {Capability.CHANGE_NOTIFICATION, Capability.FRAMEWORK_NOTIFICATION}


class ExportError(Exception):
    """The set cannot be exported as asked; the message says why."""


@dataclass
class ExportReport:
    documents: int = 0
    resources: int = 0
    packages: int = 0
    skipped: list[str] = field(default_factory=list)
    counts: ExportCounts = field(default_factory=ExportCounts)

    def __str__(self) -> str:
        counts = self.counts
        return (
            f"{self.documents} document(s), {self.packages} package(s), "
            f"{self.resources} resource(s): wrote {counts.written} file(s) "
            f"({counts.bytes_written} bytes), {counts.unchanged} unchanged, "
            f"{counts.removed} removed, {len(self.skipped)} skipped"
        )


def fetch(url: str) -> HttpResponseBase:
    """Answer a portal URL in process, through its view, as a GET without a token."""
    base = settings.PUBLIC_BASE_URL
    if not url.startswith(base + "/"):
        raise ExportError(f"{url} is not a URL of this portal ({base})")
    path = urlsplit(url[len(base) :]).path
    try:
        match = resolve(path)
    except Resolver404:
        raise ExportError(f"{url}: the portal serves nothing there") from None
    request = HttpRequest()
    request.method = "GET"
    request.path = request.path_info = path
    request.META = {"SERVER_NAME": "export", "SERVER_PORT": "80", "REQUEST_METHOD": "GET"}
    try:
        response = match.func(request, *match.args, **match.kwargs)
    except Http404 as error:
        raise ExportError(f"{url}: {error} (run `manage.py regenerate` first?)") from None
    if response.status_code != 200:
        raise ExportError(f"{url}: HTTP {response.status_code}")
    return response


def _chunks(response: HttpResponseBase) -> Iterator[bytes]:
    """The body, then its file closed; not `response.close()`, which would send
    `request_finished` (and so close the database connection) mid-export."""
    try:
        if response.streaming:
            yield from response.streaming_content  # type: ignore[attr-defined]
        else:
            yield response.content  # type: ignore[attr-defined]
    finally:
        handle = getattr(response, "file_to_stream", None)
        if handle is not None:
            handle.close()


def _body(url: str) -> bytes:
    return b"".join(_chunks(fetch(url)))


class SetExport:
    """One export of one set to one target."""

    def __init__(
        self,
        resource_set: ResourceSet,
        target: ExportTarget,
        *,
        base_url: str,
        with_resources: bool = False,
    ) -> None:
        if resource_set.protected:
            raise ExportError(f"{resource_set} is protected; a static copy has no access control.")
        self.resource_set = resource_set
        self.target = target
        self.base = base_url.rstrip("/") + "/"
        self.with_resources = with_resources
        self.set_prefix = links.capability_list_url(resource_set).rsplit("/", 1)[0] + "/"
        self.files_prefix = f"{self.base}{FILES_PATH}/{resource_set.path}/"
        self.rewrite = PrefixRewrite(self._prefixes())
        self.report = ExportReport(counts=target.counts)
        self.copied: set[str] = set()

    def _prefixes(self) -> dict[str, str]:
        prefixes = {
            links.source_description_url(): self.base + SOURCE_DESCRIPTION_PATH,
            self.set_prefix: self.base + self.set_prefix[len(settings.PUBLIC_BASE_URL) + 1 :],
        }
        if self.with_resources:
            prefixes[self.resource_set.url_prefix.rstrip("/") + "/"] = self.files_prefix
        return prefixes

    def run(self) -> ExportReport:
        try:
            self.source_description()
            self.crawl(links.capability_list_url(self.resource_set))
        except BaseException:
            # On a full disk the abort fails too: the first error is the one that says why.
            with suppress(OSError):
                self.target.abort()
            raise
        self.target.finish()
        return self.report

    def path_of(self, new_url: str) -> str:
        """Where a rewritten URL's file lives in the export (its decoded path)."""
        return unquote(new_url[len(self.base) :])

    def source_description(self) -> None:
        content = build_source_description(
            [CapabilityListRef(loc=links.capability_list_url(self.resource_set))]
        )
        _, rewritten = rewrite_document(content, self.rewrite)
        self.target.put_bytes(SOURCE_DESCRIPTION_PATH, rewritten)
        self.report.documents += 1

    def crawl(self, start: str) -> None:
        queue, seen = deque([start]), {start}
        while queue:
            url = queue.popleft()
            for following in self.export_document(url):
                if following not in seen and following.startswith(self.set_prefix):
                    seen.add(following)
                    queue.append(following)

    def export_document(self, url: str) -> list[str]:
        """Export one document; the documents it leads to."""
        try:
            document = without_notifications(parse_document(_body(url)))
        except ResourceSyncParseError as error:
            raise ExportError(f"{url}: {error}") from error
        rewritten = render_parsed(document, self.rewrite)
        self.target.put_bytes(self.path_of(self.rewrite(url)), rewritten)
        self.report.documents += 1
        following = [link.href for link in document.links if link.rel != "up"]
        if document.is_index or self.lists_documents(document.capability):
            following += [entry.loc for entry in document.entries]
        elif document.capability in _DUMPS:
            following += self.packages(document)
        elif self.with_resources:
            self.resources(document)
        return following

    @staticmethod
    def lists_documents(capability: str) -> bool:
        """Capability and archive lists: their entries are documents too."""
        return capability in _LISTS_OF_DOCUMENTS or capability.endswith("-archive")

    def packages(self, dump: Document) -> list[str]:
        """Copy a dump's packages as they are; their manifests are followed as documents."""
        manifests = []
        for entry in dump.entries:
            if entry.loc.startswith(self.set_prefix):
                self.target.put_chunks(
                    self.path_of(self.rewrite(entry.loc)), _chunks(fetch(entry.loc))
                )
                self.report.packages += 1
            manifests += [link.href for link in entry.links if link.rel == "contents"]
        return manifests

    def resources(self, document: Document) -> None:
        prefix = self.resource_set.url_prefix.rstrip("/") + "/"
        for entry in document.entries:
            if not entry.loc.startswith(prefix) or entry.loc in self.copied:
                continue
            self.copied.add(entry.loc)
            source = self.resource_file(entry.loc[len(prefix) :])
            if source is None:
                if document.capability == Capability.RESOURCE_LIST:
                    self.report.skipped.append(f"{entry.loc}: no such file under the resource root")
                continue
            self.target.put_file(self.path_of(self.rewrite(entry.loc)), source)
            self.report.resources += 1

    def resource_file(self, quoted: str) -> Path | None:
        """The file under the set's root a URL's remainder names; None if none or outside."""
        root = self.resource_set.resource_root_dir
        if not root:
            return None
        try:
            relative = safe_relative(unquote(quoted))
        except UnsafeExportPath:
            return None
        path = Path(root).joinpath(*relative.parts)
        real_root = os.path.realpath(root)
        if not os.path.realpath(path).startswith(real_root.rstrip(os.sep) + os.sep):
            return None
        return path if path.is_file() else None


def without_notifications(document: Document) -> Document:
    """A Capability List without its notification topics: a static copy has no hub to
    subscribe at, and the portal's hub refuses topics at another address."""
    if document.capability != Capability.CAPABILITY_LIST:
        return document
    kept = tuple(entry for entry in document.entries if entry.capability not in _NOTIFICATIONS)
    return dataclasses.replace(document, entries=kept)


def export_set(
    resource_set: ResourceSet,
    target: ExportTarget,
    *,
    base_url: str,
    with_resources: bool = False,
) -> ExportReport:
    """Write a static copy of the set's documents (and resources) to `target`; journaled."""
    with record_run(kind=RunKind.EXPORT, resource_set=resource_set) as journal:
        export = SetExport(resource_set, target, base_url=base_url, with_resources=with_resources)
        report = export.run()
        journal.count(
            pages=report.documents,
            packages=report.packages,
            resources=report.resources,
            bytes=report.counts.bytes_written,
        )
        journal.detail = {"target": str(target), "report": str(report)}
    return report
