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

CACHE_DIR=${HERMES_REDIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hermesbus/redis}
RUN_DIR=${HERMES_REDIS_RUN_DIR:-/tmp/hermesbus-redis}
PID_FILE="$RUN_DIR/redis.pid"
DIR_FILE="$RUN_DIR/redis.dir"
URL_FILE="$RUN_DIR/redis.url"
START_TIMEOUT=${HERMES_REDIS_START_TIMEOUT:-10}
PACKAGES=(redis-server redis-tools libjemalloc2 liblzf1)

log() { printf 'redis.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ $START_TIMEOUT =~ ^[0-9]+$ ]] || die "HERMES_REDIS_START_TIMEOUT must be a number, got '$START_TIMEOUT'"

server() { # the cached server, else one on PATH
  if [[ -x $CACHE_DIR/root/usr/bin/redis-server && -f $CACHE_DIR/complete ]]; then
    echo "$CACHE_DIR/root/usr/bin/redis-server"
  elif command -v redis-server >/dev/null 2>&1; then
    command -v redis-server
  else
    return 1
  fi
}

do_fetch() {
  [[ -f $CACHE_DIR/complete ]] && return 0
  command -v apt-get >/dev/null || die "apt-get not found: install redis-server (7.x) yourself"
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.lock" # serialise concurrent fetches into the same cache
  flock 9
  if [[ -f $CACHE_DIR/complete ]]; then exec 9>&-; return 0; fi
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
  exec 9>&-
}

free_port() {
  python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

running() { [[ -f $PID_FILE ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }

do_start() {
  local port=${1:-}
  if [[ -n $port ]]; then
    [[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) || die "PORT out of range: $port"
  fi
  if running; then
    cat "$URL_FILE"
    return 0
  fi
  do_fetch || true # a redis-server on PATH will do
  local binary
  binary=$(server) || die "no redis-server: the packages could not be fetched and none is on PATH"
  [[ -n $port ]] || port=$(free_port)
  mkdir -p "$RUN_DIR"
  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/hermesbus-redis.XXXXXX")
  echo "$dir" >"$DIR_FILE"
  # the libraries unpacked beside it (jemalloc, lzf); an installed server finds its own
  export LD_LIBRARY_PATH="$CACHE_DIR/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  "$binary" --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$PID_FILE" --logfile "$dir/redis.log" --protected-mode yes
  local waited=0
  until python3 - "$port" <<'PY'
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.5) as s:
        s.sendall(b"PING\r\n")
        sys.exit(0 if s.recv(16).startswith(b"+PONG") else 1)
except OSError:
    sys.exit(1)
PY
  do
    waited=$((waited + 1))
    if ((waited > START_TIMEOUT * 10)); then
      cat "$dir/redis.log" >&2 2>/dev/null || true
      die "Redis did not answer on 127.0.0.1:$port within ${START_TIMEOUT}s"
    fi
    sleep 0.1
  done
  local url="redis://127.0.0.1:$port/0"
  echo "$url" >"$URL_FILE"
  log "Redis $("$binary" --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') at $url (no persistence, dir $dir)"
  echo "HERMES_REDIS_URL=$url"
}

do_stop() {
  if running; then
    local pid
    pid=$(cat "$PID_FILE")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  if [[ -f $DIR_FILE ]]; then
    local dir
    dir=$(cat "$DIR_FILE")
    if [[ ${1:-} == --keep-logs && -d $dir ]]; then # no persistence: its log is all it has
      find "$dir" -mindepth 1 ! -name redis.log -delete
      log "log kept: $dir/redis.log"
    else
      rm -rf -- "$dir"
    fi
  fi
  rm -f -- "$PID_FILE" "$DIR_FILE" "$URL_FILE"
}

case ${1:-} in
  fetch) do_fetch ;;
  start) do_start "${2:-}" ;;
  stop)
    [[ $# -le 1 || ( $# -eq 2 && $2 == --keep-logs ) ]] || die "stop takes --keep-logs, not '${*:2}'"
    do_stop "${2:-}"
    ;;
  status)
    if running; then cat "$URL_FILE"; else exit 3; fi
    ;;
  *)
    echo "usage: $0 fetch | start [PORT] | stop [--keep-logs] | status" >&2
    exit 2
    ;;
esac
