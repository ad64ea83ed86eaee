#!/usr/bin/env bash
# The whole suite, once per database the portal supports: SQLite (the
# embedded default) and PostgreSQL (production). Run by `make test` inside
# scripts/services.sh, which starts Elasticsearch, Redis and PostgreSQL.
#
#   scripts/test.sh [PYTEST_ARGS...]
#
# Environment: TEST_DATABASES ("sqlite postgres"), POSTGRES_TEST_URL (the
# cluster of scripts/postgres.sh), PYTEST (.venv/bin/pytest). Exits non-zero
# when any run fails; a run that collects no test fails too (pytest's 5).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTEST=${PYTEST:-$REPO/.venv/bin/pytest}
TEST_DATABASES=${TEST_DATABASES:-sqlite postgres}
POSTGRES_TEST_URL=${POSTGRES_TEST_URL:-$("$REPO/scripts/postgres.sh" url)}

failed=()
for database in $TEST_DATABASES; do
    case $database in
        sqlite) run=(env -u DATABASE_URL "$PYTEST") ;;
        postgres) run=(env DATABASE_URL="$POSTGRES_TEST_URL" "$PYTEST") ;;
        *)
            echo "unknown database in TEST_DATABASES: $database (sqlite, postgres)" >&2
            exit 2
            ;;
    esac
    echo "=== the suite on $database"
    "${run[@]}" "$@" || failed+=("$database")
done
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "=== the suite failed on: ${failed[*]}"
    exit 1
fi
