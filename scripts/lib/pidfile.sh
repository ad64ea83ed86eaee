# shellcheck shell=bash
# `pid`, `stop` and `status` of a daemon a service script started, which wrote
# its pid into $PIDFILE. Sourced by scripts/elasticsearch.sh, redis.sh and
# toxiproxy.sh; each defines `log` and sets, before calling these:
#   PIDFILE       the daemon's pidfile
#   WHERE         where it answers, as `status` says it ("on 127.0.0.1:6379")
#   STOP_SECONDS  how long `stop` waits after SIGTERM before a SIGKILL

# The pid of the running daemon; prints nothing and fails when it is not running.
pid() { [[ -s $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && cat "$PIDFILE"; }

stop() {
    local p
    p=$(pid) || { log "not running"; rm -f "$PIDFILE"; return; }
    kill "$p"
    for _ in $(seq $((STOP_SECONDS * 10))); do
        kill -0 "$p" 2>/dev/null || { rm -f "$PIDFILE"; log "stopped"; return; }
        sleep 0.1
    done
    log "still running after $STOP_SECONDS s, killing"
    kill -9 "$p" 2>/dev/null || true
    rm -f "$PIDFILE"
}

# Exit status 3 when stopped, as LSB init scripts' `status`.
status() {
    if [[ -n $(pid) ]]; then
        echo "running (pid $(pid)) $WHERE"
    else
        echo "stopped"
        return 3
    fi
}
