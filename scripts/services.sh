#!/usr/bin/env bash
# The real services the test suite needs, Elasticsearch, Redis and PostgreSQL, together.
#
#   scripts/services.sh start|stop|status
#   scripts/services.sh run COMMAND...
#       Starts the services that are not running, runs COMMAND and exits with
#       its exit code. When the last concurrent `run` ends (even if COMMAND
#       failed or was interrupted), the services that `run` started are stopped;
#       services that were already running are left alone.
set -euo pipefail

SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SERVICES=(elasticsearch redis postgres)
# Per pair of ports: users/<pid> for each run, "started" lists what to stop at the end.
STATE=$SCRIPTS/../.cache/services/${ES_PORT:-9200}-${REDIS_PORT:-6379}-${PG_PORT:-5433}

each() {
    local rc=0 s
    for s in "${SERVICES[@]}"; do
        [[ $1 == status ]] && printf '%s: ' "$s"
        "$SCRIPTS/$s.sh" "$1" || rc=$?
    done
    return "$rc"
}

release() {
    local f s started
    exec 9>"$STATE/lock"
    flock 9
    rm -f "$STATE/users/$$"
    for f in "$STATE"/users/*; do
        [[ -e $f ]] || continue
        kill -0 "${f##*/}" 2>/dev/null && return # another run still needs them
        rm -f "$f"                               # left by a killed run
    done
    [[ -f $STATE/started ]] || return 0
    mapfile -t started < <(sort -u "$STATE/started")
    for s in "${started[@]}"; do "$SCRIPTS/$s.sh" stop || true; done
    rm -f "$STATE/started"
}

# Programs the tests run themselves (nginx in front of a live portal, Chromium
# for the browser tests); as root, installed from Debian when missing.
need_programs() {
    need_program nginx /usr/sbin/nginx tests/integration/test_front_server.py
    need_program chromium /usr/bin/chromium tests/integration/test_browser.py
}

need_program() {
    local package=$1 path=$2 test=$3
    command -v "$package" >/dev/null || [[ -x $path ]] && return 0
    [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null || return 0
    echo "installing $package with apt-get ($test)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "$package" >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$package" >/dev/null; }
}

run() {
    local s rc=0
    need_programs
    mkdir -p "$STATE/users"
    trap release EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    (
        flock 9
        touch "$STATE/users/$$"
        for s in "${SERVICES[@]}"; do
            if ! "$SCRIPTS/$s.sh" status >/dev/null; then
                echo "$s" >>"$STATE/started"
                "$SCRIPTS/$s.sh" start
            fi
        done
    ) 9>"$STATE/lock"
    "$@" || rc=$?
    exit "$rc"
}

case ${1:-} in
    start | stop | status) each "$1" ;;
    run)
        shift
        [[ $# -gt 0 ]] || { echo "usage: $0 run COMMAND..." >&2; exit 2; }
        run "$@"
        ;;
    *)
        echo "usage: $0 start|stop|status|run COMMAND..." >&2
        exit 2
        ;;
esac
