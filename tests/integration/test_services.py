"""The real services answer, and a real Celery worker runs tasks through Redis."""

import uuid

import pytest
from celery.result import EagerResult

from resourcesync_portal.celery import app


@app.task(name="tests.integration.create_group")
def create_group(name: str) -> int:
    """Runs in the worker: a row written there must be visible to the test."""
    from django.contrib.auth.models import Group

    return Group.objects.create(name=name).pk


@pytest.fixture
def celery_worker_includes() -> list[str]:
    return [__name__]


def test_elasticsearch_is_8_19(elasticsearch_client):
    (node,) = elasticsearch_client.nodes.info(node_id="_local")["nodes"].values()
    assert node["version"].startswith("8.19.")


def test_celery_worker_runs_tasks_through_redis(celery_worker):
    # A built-in task that returns one of its arguments.
    result = app.tasks["celery.accumulate"].delay("pong", index=0)
    assert not isinstance(result, EagerResult)
    assert result.get(timeout=30) == "pong"
    celery_worker.wait_for_log(f"Task celery.accumulate[{result.id}] succeeded")


def test_celery_worker_shares_the_test_database(celery_worker):
    from django.contrib.auth.models import Group

    name = f"written-by-worker-{uuid.uuid4()}"
    pk = create_group.delay(name).get(timeout=30)
    assert Group.objects.get(pk=pk).name == name
