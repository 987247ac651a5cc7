#!/usr/bin/env bash
# Run a real Redis on the loopback interface, for tests and local runs of the Redis stores.
# The server is Debian's redis-server package, fetched with `apt-get download` (no root
# install, nothing changed on the system) and unpacked with its two libraries into a
# cache; it runs from there with persistence off (no RDB, no AOF) in a folder of its own.
#
#   deploy/local/redis.sh fetch          cache the server (once; about 1.4 MB)
#   deploy/local/redis.sh start [PORT]   start it; prints HERMES_REDIS_URL=redis://127.0.0.1:PORT/0
#   deploy/local/redis.sh stop [--keep-logs]  stop it and delete its folder (all but its
#                                        redis.log, kept: after a failed test run)
#   deploy/local/redis.sh status         exit 0 and print the URL if running, else exit 3
#
# Environment: HERMES_REDIS_CACHE (the unpacked server's folder), HERMES_REDIS_RUN_DIR
# (pid, folder and URL files), HERMES_REDIS_START_TIMEOUT (10 s). A redis-server already
# on PATH is used as it is when the packages cannot be fetched.
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
LOG_NAME=redis.sh SERVICE=Redis STOP_FLAGS=--keep-logs
USAGE="fetch | start [PORT] | stop [--keep-logs] | status"
# shellcheck source=deploy/local/lib.sh
source "$HERE/lib.sh"

CACHE_DIR=${HERMES_REDIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hermesbus/redis}
RUN_DIR=${HERMES_REDIS_RUN_DIR:-/tmp/hermesbus-redis}
run_files redis # redis.pid (the server writes it), redis.dir, redis.url; .hermesbus-redis
PID_PATTERN=redis-server # a recycled pid is not our server
START_TIMEOUT=${HERMES_REDIS_START_TIMEOUT:-10}
PACKAGES=(redis-server redis-tools libjemalloc2 liblzf1)

check_uint HERMES_REDIS_START_TIMEOUT "$START_TIMEOUT"

server() { # the cached server, else one on PATH
  if [[ -x $CACHE_DIR/root/usr/bin/redis-server && -f $CACHE_DIR/complete ]]; then
    echo "$CACHE_DIR/root/usr/bin/redis-server"
  elif command -v redis-server >/dev/null 2>&1; then
    command -v redis-server
  else
    return 1
  fi
}

cmd_fetch() {
  [[ -f $CACHE_DIR/complete ]] && return 0
  command -v apt-get >/dev/null || die "apt-get not found: install redis-server (7.x) yourself"
  mkdir -p "$CACHE_DIR"
  lock_cache "$CACHE_DIR/.lock"
  if [[ -f $CACHE_DIR/complete ]]; then unlock_cache; return 0; fi
  local tmp="$CACHE_DIR/fetch.$$"
  rm -rf -- "$tmp" "$CACHE_DIR/root"
  mkdir -p "$tmp"
  log "fetching ${PACKAGES[*]} with apt-get download into $CACHE_DIR"
  # apt's sandbox user cannot write into a root-owned cache: it downloads unsandboxed then
  if ! (cd "$tmp" && apt-get download -q "${PACKAGES[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2); then
    rm -rf -- "$tmp"
    die "apt-get download failed (is the Debian mirror reachable? apt-get update may be needed)"
  fi
  local deb
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$CACHE_DIR/root"; done
  rm -rf -- "$tmp"
  [[ -x $CACHE_DIR/root/usr/bin/redis-server ]] || die "the packages held no redis-server"
  touch "$CACHE_DIR/complete"
  unlock_cache
}

pong() { # port: the server answers PING
  python3 - "$1" <<'PY'
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.5) as s:
        s.sendall(b"PING\r\n")
        sys.exit(0 if s.recv(16).startswith(b"+PONG") else 1)
except OSError:
    sys.exit(1)
PY
}

cmd_start() {
  local port=${1:-} binary dir
  [[ -z $port ]] || check_port PORT "$port"
  already_running "$(cat "$URL_FILE" 2>/dev/null)" && return 0
  (cmd_fetch) || true # a redis-server on PATH will do
  binary=$(server) || die "no redis-server: the packages could not be fetched and none is on PATH"
  [[ -n $port ]] || port=$(free_port)
  mkdir -p "$RUN_DIR"
  clean_state "$URL_FILE" # the leftovers of a server that died
  dir=$(data_dir_new "${TMPDIR:-/tmp}" hermesbus-redis)
  # the libraries unpacked beside it (jemalloc, lzf); an installed server finds its own
  export LD_LIBRARY_PATH="$CACHE_DIR/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  "$binary" --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$PID_FILE" --logfile "$dir/redis.log" --protected-mode yes
  if ! POLL_S=0.1 wait_ready "$START_TIMEOUT" pong "$port"; then
    cat "$dir/redis.log" >&2 2>/dev/null || true
    stop_service 5 || true
    die "Redis did not answer on 127.0.0.1:$port (its folder: $dir)"
  fi
  local url="redis://127.0.0.1:$port/0"
  echo "$url" >"$URL_FILE"
  log "Redis $("$binary" --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') at $url (no persistence, dir $dir)"
  echo "HERMES_REDIS_URL=$url"
}

keep_logs() { # no persistence: its log is all it has
  local dir
  dir=$(data_dir) || return 0
  find "$dir" -mindepth 1 ! -name redis.log -delete
  log "log kept: $dir/redis.log"
}

cmd_stop() { # [--keep-logs]
  stop_service 5 || true
  if has_flag --keep-logs "$@"; then keep_logs; fi
  clean_state "$URL_FILE"
}

cmd_status() { # the URL, as start printed it when it found the server running
  running_pid >/dev/null || return 3
  cat "$URL_FILE"
}

main "$@"
