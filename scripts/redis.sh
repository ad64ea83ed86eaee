#!/usr/bin/env bash
# A private Redis on 127.0.0.1 for the test suite (the Celery broker): Debian's
# redis-server, installed with apt-get if missing, daemonised with its own
# pidfile, log and (non-persistent) data under an ignored cache folder. No systemd.
#
#   scripts/redis.sh start|stop|status
#
# Environment: REDIS_PORT (6379), REDIS_DIR (.cache/redis in the clone).
set -euo pipefail

REDIS_PORT=${REDIS_PORT:-6379}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${REDIS_DIR:-$REPO/.cache/redis}
PIDFILE=$DIR/redis-$REDIS_PORT.pid
LOGFILE=$DIR/redis-$REDIS_PORT.log
WHERE="on 127.0.0.1:$REDIS_PORT"
STOP_SECONDS=10
# shellcheck source=SCRIPTDIR/lib/pidfile.sh
source "$REPO/scripts/lib/pidfile.sh"

log() { echo "redis: $*" >&2; }
answers() { [[ $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }

ensure_installed() {
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return
    log "installing redis-server with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends redis-server >/dev/null
    # Without systemd, the package may have started the distribution's own
    # server on 6379: stop it, this script runs its own.
    if [[ -x /etc/init.d/redis-server ]]; then /etc/init.d/redis-server stop >/dev/null 2>&1 || true; fi
}

start() {
    ensure_installed
    if [[ -n $(pid) ]]; then
        log "already running (pid $(pid)) $WHERE"
        return
    fi
    if answers; then
        log "a server not started by this script already answers on 127.0.0.1:$REDIS_PORT; using it"
        return
    fi
    rm -f "$PIDFILE" "$LOGFILE"
    # 9>&-: the server must not inherit (and keep) this script's lock.
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --daemonize yes \
        --pidfile "$PIDFILE" --logfile "$LOGFILE" --dir "$DIR" \
        --save "" --appendonly no 9>&-
    for _ in $(seq 60); do
        answers && { log "ready (pid $(pid)) $WHERE"; return; }
        sleep 0.5
    done
    log "cannot start; the tail of $LOGFILE:"
    tail -n 20 "$LOGFILE" >&2 || true
    stop >/dev/null 2>&1 || true
    exit 1
}

case ${1:-} in
    start | stop)
        # One start or stop at a time (another shell may be running the tests).
        mkdir -p "$DIR"
        exec 9>"$DIR/.lock-$REDIS_PORT"
        flock -w 120 9
        "$1"
        ;;
    status) status ;;
    *)
        echo "usage: $0 start|stop|status" >&2
        exit 2
        ;;
esac
