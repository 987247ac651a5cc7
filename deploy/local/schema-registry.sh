#!/usr/bin/env bash
# Local Confluent-compatible Schema Registry for integration tests.
#
# Runs Apicurio Registry (Quarkus, in-memory H2 storage) from its Maven Central
# distribution io.apicurio:apicurio-registry-app:<version>:tar.gz:all and
# exposes its Confluent Schema Registry compatible API ("ccompat") on 127.0.0.1.
#
#   deploy/local/schema-registry.sh start [PORT]   # PORT: default 8081; 0 or "auto" = a free port
#   deploy/local/schema-registry.sh stop
#   deploy/local/schema-registry.sh status
#
# On success `start` and `status` print exactly one line on stdout:
#   HERMES_SCHEMA_REGISTRY_URL=http://127.0.0.1:PORT/apis/ccompat/v7
# Everything else goes to stderr. The server log is ${HERMES_SR_RUN_DIR}/schema-registry.log.
# Storage is in memory: every start begins with an empty registry.
#
# Environment (all optional):
#   HERMES_SR_RUN_DIR                pidfile/log/url dir        (default /tmp/hermesbus-sr)
#   HERMES_SR_CACHE_DIR              unpacked distributions      (default $HOME/.cache/hermesbus)
#   HERMES_SR_APICURIO_VERSION       Apicurio version            (default 3.3.3, needs Java >= 21;
#                                    falls back to 2.6.13.Final on Java 17 when no Java >= 21 is found)
#   HERMES_SR_JAVA                   java binary to use          (default: first suitable one of
#                                    $JAVA_HOME, /usr/lib/jvm/*, PATH)
#   HERMES_SR_JAVA_OPTS              JVM options                 (default: small heap, fast start-up)
#   HERMES_SR_START_TIMEOUT          seconds to wait for the API (default 120)
#   HERMES_SR_DEFAULT_COMPATIBILITY  global compatibility level the registry starts with
#                                    (default BACKWARD, like Confluent; "" leaves Apicurio's default)
#   HERMES_SR_MVN_ARGS               extra arguments for mvn (e.g. -o, -Dmaven.repo.local=...)
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
LOG_NAME=schema-registry SERVICE="Apicurio Registry" USAGE="start [PORT|0|auto] | stop | status"
# shellcheck source=deploy/local/lib.sh
source "$HERE/lib.sh"

RUN_DIR="${HERMES_SR_RUN_DIR:-/tmp/hermesbus-sr}"
CACHE_ROOT="${HERMES_SR_CACHE_DIR:-${HOME}/.cache/hermesbus}"
START_TIMEOUT="${HERMES_SR_START_TIMEOUT:-120}"
DEFAULT_COMPAT="${HERMES_SR_DEFAULT_COMPATIBILITY-BACKWARD}"
JAVA_OPTS_DEFAULT="-Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData"
JAVA_OPTS="${HERMES_SR_JAVA_OPTS:-$JAVA_OPTS_DEFAULT}"
BASE_PATH="/apis/ccompat/v7"
DEP_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

run_files schema-registry # schema-registry.pid, .url; no data folder (its storage is in memory)
# a recycled pid is not our server: it must be a java running an Apicurio launcher
PID_PATTERN='quarkus-run\.jar|apicurio-registry-app-.*-runner\.jar'
LOG_FILE="$RUN_DIR/schema-registry.log"

check_uint HERMES_SR_START_TIMEOUT "$START_TIMEOUT"

java_major() { # prints the major version of the java binary $1 (empty on failure)
  "$1" -version 2>&1 | awk -F'"' '/version/ { split($2, a, "."); print (a[1] == "1") ? a[2] : a[1]; exit }'
}

