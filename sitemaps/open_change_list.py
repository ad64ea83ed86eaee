"""`changelist-open.xml`: the set's open Change List under a URL that never changes.

A client that reads no Change List Index (resync 2.0.1) can always pass this
URL as its Change List. It is the page view with another lookup, so access
(401/403 before 404), 304, HEAD and gzip behave as for `changelist-<n>.xml`.
"""

from __future__ import annotations

from . import caching
from .models import ChangeListPage, StoredDocument
from .protocol.constants import Capability
from .views import StoredDocumentView


class OpenChangeListView(StoredDocumentView):
    model = ChangeListPage
    kind = Capability.CHANGE_LIST

    def find_document(self) -> StoredDocument | None:
        """The set's list without `until`: closing a list opens the next, so there is one.

        A run opens the next list before it writes it (and, from a backlog, several):
        until then the newest list written answers, not a 404.
        """
        document = self.find({"until": None}, latest=True)
        if document is None or document.storage_name:
            return document
        return newest_written(document) or document

    def cache_control(self, document: StoredDocument) -> str:
        """Whichever list answers, this URL changes at any time: caches revalidate it."""
        return caching.cache_control(caching.REVALIDATE, private=document.resource_set.protected)


def newest_written(open_list: StoredDocument) -> StoredDocument | None:
    """The set's newest Change List with a stored version, its set already loaded."""
    written = (
        ChangeListPage.objects.filter(resource_set_id=open_list.resource_set_id)
        .exclude(storage_name="")
        .order_by("-number")
        .first()
    )
    if written is not None:
        written.resource_set = open_list.resource_set
    return written


open_change_list = OpenChangeListView.as_view()
