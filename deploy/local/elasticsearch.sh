#!/usr/bin/env bash
# Run a real single-node Elasticsearch on the loopback interface, for tests and local
# runs of the trace index. The distribution is the integ-test zip from Maven Central
# (plain `mvn dependency:copy`), cached; no Docker, no other downloads. It runs on the
# machine's Java (17+), as an unprivileged user when started as root (Elasticsearch
# refuses root), with security off and a fixed heap.
#
#   deploy/local/elasticsearch.sh fetch          cache the zip (once)
#   deploy/local/elasticsearch.sh start [PORT]   start it; prints HERMES_ELASTICSEARCH_URL=http://127.0.0.1:PORT
#   deploy/local/elasticsearch.sh stop [--keep-logs]  stop it, delete its data (and logs, unless kept)
#   deploy/local/elasticsearch.sh status         exit 0 and print the URL if running, else exit 3
#
# Environment: HERMES_ES_VERSION (default below), HERMES_ES_CACHE (the zip's folder),
# HERMES_ES_RUN_DIR (pid and address files), HERMES_ES_HEAP (1g), HERMES_ES_START_TIMEOUT
# (120 s), HERMES_ES_USER (the user it runs as under root: hermesbus-es), ES_JAVA_HOME
# (default: the java on PATH). 9.x needs Java 21+: the trace index's suite passed against
# HERMES_ES_VERSION=9.2.4 with ES_JAVA_HOME=/usr/lib/jvm/temurin-25-jdk-amd64 too.
#
# That distribution has only the transport, security, core and apm modules: no
# lifecycle (ILM), no ingest pipelines, no analysis-common, no GET/DELETE _data_stream.
# hermesbus uses those features where a server has them and works without them.
set -euo pipefail

ES_VERSION=${HERMES_ES_VERSION:-8.19.21}
if [[ ! $ES_VERSION =~ ^[0-9A-Za-z._-]+$ ]]; then
  echo "elasticsearch.sh: bad version '$ES_VERSION'" >&2
  exit 2
fi
ARTIFACT="org.elasticsearch.distribution.integ-test-zip:elasticsearch:$ES_VERSION:zip"
CACHE_DIR=${HERMES_ES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hermesbus/elasticsearch-$ES_VERSION}
ZIP="$CACHE_DIR/elasticsearch-$ES_VERSION.zip"
RUN_DIR=${HERMES_ES_RUN_DIR:-/tmp/hermesbus-elasticsearch}
PID_FILE="$RUN_DIR/es.pid"
DIR_FILE="$RUN_DIR/es.dir"
URL_FILE="$RUN_DIR/es.url"
START_TIMEOUT=${HERMES_ES_START_TIMEOUT:-120}
HEAP=${HERMES_ES_HEAP:-1g}
ES_USER=${HERMES_ES_USER:-hermesbus-es}

log() { printf 'elasticsearch.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ $START_TIMEOUT =~ ^[0-9]+$ ]] || die "HERMES_ES_START_TIMEOUT must be a number, got '$START_TIMEOUT'"
[[ $HEAP =~ ^[0-9]+[kKmMgG]$ ]] || die "HERMES_ES_HEAP must look like 1g or 512m, got '$HEAP'"
[[ $ES_USER =~ ^[a-z_][a-z0-9_-]*$ ]] || die "HERMES_ES_USER is not a user name: '$ES_USER'"

# ---------------------------------------------------------------- fetch

do_fetch() {
  [[ -s $ZIP && -f $ZIP.complete ]] && return 0
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch Elasticsearch $ES_VERSION)"
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.lock" # serialise concurrent fetches into the same cache
  flock 9
  if [[ -s $ZIP && -f $ZIP.complete ]]; then exec 9>&-; return 0; fi
  log "fetching $ARTIFACT (about 107 MB) with mvn into $CACHE_DIR"
  local tmp="$CACHE_DIR/fetch.$$"
  rm -rf -- "$tmp"
  if ! mvn -q -B dependency:copy "-Dartifact=$ARTIFACT" "-DoutputDirectory=$tmp" 2>&1 |
      sed -e 's/\x1b\[[0-9;]*m//g' -e '/^[[:space:]]*$/d' >&2; then
    rm -rf -- "$tmp"; exec 9>&-
    die "mvn failed to fetch $ARTIFACT"
  fi
  [[ -s $tmp/elasticsearch-$ES_VERSION.zip ]] || { rm -rf -- "$tmp"; exec 9>&-; die "no zip was fetched"; }
  mv -- "$tmp/elasticsearch-$ES_VERSION.zip" "$ZIP"
  rm -rf -- "$tmp"
  : >"$ZIP.complete"
  exec 9>&-
}

