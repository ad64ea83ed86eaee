"""Keep the published tree in line when who may read a set changes.

A provider turned inactive, a set made protected, a capability switched off,
a slug renamed or a set deleted must leave the front server's tree at once,
or it would keep serving what Django now refuses. Admin edits are rare, so
the whole tree is rebuilt after the commit.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from sources.models import CapabilitySettings, DataProvider, ResourceSet

from . import publishing

WATCHED = (DataProvider, ResourceSet, CapabilitySettings)


@receiver(post_save)
@receiver(post_delete)
def rebuild_published_tree(sender, **kwargs) -> None:
    if sender in WATCHED and publishing.published_root() is not None:
        transaction.on_commit(publishing.rebuild)
