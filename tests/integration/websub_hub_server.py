"""flask-websub's hub (a third-party WebSub hub from PyPI) as a real HTTP server.

`python -m tests.integration.websub_hub_server PORT DATABASE` serves it on
127.0.0.1:PORT at /hub, with `hub.mode=publish` enabled (the hub then fetches
the topic and distributes it, signed with sha256). Its Celery tasks run
eagerly, inside the request, so it needs no broker.
"""

from __future__ import annotations

import sys

from celery import Celery
from flask import Flask
from flask_websub.hub import Hub, SQLite3HubStorage


def make_app(database: str) -> Flask:
    app = Flask("websub-hub")
    app.config.update(PUBLISH_SUPPORTED=True, HUB_MIN_LEASE_SECONDS=300)
    celery = Celery("websub-hub", broker="memory://")
    celery.conf.task_always_eager = True
    hub = Hub(
        SQLite3HubStorage(database),
        celery,
        PUBLISH_SUPPORTED=True,
        SIGNATURE_ALGORITHM="sha256",
        REQUEST_TIMEOUT=5,
        MAX_ATTEMPTS=2,
        BACKOFF_BASE=0.1,
    )
    app.register_blueprint(hub.build_blueprint(url_prefix="/hub"))
    return app


if __name__ == "__main__":
    port, database = int(sys.argv[1]), sys.argv[2]
    make_app(database).run(host="127.0.0.1", port=port, threaded=True)
