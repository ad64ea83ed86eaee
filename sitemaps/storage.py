"""Generated documents in the `resourcesync` storage, with a gzip twin.

Each version gets a content-addressed name, so a reader never sees a half
written file and several web nodes can share S3-compatible storage; the
database row says which version is current.
"""

from __future__ import annotations

import gzip
import hashlib

from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages

GZIP_SUFFIX = ".gz"


def document_storage() -> Storage:
    return storages["resourcesync"]


def content_etag(content: bytes) -> str:
    return hashlib.blake2b(content, digest_size=16).hexdigest()


def save_document(directory: str, public_name: str, content: bytes) -> tuple[str, str]:
    """Store one version and its gzip copy; return (storage name, etag)."""
    etag = content_etag(content)
    storage = document_storage()
    stem = public_name.removesuffix(".xml")
    name = f"{directory}/{stem}.{etag}.xml"
    if not storage.exists(name):
        storage.save(name + GZIP_SUFFIX, ContentFile(gzip.compress(content, 6, mtime=0)))
        storage.save(name, ContentFile(content))
    return name, etag


def delete_document(name: str) -> None:
    """Remove a superseded version (both copies); a missing file is fine."""
    if not name:
        return
    storage = document_storage()
    for path in (name, name + GZIP_SUFFIX):
        if storage.exists(path):
            storage.delete(path)
