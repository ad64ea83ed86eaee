"""Documents in S3-compatible storage, as deployments with several web nodes keep them.

A real S3 API (moto's server) answers on loopback; django-storages talks to it.
"""

from __future__ import annotations

import gzip
from datetime import timedelta

import boto3
import pytest
from django.utils import timezone
from moto.server import ThreadedMotoServer

from sitemaps.cleanup import remove_unreferenced
from sitemaps.models import ResourceListPage
from sitemaps.regeneration import regenerate
from sitemaps.storage import content_etag, save_document

from ..support import NS, assert_valid, created, event, ingest, make_set

pytestmark = pytest.mark.django_db
BUCKET = "resourcesync-documents"


@pytest.fixture(scope="module")
def s3_endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_storage(settings, s3_endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    settings.STORAGES = {
        **settings.STORAGES,
        "resourcesync": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": BUCKET,
                "endpoint_url": s3_endpoint,
                "region_name": "us-east-1",
                "file_overwrite": True,
            },
        },
    }
    yield client
    for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


def keys(client) -> set[str]:
    return {item["Key"] for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


def test_documents_are_written_to_and_served_from_s3(s3_storage, client):
    resource_set = make_set(entries_per_document=3)
    created(resource_set, 7)
    stored = keys(s3_storage)
    pages = ResourceListPage.objects.order_by("after_key")
    assert {page.storage_name for page in pages} <= stored
    assert {page.storage_name + ".gz" for page in pages} <= stored

    response = client.get("/resourcesync/acme/articles/resourcelist-2.xml")
    body = b"".join(response.streaming_content)
    assert response.status_code == 200
    root = assert_valid(body)
    assert len(root.findall("sm:url", NS)) == 3
    zipped = client.get(
        "/resourcesync/acme/articles/resourcelist-2.xml", headers={"accept-encoding": "gzip"}
    )
    assert gzip.decompress(b"".join(zipped.streaming_content)) == body
    head = client.head("/resourcesync/acme/articles/resourcelist-2.xml")
    assert head["Content-Length"] == str(len(body))


def test_a_superseded_version_is_removed_from_s3_after_the_grace_period(s3_storage):
    resource_set = make_set(entries_per_document=3)
    created(resource_set, 4)
    first = ResourceListPage.objects.get(number=1).storage_name
    ingest(resource_set, [event("updated", "r/0000001", version=2)])
    regenerate(resource_set)
    current = ResourceListPage.objects.get(number=1).storage_name
    assert current != first
    assert {current, first} <= keys(s3_storage), "a reader may still be opening the old one"

    remove_unreferenced(now=timezone.now() + timedelta(seconds=10))
    assert first in keys(s3_storage)
    remove_unreferenced(now=timezone.now() + timedelta(hours=1))
    assert current in keys(s3_storage) and current + ".gz" in keys(s3_storage)
    assert first not in keys(s3_storage) and first + ".gz" not in keys(s3_storage)


def test_an_orphan_in_s3_goes_only_once_older_than_the_grace_period(s3_storage, settings):
    settings.RESOURCESYNC_SUPERSEDED_GRACE_SECONDS = 300
    orphan = f"acme/articles/resourcelist-9.{'a' * 32}.xml"
    s3_storage.put_object(Bucket=BUCKET, Key=orphan, Body=b"<urlset>")
    s3_storage.put_object(Bucket=BUCKET, Key="acme/notes.txt", Body=b"not ours")
    assert remove_unreferenced(now=timezone.now() + timedelta(seconds=200)) == []
    assert remove_unreferenced(now=timezone.now() + timedelta(seconds=400)) == [orphan]
    assert keys(s3_storage) == {"acme/notes.txt"}


def test_a_short_object_under_the_version_name_is_replaced_in_s3(s3_storage):
    content = b"<urlset>" + b"<url>entry</url>" * 100 + b"</urlset>"
    name = f"acme/articles/changelist-1.{content_etag(content)}.xml"
    s3_storage.put_object(Bucket=BUCKET, Key=name, Body=content[:50])
    s3_storage.put_object(Bucket=BUCKET, Key=name + ".gz", Body=gzip.compress(content)[:20])
    assert save_document("acme/articles", "changelist-1.xml", content)[0] == name
    stored = s3_storage.get_object(Bucket=BUCKET, Key=name)["Body"].read()
    assert stored == content
    twin = s3_storage.get_object(Bucket=BUCKET, Key=name + ".gz")["Body"].read()
    assert gzip.decompress(twin) == content


def test_dump_packages_are_stored_in_s3_rebuilt_from_s3_and_served_with_ranges(
    s3_storage, client, tmp_path
):
    from sitemaps.models import ResourcePackage

    from .test_dumps import FileSet, content, resource_dump

    files = FileSet(tmp_path / "files", entries_per_document=3)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(5)])
    packages = ResourcePackage.objects.order_by("after_key")
    assert {p.storage_name for p in packages} | {p.manifest_name for p in packages} <= keys(
        s3_storage
    )
    report = files.post([files.write("r1.txt", content(1, version=2), change="updated")])
    assert report.dumps.reused["resourcedump-package-1.zip"] == 2  # copied out of S3
    assert resource_dump(client)[files.prefix + "r1.txt"] == content(1, version=2)

    path = "/resourcesync/acme/files/resourcedump-package-1.zip"
    whole = b"".join(client.get(path).streaming_content)
    part = client.get(path, headers={"Range": "bytes=20-"})
    assert part.status_code == 206 and b"".join(part.streaming_content) == whole[20:]
