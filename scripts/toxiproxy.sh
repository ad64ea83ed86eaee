#!/usr/bin/env bash
# Shopify's toxiproxy on 127.0.0.1, for the benchmarks that need a network's
# round-trip time between a harvester and a local server (this kernel has no
# netem). Built from its Go module with `go install` into an ignored cache
# folder (GOPATH, module and build caches there too) the first time; Go comes
# from PATH or /usr/local/go, else Debian's golang-go is installed with apt-get.
# Daemonised with its own pidfile and log. No systemd.
#
#   scripts/toxiproxy.sh install|start|stop|status|path
#
# `path` prints the server binary (installing it first). The proxies and their
# toxics are made by the caller through the server's HTTP API on TOXIPROXY_PORT.
#
# Environment: TOXIPROXY_PORT (8474), TOXIPROXY_DIR (.cache/toxiproxy in the
# clone), TOXIPROXY_VERSION (the module version, v2.5.0).
set -euo pipefail

TOXIPROXY_PORT=${TOXIPROXY_PORT:-8474}
TOXIPROXY_VERSION=${TOXIPROXY_VERSION:-v2.5.0}
MODULE=github.com/Shopify/toxiproxy/v2/cmd/server
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${TOXIPROXY_DIR:-$REPO/.cache/toxiproxy}
BINARY=$DIR/bin/toxiproxy-server-$TOXIPROXY_VERSION
PIDFILE=$DIR/toxiproxy-$TOXIPROXY_PORT.pid
LOGFILE=$DIR/toxiproxy-$TOXIPROXY_PORT.log
WHERE="on 127.0.0.1:$TOXIPROXY_PORT"
STOP_SECONDS=5
# shellcheck source=SCRIPTDIR/lib/pidfile.sh
source "$REPO/scripts/lib/pidfile.sh"

log() { echo "toxiproxy: $*" >&2; }
answers() { curl -fsS --max-time 2 "http://127.0.0.1:$TOXIPROXY_PORT/version" >/dev/null 2>&1; }

go_binary() {
    command -v go 2>/dev/null && return
    [[ -x /usr/local/go/bin/go ]] && { echo /usr/local/go/bin/go; return; }
    log "installing golang-go with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends golang-go ca-certificates git >/dev/null
    command -v go
}

install() {
    [[ -x $BINARY ]] && return
    local go gobin
    go=$(go_binary)
    log "building $MODULE@$TOXIPROXY_VERSION with $($go version)"
    mkdir -p "$DIR/bin"
    gobin=$(mktemp -d "$DIR/gobin.XXXXXX")
    # Its own GOPATH and caches under the ignored .cache (the module cache is read-only files).
    GOPATH=$REPO/.cache/go GOMODCACHE=$REPO/.cache/go/pkg/mod GOCACHE=$REPO/.cache/go/build \
        GOBIN=$gobin GOFLAGS=-modcacherw "$go" install "$MODULE@$TOXIPROXY_VERSION"
    mv "$gobin/server" "$BINARY"
    rmdir "$gobin"
}

start() {
    install
    if [[ -n $(pid) ]]; then
        log "already running (pid $(pid)) $WHERE"
        return
    fi
    if answers; then
        log "a server not started by this script already answers on 127.0.0.1:$TOXIPROXY_PORT; using it"
        return
    fi
    rm -f "$PIDFILE" "$LOGFILE"
    # 9>&-: the server must not inherit (and keep) this script's lock.
    LOG_LEVEL=warn nohup "$BINARY" -host 127.0.0.1 -port "$TOXIPROXY_PORT" \
        >"$LOGFILE" 2>&1 </dev/null 9>&- &
    echo $! >"$PIDFILE"
    for _ in $(seq 100); do
        answers && { log "ready (pid $(pid)) $WHERE"; return; }
        [[ -n $(pid) ]] || break
        sleep 0.1
    done
    log "cannot start; the tail of $LOGFILE:"
    tail -n 20 "$LOGFILE" >&2 || true
    stop >/dev/null 2>&1 || true
    exit 1
}

case ${1:-} in
    install | start | stop)
        # One install, start or stop at a time (two benchmarks may start at once).
        mkdir -p "$DIR"
        exec 9>"$DIR/.lock"
        flock -w 300 9
        "$1"
        ;;
    path)
        mkdir -p "$DIR"
        exec 9>"$DIR/.lock"
        flock -w 300 9
        install
        echo "$BINARY"
        ;;
    status) status ;;
    *)
        echo "usage: $0 install|start|stop|status|path" >&2
        exit 2
        ;;
esac
