#!/usr/bin/env bash
# Run a real Neo4j Community on the loopback interface, for tests and local runs of the
# long-term graph. Neo4j's test harness (org.neo4j.test:neo4j-harness from Maven Central,
# fetched once with mvn into a cache) runs in a small Java main of ours
# (deploy/local/neo4j/Neo4jRunner.java): Bolt only, no HTTP, no authentication.
#
#   deploy/local/neo4j.sh fetch          cache the jars and compile the runner (once)
#   deploy/local/neo4j.sh start [PORT]   start it; prints HERMES_NEO4J_URL=bolt://127.0.0.1:PORT
#   deploy/local/neo4j.sh stop [--fast] [--keep-logs]  stop it (--fast: SIGKILL, the data
#                                        is thrown away) and delete its folder, but for its
#                                        logs with --keep-logs (after a failed test run)
#   deploy/local/neo4j.sh status         exit 0 and print the URL if running, else exit 3
#
# Environment: HERMES_NEO4J_CACHE (the jars' folder), HERMES_NEO4J_RUN_DIR (pid, folder and
# URL files), HERMES_NEO4J_HEAP (512m), HERMES_NEO4J_START_TIMEOUT (90 s), JAVA (default:
# the java on PATH; 5.26 runs on Java 17, 2025.x and later need 21+).
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
VERSION=$(sed -n 's:.*<neo4j.version>\(.*\)</neo4j.version>.*:\1:p' "$HERE/neo4j/pom.xml")
CACHE_DIR=${HERMES_NEO4J_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hermesbus/neo4j-$VERSION}
RUN_DIR=${HERMES_NEO4J_RUN_DIR:-/tmp/hermesbus-neo4j}
PID_FILE="$RUN_DIR/neo4j.pid"
DIR_FILE="$RUN_DIR/neo4j.dir"
URL_FILE="$RUN_DIR/neo4j.url"
LOG_FILE="$RUN_DIR/neo4j.logfile"
HEAP=${HERMES_NEO4J_HEAP:-512m}
START_TIMEOUT=${HERMES_NEO4J_START_TIMEOUT:-90}
JAVA=${JAVA:-java}

log() { printf 'neo4j.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ $VERSION =~ ^[0-9][0-9A-Za-z._-]*$ ]] || die "no neo4j.version in $HERE/neo4j/pom.xml"
[[ $START_TIMEOUT =~ ^[0-9]+$ ]] || die "HERMES_NEO4J_START_TIMEOUT must be a number, got '$START_TIMEOUT'"
[[ $HEAP =~ ^[0-9]+[kKmMgG]$ ]] || die "HERMES_NEO4J_HEAP must look like 512m or 1g, got '$HEAP'"

do_fetch() {
  [[ -f $CACHE_DIR/complete ]] && return 0
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch Neo4j $VERSION)"
  command -v javac >/dev/null || die "javac not found (a JDK 17+ compiles the runner once)"
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.lock" # serialise concurrent fetches into the same cache
  flock 9
  if [[ -f $CACHE_DIR/complete ]]; then exec 9>&-; return 0; fi
  local tmp="$CACHE_DIR/fetch.$$"
  rm -rf -- "$tmp" "$CACHE_DIR/lib" "$CACHE_DIR/classes"
  mkdir -p "$tmp"
  log "fetching org.neo4j.test:neo4j-harness:$VERSION and its dependencies (about 144 MB) with mvn"
  if ! mvn -q -B -f "$HERE/neo4j/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      "-DoutputDirectory=$tmp/lib" 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^[[:space:]]*$/d' >&2; then
    rm -rf -- "$tmp"
    die "mvn could not fetch neo4j-harness $VERSION"
  fi
  mkdir -p "$tmp/classes"
  javac -d "$tmp/classes" -cp "$tmp/lib/*" "$HERE/neo4j/Neo4jRunner.java" ||
    { rm -rf -- "$tmp"; die "the runner did not compile"; }
  mv "$tmp/lib" "$CACHE_DIR/lib"
  mv "$tmp/classes" "$CACHE_DIR/classes"
  rm -rf -- "$tmp"
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
  command -v "$JAVA" >/dev/null || die "no java on PATH (set JAVA)"
  do_fetch
  [[ -n $port ]] || port=$(free_port)
  mkdir -p "$RUN_DIR"
  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/hermesbus-neo4j.XXXXXX")
  echo "$dir" >"$DIR_FILE"
  log "starting Neo4j $VERSION on 127.0.0.1:$port (heap $HEAP, dir $dir)"
  "$JAVA" "-Xmx$HEAP" -XX:+UseSerialGC -cp "$CACHE_DIR/lib/*:$CACHE_DIR/classes" Neo4jRunner \
    "$dir/data" "$port" >"$dir/runner.out" 2>"$dir/neo4j.log" &
  echo $! >"$PID_FILE"
  local waited=0
  until grep -q '^NEO4J_BOLT=' "$dir/runner.out" 2>/dev/null; do
    if ! running; then
      tail -20 "$dir/neo4j.log" >&2 || true
      die "Neo4j exited before it was ready (log: $dir/neo4j.log)"
    fi
    waited=$((waited + 1))
    if ((waited > START_TIMEOUT * 5)); then
      do_stop --fast
      die "Neo4j was not ready within ${START_TIMEOUT}s"
    fi
    sleep 0.2
  done
  local url="bolt://127.0.0.1:$port" debug
  echo "$url" >"$URL_FILE"
  # the server's own log (the runner's stderr is its own errors only)
  debug=$(find "$dir/data" -path '*/logs/debug.log' -print -quit 2>/dev/null || true)
  echo "${debug:-$dir/neo4j.log}" >"$LOG_FILE"
  log "ready after $((waited / 5))s (log: ${debug:-$dir/neo4j.log})"
  echo "HERMES_NEO4J_URL=$url"
}

do_stop() { # [--fast] [--keep-logs]
  local fast="" keep="" flag
  for flag in "$@"; do
    case $flag in
      --fast) fast=1 ;;
      --keep-logs) keep=1 ;;
      *) die "stop takes --fast and --keep-logs, not '$flag'" ;;
    esac
  done
  if running; then
    local pid
    pid=$(cat "$PID_FILE")
    if [[ -n $fast ]]; then
      kill -KILL "$pid" 2>/dev/null || true
    else
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 150); do # it closes its store files first: 5 to 12 s
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  if [[ -f $DIR_FILE ]]; then
    local dir
    dir=$(cat "$DIR_FILE")
    if [[ -n $keep && -d $dir ]]; then # the logs stay where they were, the store files go
      find "$dir" -type f ! -name '*.log' ! -name runner.out -delete
      find "$dir" -mindepth 1 -type d -empty -delete
      log "logs kept: $dir"
    else
      rm -rf -- "$dir"
    fi
  fi
  rm -f -- "$PID_FILE" "$DIR_FILE" "$URL_FILE" "$LOG_FILE"
}

case ${1:-} in
  fetch) do_fetch ;;
  start) do_start "${2:-}" ;;
  stop) shift; do_stop "$@" ;;
  status)
    if running; then cat "$URL_FILE"; else exit 3; fi
    ;;
  *)
    echo "usage: $0 fetch | start [PORT] | stop [--fast] [--keep-logs] | status" >&2
    exit 2
    ;;
esac