# ---------------------------------------------------------------- helpers

free_port() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

running_pid() { # the pid we started, still an Elasticsearch JVM
  [[ -f $PID_FILE ]] || return 1
  local pid
  pid=$(cat "$PID_FILE")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'elasticsearch' || return 1
  echo "$pid"
}

health_ok() { # url: the cluster answers its health with green or yellow
  python3 - "$1" <<'PY'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/_cluster/health", timeout=2) as reply:
        status = json.load(reply).get("status")
except (OSError, ValueError):
    sys.exit(1)
sys.exit(0 if status in ("green", "yellow") else 1)
PY
}

make_user() { # as root, Elasticsearch runs as an unprivileged system user (made once)
  id -u "$ES_USER" >/dev/null 2>&1 && return 0
  useradd --system --no-create-home --shell /usr/sbin/nologin "$ES_USER" ||
    die "cannot create the user $ES_USER that Elasticsearch runs as"
}

# ---------------------------------------------------------------- start

do_start() {
  local port=${1:-${HERMES_ES_PORT:-}}
  if [[ -n $port ]]; then
    [[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) || die "PORT out of range: $port"
  fi
  mkdir -p "$RUN_DIR"
  local pid
  if pid=$(running_pid); then
    log "already running (pid $pid), reusing it"
    echo "HERMES_ELASTICSEARCH_URL=$(cat "$URL_FILE")"
    return 0
  fi
  cleanup_state
  command -v java >/dev/null || die "java not found (Elasticsearch $ES_VERSION needs Java 17+)"
  do_fetch
  [[ -n $port ]] || port=$(free_port)
  local tport
  tport=$(free_port)
  while [[ $tport == "$port" ]]; do tport=$(free_port); done

  # Its own folder outside the caller's (root's private temp folders are closed to it).
  local dir
  dir=$(mktemp -d /tmp/hermesbus-es-data.XXXXXX)
  : >"$dir/.hermesbus-es"
  echo "$dir" >"$DIR_FILE"
  unzip -q "$ZIP" -d "$dir" || die "cannot unpack $ZIP"
  local home="$dir/elasticsearch-$ES_VERSION"
  mkdir -p "$dir/data" "$dir/logs" "$dir/tmp"
  cat >>"$home/config/elasticsearch.yml" <<EOF
# Written by deploy/local/elasticsearch.sh: one node, loopback only, no security.
cluster.name: hermesbus-test
node.name: node-1
discovery.type: single-node
network.host: 127.0.0.1
http.port: $port
transport.port: $tport
path.data: $dir/data
path.logs: $dir/logs
xpack.security.enabled: false
action.destructive_requires_name: false
cluster.routing.allocation.disk.threshold_enabled: false
EOF
  local -a runner=()
  if [[ $(id -u) -eq 0 ]]; then
    make_user
    chown -R "$ES_USER:" "$dir"
    chmod 755 "$dir"
    runner=(setpriv --reuid "$ES_USER" --regid "$ES_USER" --init-groups --)
  fi
  log "starting Elasticsearch $ES_VERSION on 127.0.0.1:$port (heap $HEAP, dir $dir)"
  # setsid: it outlives this script and is not hit by the caller's Ctrl-C. The launcher
  # (its pid in launch.pid) starts the server JVM as its child and stops it on SIGTERM.
  local java_home=${ES_JAVA_HOME:-${JAVA_HOME:-}}
  [[ -n $java_home ]] || java_home=$(dirname -- "$(dirname -- "$(readlink -f -- "$(command -v java)")")")
  setsid env ES_JAVA_HOME="$java_home" ES_JAVA_OPTS="-Xms$HEAP -Xmx$HEAP" ES_TMPDIR="$dir/tmp" ES_PATH_CONF="$home/config" \
    bash -c 'echo $$ >"$1"; shift; exec "$@"' es-launch "$PID_FILE" \
    ${runner[@]+"${runner[@]}"} "$home/bin/elasticsearch" >"$dir/logs/stdout.log" 2>&1 </dev/null &
  local url="http://127.0.0.1:$port"
  echo "$url" >"$URL_FILE"
  local deadline=$((SECONDS + START_TIMEOUT))
  while ((SECONDS < deadline)); do
    if [[ -s $PID_FILE ]] && ! kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
      start_failed "$dir" "Elasticsearch exited during startup"
    fi
    if health_ok "$url"; then
      log "ready after ${SECONDS}s"
      echo "HERMES_ELASTICSEARCH_URL=$url"
      return 0
    fi
    sleep 0.5
  done
  start_failed "$dir" "Elasticsearch was not ready within ${START_TIMEOUT}s"
}

start_failed() { # dir message
  log "$2; last lines of $1/logs:"
  tail -n 30 "$1/logs/stdout.log" >&2 2>/dev/null || true
  stop_server
  rm -f -- "$PID_FILE" "$URL_FILE"
  log "data/log dir kept for inspection: $1 ('$0 stop' removes it)"
  exit 1
}

# ---------------------------------------------------------------- stop

stop_server() {
  local pid
  pid=$(running_pid) || return 0
  log "stopping Elasticsearch (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 60; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  log "Elasticsearch did not stop within 30s, killing it and its server"
  pkill -KILL -P "$pid" 2>/dev/null || true
  kill -KILL "$pid" 2>/dev/null || true
}

cleanup_state() {
  local dir
  dir=$(cat "$DIR_FILE" 2>/dev/null || true)
  if [[ -n $dir && -f $dir/.hermesbus-es ]]; then # only a folder we made
    rm -rf -- "$dir"
  fi
  rm -f -- "$PID_FILE" "$DIR_FILE" "$URL_FILE"
}

keep_logs() {
  local dir
  dir=$(cat "$DIR_FILE" 2>/dev/null || true)
  if [[ -n $dir && -f $dir/.hermesbus-es ]]; then
    rm -rf -- "$dir/data" "$dir/tmp" "$dir"/elasticsearch-* "$dir/.hermesbus-es"
    log "logs kept: $dir/logs"
  fi
  rm -f -- "$PID_FILE" "$DIR_FILE" "$URL_FILE"
}

do_stop() {
  stop_server
  if [[ ${1:-} == --keep-logs ]]; then keep_logs; else cleanup_state; fi
}

do_status() {
  local pid
  if pid=$(running_pid); then
    echo "running pid=$pid HERMES_ELASTICSEARCH_URL=$(cat "$URL_FILE" 2>/dev/null)"
    return 0
  fi
  echo "not running"
  return 3
}

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

cmd=${1:-}
[[ $# -gt 0 ]] && shift
case $cmd in
  fetch) [[ $# -eq 0 ]] || usage; do_fetch; echo "ES_ZIP=$ZIP" ;;
  start) [[ $# -le 1 ]] || usage; do_start "${1:-}" ;;
  stop) [[ $# -eq 0 || ( $# -eq 1 && $1 == --keep-logs ) ]] || usage; do_stop "${1:-}" ;;
  status) [[ $# -eq 0 ]] || usage; do_status ;;
  *) usage ;;
esac
