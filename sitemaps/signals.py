"""Keep the documents in line with admin and script edits of sets.

A provider turned inactive, a set made protected, a capability switched off,
a slug renamed or a set deleted must leave the front server's tree at once,
or it would keep serving what Django now refuses. Admin edits are rare, so
the whole tree is rebuilt after the commit.

A new set, or a capability turned on, gets its documents written after the
commit, so what its Capability List advertises is there to read.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from sources.models import CapabilitySettings, DataProvider, ResourceSet

from . import publishing, tasks

WATCHED = (DataProvider, ResourceSet, CapabilitySettings)


@receiver(post_save)
@receiver(post_delete)
def rebuild_published_tree(sender, **kwargs) -> None:
    if sender in WATCHED and publishing.published_root() is not None:
        transaction.on_commit(publishing.rebuild)


@receiver(post_save, sender=ResourceSet)
def write_documents_of_new_set(sender, instance: ResourceSet, created: bool, **kwargs) -> None:
    if created and not kwargs.get("raw"):
        set_id = instance.pk
        transaction.on_commit(lambda: tasks.write_missing_documents(set_id, now=True), robust=True)


@receiver(post_save, sender=CapabilitySettings)
def write_documents_turned_on(sender, instance: CapabilitySettings, **kwargs) -> None:
    if not kwargs.get("raw"):
        set_id = instance.resource_set_id
        transaction.on_commit(lambda: tasks.write_missing_documents(set_id, now=False), robust=True)
