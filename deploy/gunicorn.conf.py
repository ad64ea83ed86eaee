"""gunicorn for the portal when clients reach it directly (no nginx in front).

    gunicorn -c deploy/gunicorn.conf.py resourcesync_portal.wsgi

Without the front server harvesters connect straight to gunicorn. Public
documents are then sent from the published tree (RESOURCESYNC_PUBLISHED_DIR)
by the layer resourcesync_portal.wsgi puts in front of Django
(sitemaps/published_files.py: no Django, no database); everything else is
Django's answer (protected sets, documents on S3 storage). gunicorn's sync
workers close the connection after each answer, so every request pays a new
connection and an accept, each a wait for a time slice on a busy machine;
gunicorn recommends them only behind a buffering proxy. Threaded workers keep
connections alive: serving a 50,000-entry page (bench item 4, SQLite), gunicorn
alone went from 2.1-3.6x nginx's p50 to 1.0-1.6x; sending it from the tree,
1.1-2.1x gzip on SQLite and PostgreSQL, against 1.8-4.5x for Django's view
(bench/README.md).
Behind deploy/nginx.conf the documented sync command stays (nginx talks to
gunicorn without keep-alive and buffers slow clients).

Each thread holds its own database connection (CONN_MAX_AGE), so a server
holds up to workers x threads of them. Environment: GUNICORN_BIND
(127.0.0.1:8000), WEB_CONCURRENCY (worker processes, 2), GUNICORN_THREADS
(threads per worker, 4); command-line options override any of these.
"""

import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
# Seconds an idle connection is kept between a client's requests.
keepalive = 5
# What the ingestion body limit is sized for (README, Ingestion limits).
timeout = 120
