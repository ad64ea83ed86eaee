#!/usr/bin/env bash
# A private PostgreSQL cluster on 127.0.0.1 for the test suite and the
# benchmarks: Debian's postgresql, installed with apt-get if missing, its own
# data directory under an ignored cache folder, its own port, trust
# authentication on the loopback only, durability off (fsync) since the data
# is thrown away. No systemd, and the distribution's own cluster is not used.
#
#   scripts/postgres.sh start|stop|status|url
#
# Environment: PG_PORT (5433), PG_DIR (.cache/postgres in the clone).
# The superuser and its database are both named `resourcesync`:
#   postgres://resourcesync@127.0.0.1:$PG_PORT/resourcesync
set -euo pipefail
umask 022

PG_PORT=${PG_PORT:-5433}
PG_USER=postgres # the system account PostgreSQL runs as when this runs as root
ROLE=resourcesync
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${PG_DIR:-$REPO/.cache/postgres}
FALLBACK_DIR=/var/tmp/resourcesync-postgres

log() { echo "postgres: $*" >&2; }

as_pg() {
    if [[ $EUID -eq 0 ]]; then runuser -u "$PG_USER" -- "$@"; else "$@"; fi
}

bindir() {
    local version
    version=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n 1)
    [[ -n $version && -x /usr/lib/postgresql/$version/bin/pg_ctl ]] || return 1
    echo "/usr/lib/postgresql/$version/bin"
}

ensure_installed() {
    bindir >/dev/null && return
    log "installing postgresql with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends postgresql >/dev/null
    # Without systemd the package may have started the distribution's cluster
    # (port 5432): this script runs its own, so leave that one alone but stopped.
    if command -v pg_ctlcluster >/dev/null; then
        pg_lsclusters -h 2>/dev/null | while read -r version name _; do
            pg_ctlcluster "$version" "$name" stop >/dev/null 2>&1 || true
        done
    fi
}

# The cluster's directory, owned by the account that runs it; as root, one the
# postgres account can reach (a clone under /root is not).
prepare_dir() {
    if [[ $EUID -eq 0 ]]; then
        mkdir -p "$DIR"
        if ! as_pg test -x "$DIR"; then
            [[ $1 == start ]] && log "$PG_USER cannot reach $DIR, using $FALLBACK_DIR"
            DIR=$FALLBACK_DIR
            mkdir -p "$DIR"
        fi
        chown "$PG_USER:" "$DIR"
    fi
    mkdir -p "$DIR"
    DATA=$DIR/data-$PG_PORT
}

answers() { as_pg "$(bindir)/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" 2>/dev/null; }

init_cluster() {
    [[ -s $DATA/PG_VERSION ]] && return
    log "creating a cluster in $DATA"
    as_pg "$(bindir)/initdb" -D "$DATA" -U "$ROLE" --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
}

start() {
    ensure_installed
    prepare_dir start
    if answers; then
        log "already running on 127.0.0.1:$PG_PORT"
        return
    fi
    init_cluster
    # 9>&-: the server must not inherit (and keep) this script's lock.
    as_pg "$(bindir)/pg_ctl" -D "$DATA" -l "$DIR/postgres-$PG_PORT.log" -w -t 60 start -o \
        "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $DIR -c fsync=off \
         -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
        >/dev/null 9>&- || {
        log "cannot start; the tail of $DIR/postgres-$PG_PORT.log:"
        tail -n 20 "$DIR/postgres-$PG_PORT.log" >&2 || true
        exit 1
    }
    as_pg "$(bindir)/psql" -h 127.0.0.1 -p "$PG_PORT" -U "$ROLE" -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$ROLE'" | grep -q 1 ||
        as_pg "$(bindir)/createdb" -h 127.0.0.1 -p "$PG_PORT" -U "$ROLE" "$ROLE"
    log "ready on 127.0.0.1:$PG_PORT ($(url))"
}

stop() {
    prepare_dir stop
    if [[ ! -s $DATA/postmaster.pid ]]; then
        log "not running"
        return
    fi
    as_pg "$(bindir)/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null && log "stopped"
}

status() {
    ensure_installed >/dev/null 2>&1 || true
    if bindir >/dev/null && answers; then
        echo "running on 127.0.0.1:$PG_PORT"
    else
        echo "stopped"
        return 3
    fi
}

url() { echo "postgres://$ROLE@127.0.0.1:$PG_PORT/$ROLE"; }

case ${1:-} in
    start | stop)
        mkdir -p "$REPO/.cache"
        exec 9>"$REPO/.cache/.postgres-lock-$PG_PORT"
        flock -w 120 9
        "$1"
        ;;
    status) status ;;
    url) url ;;
    *)
        echo "usage: $0 start|stop|status|url" >&2
        exit 2
        ;;
esac
