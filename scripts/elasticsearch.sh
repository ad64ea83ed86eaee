#!/usr/bin/env bash
# A throw-away single-node Elasticsearch 8.19 for the test suite and local
# development: plain http on 127.0.0.1, no security, small heap, data in an
# ignored cache folder. The distribution (integ-test-zip, no bundled JDK) comes
# from Maven, so ~/.m2 caches it between runs; the system JDK runs it.
#
#   scripts/elasticsearch.sh start|stop|status
#
# Environment: ES_PORT (9200), ES_HOME_DIR (.cache/elasticsearch in the clone),
# ES_JAVA_HOME (the JDK of `java` on PATH), ES_JAVA_OPTS (-Xms512m -Xmx512m).
set -euo pipefail
umask 022

ES_VERSION=8.19.7
ARTIFACT="org.elasticsearch.distribution.integ-test-zip:elasticsearch:$ES_VERSION:zip"
ES_USER=elasticsearch
ES_PORT=${ES_PORT:-9200}
URL="http://127.0.0.1:$ES_PORT"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${ES_HOME_DIR:-$REPO/.cache/elasticsearch}
FALLBACK_DIR=/var/tmp/resourcesync-elasticsearch
WHERE="at $URL"
STOP_SECONDS=60
# shellcheck source=SCRIPTDIR/lib/pidfile.sh
source "$REPO/scripts/lib/pidfile.sh"

log() { echo "elasticsearch: $*" >&2; }

# Elasticsearch refuses to run as root: as root, run it as a system user.
as_es() {
    if [[ $EUID -eq 0 ]]; then runuser -u "$ES_USER" -- "$@"; else "$@"; fi
}

prepare_dir() {
    if [[ $EUID -eq 0 ]]; then
        id -u "$ES_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$ES_USER"
        mkdir -p "$DIR"
        # e.g. a clone under /root: the system user cannot reach it.
        if ! as_es test -x "$DIR"; then
            [[ $1 == start ]] && log "$ES_USER cannot reach $DIR, using $FALLBACK_DIR"
            DIR=$FALLBACK_DIR
        fi
    fi
    mkdir -p "$DIR"
    DIST=$DIR/elasticsearch-$ES_VERSION
    PIDFILE=$DIR/run/elasticsearch.pid
    LOGFILE=$DIR/logs/resourcesync-test.log
}

healthy() { curl -fsS -m 5 "$URL/_cluster/health?wait_for_status=yellow&timeout=2s" >/dev/null 2>&1; }

fetch() {
    [[ -x $DIST/bin/elasticsearch ]] && return
    log "fetching $ARTIFACT with mvn"
    need mvn maven
    local tmp out
    tmp=$(mktemp -d)
    # dependency:copy needs no project; run it away from any pom. Quiet mvn
    # still prints its errors on stdout: show them only on failure.
    if ! out=$(cd "$tmp" && mvn -q -B -Dstyle.color=never dependency:copy \
        -Dartifact="$ARTIFACT" -DoutputDirectory="$tmp" 2>&1); then
        echo "$out" >&2
        log "mvn could not fetch $ARTIFACT"
        exit 1
    fi
    need unzip unzip
    unzip -q "$tmp/elasticsearch-$ES_VERSION.zip" -d "$tmp/unpacked"
    rm -rf "$DIST"
    mv "$tmp/unpacked/elasticsearch-$ES_VERSION" "$DIST"
    rm -rf "$tmp"
}

# Installs the Debian package for a missing command: CI machines start bare.
need() {
    command -v "$1" >/dev/null && return
    log "installing $2 (for $1)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$2" >/dev/null
}

start() {
    if [[ -n $(pid) ]]; then
        log "already running (pid $(pid)) $WHERE"
        return
    fi
    need curl curl
    if healthy; then
        log "a node not started by this script already answers at $URL; using it"
        return
    fi
    [[ -n ${ES_JAVA_HOME:-} ]] || need java openjdk-17-jre-headless
    fetch
    # Config, data, logs, pid and temp files live outside the distribution,
    # writable by the user that runs the node.
    mkdir -p "$DIR"/{config,data,logs,run,tmp}
    [[ -f $DIR/config/jvm.options ]] || cp -r "$DIST/config/." "$DIR/config/"
    if [[ $EUID -eq 0 ]]; then chown -R "$ES_USER:" "$DIR"/{config,data,logs,run,tmp}; fi
    rm -f "$PIDFILE" "$DIR"/logs/*
    local java_home=${ES_JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")}
    log "starting $ES_VERSION at $URL (home $DIR, JDK $java_home)"
    # setsid: a Ctrl-C in this terminal must not reach the node later;
    # 9>&-: the node must not inherit (and keep) this script's lock.
    if ! as_es env -C "$DIR/logs" \
        ES_JAVA_HOME="$java_home" ES_JAVA_OPTS="${ES_JAVA_OPTS:--Xms512m -Xmx512m}" \
        ES_PATH_CONF="$DIR/config" ES_TMPDIR="$DIR/tmp" \
        setsid --wait "$DIST/bin/elasticsearch" -d -p "$PIDFILE" \
        -E cluster.name=resourcesync-test \
        -E discovery.type=single-node \
        -E network.host=127.0.0.1 \
        -E http.port="$ES_PORT" \
        -E path.data="$DIR/data" \
        -E path.logs="$DIR/logs" \
        -E xpack.security.enabled=false \
        -E cluster.routing.allocation.disk.threshold_enabled=false \
        -E action.destructive_requires_name=false \
        >"$DIR/logs/startup.out" 2>&1 9>&-; then
        fail "the launcher failed"
    fi
    for _ in $(seq 120); do
        healthy && { log "ready (pid $(pid))"; return; }
        [[ -n $(pid) ]] || fail "the process exited"
        sleep 1
    done
    fail "no answer from $URL after 120 s"
}

fail() {
    log "cannot start: $*. Errors, then the tail of the log ($DIR/logs):"
    cat "$DIR/logs/startup.out" "$LOGFILE" 2>/dev/null |
        grep -E '\]\[ERROR *\]|^ERROR:|^Caused by' | cut -c1-400 | tail -n 15 >&2 || true
    tail -n 15 "$([[ -s $LOGFILE ]] && echo "$LOGFILE" || echo "$DIR/logs/startup.out")" >&2 || true
    stop >/dev/null 2>&1 || true
    exit 1
}

prepare_dir "${1:-}"
case ${1:-} in
    start | stop)
        # One start or stop at a time (another shell may be running the tests).
        exec 9>"$DIR/.lock"
        flock -w 300 9
        "$1"
        ;;
    status) status ;;
    *)
        echo "usage: $0 start|stop|status" >&2
        exit 2
        ;;
esac
