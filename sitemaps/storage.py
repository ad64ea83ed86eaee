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
#: zlib level of the gzip twins: level 1 compresses a 15 MB Resource List page
#: twice as fast as the default 6, for a file about 15% larger.
GZIP_LEVEL = 1


def document_storage() -> Storage:
    return storages["resourcesync"]


def content_etag(content: bytes) -> str:
    """128 bits of SHA-256: OpenSSL's is hardware-accelerated, about 2.5 times faster
    on a 15 MB page than Python's portable BLAKE2b."""
    return hashlib.sha256(content).hexdigest()[:32]


def save_document(directory: str, public_name: str, content: bytes) -> tuple[str, str]:
    """Store one version and its gzip copy; return (storage name, etag)."""
    etag = content_etag(content)
    storage = document_storage()
    stem = public_name.removesuffix(".xml")
    name = f"{directory}/{stem}.{etag}.xml"
    if not storage.exists(name):
        storage.save(name + GZIP_SUFFIX, ContentFile(gzip.compress(content, GZIP_LEVEL, mtime=0)))
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