find_java() { # $1 = minimum major version; prints a java binary or returns 1
  local min="$1" cand major
  local -a cands=()
  if [ -n "${HERMES_SR_JAVA:-}" ]; then
    cands=("$HERMES_SR_JAVA")   # an explicit choice is the only candidate
  else
    [ -n "${JAVA_HOME:-}" ] && cands+=("$JAVA_HOME/bin/java")
    cands+=(/usr/lib/jvm/*/bin/java)
    command -v java >/dev/null 2>&1 && cands+=("$(command -v java)")
  fi
  for cand in "${cands[@]}"; do
    [ -x "$cand" ] || continue
    major="$(java_major "$cand" || true)"
    if [ -n "$major" ] && [ "$major" -ge "$min" ] 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  return 1
}

choose_runtime() { # sets VERSION and JAVA
  if [ -n "${HERMES_SR_APICURIO_VERSION:-}" ]; then
    VERSION="$HERMES_SR_APICURIO_VERSION"
    case "$VERSION" in 2.*) need=17 ;; *) need=21 ;; esac
    JAVA="$(find_java "$need")" || die "Apicurio $VERSION needs Java >= $need; set HERMES_SR_JAVA"
  elif JAVA="$(find_java 21)"; then
    VERSION="3.3.3"
  elif JAVA="$(find_java 17)"; then
    VERSION="2.6.13.Final"
    log "no Java >= 21 found; falling back to Apicurio $VERSION on $JAVA"
  else
    die "no Java >= 17 found; set HERMES_SR_JAVA"
  fi
}

fetch() { # ensures the distribution of $VERSION is unpacked; sets APP_DIR
  APP_DIR="$CACHE_ROOT/apicurio-registry-$VERSION"
  [ -f "$APP_DIR/.complete" ] && return 0
  mkdir -p "$CACHE_ROOT"
  command -v mvn >/dev/null 2>&1 || die "mvn not found (needed once to fetch Apicurio $VERSION)"
  (
    lock_cache "$APP_DIR.lock" # concurrent fetches of the same version wait in turn
    [ -f "$APP_DIR/.complete" ] && exit 0
    local tmp; tmp="$(mktemp -d "$CACHE_ROOT/.fetch.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    log "fetching io.apicurio:apicurio-registry-app:$VERSION:tar.gz:all via mvn (~150 MB, first time only)"
    mkdir -p "$RUN_DIR"
    # shellcheck disable=SC2086
    if ! mvn -B -Dstyle.color=never ${HERMES_SR_MVN_ARGS:-} "$DEP_PLUGIN:copy" \
        -Dartifact="io.apicurio:apicurio-registry-app:$VERSION:tar.gz:all" \
        -DoutputDirectory="$tmp/dl" >"$RUN_DIR/fetch.log" 2>&1; then
      tail -n 30 "$RUN_DIR/fetch.log" >&2
      die "mvn could not fetch Apicurio $VERSION (log: $RUN_DIR/fetch.log)"
    fi
    mkdir -p "$tmp/app"
    tar -xzf "$tmp/dl/apicurio-registry-app-$VERSION-all.tar.gz" -C "$tmp/app"
    touch "$tmp/app/.complete"
    rm -rf "$APP_DIR"
    mv "$tmp/app" "$APP_DIR"
  )
  [ -f "$APP_DIR/.complete" ] || die "fetch of Apicurio $VERSION failed"
}

app_jar() { # prints the launcher jar of the unpacked distribution
  if [ -f "$APP_DIR/quarkus-run.jar" ]; then          # 3.x: fast-jar layout
    echo "$APP_DIR/quarkus-run.jar"
  elif [ -f "$APP_DIR/apicurio-registry-app-$VERSION-runner.jar" ]; then  # 2.x: legacy-jar
    echo "$APP_DIR/apicurio-registry-app-$VERSION-runner.jar"
  else
    die "no launcher jar in $APP_DIR"
  fi
}

port_in_use() {
  python3 -c 'import socket,sys; s=socket.socket(); s.settimeout(1); sys.exit(0 if s.connect_ex(("127.0.0.1",int(sys.argv[1])))==0 else 1)' "$1"
}

api_up() { curl -sf -o /dev/null --max-time 3 "$1/subjects"; }

cmd_start() {
  local port="${1:-${HERMES_SR_PORT:-8081}}" pid
  case "$port" in 0|auto) port="$(free_port)" ;; esac
  check_port PORT "$port"
  mkdir -p "$RUN_DIR"
  if pid="$(running_pid)"; then
    local url; url="$(cat "$URL_FILE" 2>/dev/null || true)"
    if [ -n "$url" ] && api_up "$url"; then
      log "already running (pid $pid)"
      echo "HERMES_SCHEMA_REGISTRY_URL=$url"; return 0
    fi
    die "a server (pid $pid) is running but not answering; run '$0 stop' first"
  fi
  clean_state "$URL_FILE" # the leftovers of a server that died
  port_in_use "$port" && die "port $port on 127.0.0.1 is already in use"

  choose_runtime
  fetch
  local jar; jar="$(app_jar)"
  local url="http://127.0.0.1:$port$BASE_PATH"
  local -a envs=(
    "QUARKUS_HTTP_HOST=127.0.0.1" "QUARKUS_HTTP_PORT=$port" "HTTP_PORT=$port"
    # 3.x serves health/metrics on a separate management port (default 9000): pick a free one.
    "QUARKUS_MANAGEMENT_HOST=127.0.0.1" "QUARKUS_MANAGEMENT_PORT=0"
    # 3.x keeps 20 idle H2 connections by default; a test server needs few.
    "APICURIO_DATASOURCE_JDBC_INITIAL_SIZE=2" "APICURIO_DATASOURCE_JDBC_MIN_SIZE=2"
    "APICURIO_DATASOURCE_JDBC_MAX_SIZE=20"
    "QUARKUS_OTEL_SDK_DISABLED=true"
  )

  log "starting Apicurio Registry $VERSION on 127.0.0.1:$port (java: $JAVA, log: $LOG_FILE)"
  local t0=$SECONDS
  # shellcheck disable=SC2086
  (cd "$RUN_DIR" && exec env "${envs[@]}" nohup "$JAVA" $JAVA_OPTS -jar "$jar" \
      </dev/null >"$LOG_FILE" 2>&1) &
  pid=$!
  echo "$pid" >"$PID_FILE"
  POLL_S=0.5 wait_ready "$START_TIMEOUT" api_up "$url" || start_failed "$pid"
  if [ -n "$DEFAULT_COMPAT" ]; then
    # Store a real global rule through the API. Without one, 3.x answers GET /config with
    # NONE and registers anything, yet POST /compatibility still checks BACKWARD; 2.x
    # rejects PUT /config NONE while no rule is stored.
    if ! curl -sf -o /dev/null --max-time 10 -X PUT \
        -H 'Content-Type: application/vnd.schemaregistry.v1+json' \
        --data "{\"compatibility\":\"$DEFAULT_COMPAT\"}" "$url/config"; then
      log "could not set the global compatibility to $DEFAULT_COMPAT"
      start_failed "$pid"
    fi
  fi
  echo "$url" >"$URL_FILE"
  log "ready after $((SECONDS - t0))s (pid $pid)"
  echo "HERMES_SCHEMA_REGISTRY_URL=$url"
}

start_failed() { # pid: show the end of its log, stop it; exit 1
  log "last lines of $LOG_FILE:"
  tail -n 40 "$LOG_FILE" >&2 || true
  stop_pid "$1" 30 || true
  rm -f "$PID_FILE"
  exit 1
}

cmd_stop() {
  if ! running_pid >/dev/null; then log "not running"; fi
  stop_service 30 || true
  clean_state "$URL_FILE"
}

cmd_status() {
  local pid url
  if ! pid="$(running_pid)"; then log "not running"; return 3; fi
  url="$(cat "$URL_FILE" 2>/dev/null || true)"
  if [ -n "$url" ] && api_up "$url"; then
    log "running (pid $pid)"
    echo "HERMES_SCHEMA_REGISTRY_URL=$url"; return 0
  fi
  log "process $pid alive but API not answering (yet)"; return 1
}

main "$@"
