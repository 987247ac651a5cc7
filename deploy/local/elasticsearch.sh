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

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
LOG_NAME=elasticsearch.sh SERVICE=Elasticsearch STOP_FLAGS=--keep-logs
USAGE="fetch | start [PORT] | stop [--keep-logs] | status"
# shellcheck source=deploy/local/lib.sh
source "$HERE/lib.sh"

ES_VERSION=${HERMES_ES_VERSION:-8.19.21}
if [[ ! $ES_VERSION =~ ^[0-9A-Za-z._-]+$ ]]; then
  log "bad version '$ES_VERSION'"
  exit 2
fi
ARTIFACT="org.elasticsearch.distribution.integ-test-zip:elasticsearch:$ES_VERSION:zip"
CACHE_DIR=${HERMES_ES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hermesbus/elasticsearch-$ES_VERSION}
ZIP="$CACHE_DIR/elasticsearch-$ES_VERSION.zip"
RUN_DIR=${HERMES_ES_RUN_DIR:-/tmp/hermesbus-elasticsearch}
run_files es # es.pid, es.dir, es.url; its data folders carry .hermesbus-es
PID_PATTERN=elasticsearch # a recycled pid is not our server
START_TIMEOUT=${HERMES_ES_START_TIMEOUT:-120}
HEAP=${HERMES_ES_HEAP:-1g}
ES_USER=${HERMES_ES_USER:-hermesbus-es}

check_uint HERMES_ES_START_TIMEOUT "$START_TIMEOUT"
check_heap HERMES_ES_HEAP "$HEAP"
[[ $ES_USER =~ ^[a-z_][a-z0-9_-]*$ ]] || die "HERMES_ES_USER is not a user name: '$ES_USER'"

# ---------------------------------------------------------------- fetch

do_fetch() {
  [[ -s $ZIP && -f $ZIP.complete ]] && return 0
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch Elasticsearch $ES_VERSION)"
  mkdir -p "$CACHE_DIR"
  lock_cache "$CACHE_DIR/.lock"
  if [[ -s $ZIP && -f $ZIP.complete ]]; then unlock_cache; return 0; fi
  log "fetching $ARTIFACT (about 107 MB) with mvn into $CACHE_DIR"
  local tmp="$CACHE_DIR/fetch.$$"
  rm -rf -- "$tmp"
  if ! mvn_quiet dependency:copy "-Dartifact=$ARTIFACT" "-DoutputDirectory=$tmp"; then
    rm -rf -- "$tmp"
    die "mvn failed to fetch $ARTIFACT"
  fi
  [[ -s $tmp/elasticsearch-$ES_VERSION.zip ]] || { rm -rf -- "$tmp"; die "no zip was fetched"; }
  mv -- "$tmp/elasticsearch-$ES_VERSION.zip" "$ZIP"
  rm -rf -- "$tmp"
  : >"$ZIP.complete"
  unlock_cache
}

cmd_fetch() {
  do_fetch
  echo "ES_ZIP=$ZIP"
}

# ---------------------------------------------------------------- helpers

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

cmd_start() {
  local port=${1:-${HERMES_ES_PORT:-}}
  [[ -z $port ]] || check_port PORT "$port"
  mkdir -p "$RUN_DIR"
  already_running "HERMES_ELASTICSEARCH_URL=$(cat "$URL_FILE" 2>/dev/null)" && return 0
  clean_state "$URL_FILE" # the leftovers of a server that died
  command -v java >/dev/null || die "java not found (Elasticsearch $ES_VERSION needs Java 17+)"
  do_fetch
  [[ -n $port ]] || port=$(free_port)
  local tport dir
  tport=$(free_port "$port")
  # Its own folder outside the caller's (root's private temp folders are closed to it).
  dir=$(data_dir_new /tmp hermesbus-es-data)
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
  POLL_S=0.5 wait_ready "$START_TIMEOUT" health_ok "$url" || start_failed "$dir"
  log "ready after ${SECONDS}s"
  echo "HERMES_ELASTICSEARCH_URL=$url"
}

start_failed() { # dir
  log "last lines of $1/logs:"
  tail -n 30 "$1/logs/stdout.log" >&2 2>/dev/null || true
  # the cause, above a stack trace the tail may not reach (a port taken: BindTransportException)
  local cause
  cause=$(grep -m1 -E 'fatal exception|Exception:' "$1/logs/stdout.log" 2>/dev/null || true)
  [[ -z $cause ]] || log "its first error: ${cause:0:400}"
  stop_service 30 || true
  rm -f -- "$PID_FILE" "$URL_FILE"
  log "data/log dir kept for inspection: $1 ('$0 stop' removes it)"
  exit 1
}

# ---------------------------------------------------------------- stop and status

keep_logs() { # after a failed test run: its logs stay, the rest goes
  local dir
  dir=$(data_dir) || return 0
  rm -rf -- "$dir/data" "$dir/tmp" "$dir"/elasticsearch-* "${dir:?}/$MARKER"
  log "logs kept: $dir/logs"
}

cmd_stop() { # [--keep-logs]; the launcher stops its server on SIGTERM (SIGKILL: both)
  stop_service 30 || true
  if has_flag --keep-logs "$@"; then keep_logs; fi
  clean_state "$URL_FILE"
}

cmd_status() {
  report_status "HERMES_ELASTICSEARCH_URL=$(cat "$URL_FILE" 2>/dev/null)"
}

main "$@"
