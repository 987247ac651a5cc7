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
LOG_NAME=neo4j.sh SERVICE=Neo4j STOP_FLAGS="--fast --keep-logs"
USAGE="fetch | start [PORT] | stop [--fast] [--keep-logs] | status"
# shellcheck source=deploy/local/lib.sh
source "$HERE/lib.sh"

VERSION=$(sed -n 's:.*<neo4j.version>\(.*\)</neo4j.version>.*:\1:p' "$HERE/neo4j/pom.xml")
CACHE_DIR=${HERMES_NEO4J_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hermesbus/neo4j-$VERSION}
RUN_DIR=${HERMES_NEO4J_RUN_DIR:-/tmp/hermesbus-neo4j}
run_files neo4j # neo4j.pid, neo4j.dir, neo4j.url; its data folders carry .hermesbus-neo4j
PID_PATTERN=Neo4jRunner # a recycled pid is not our server
LOG_FILE="$RUN_DIR/neo4j.logfile"
HEAP=${HERMES_NEO4J_HEAP:-512m}
START_TIMEOUT=${HERMES_NEO4J_START_TIMEOUT:-90}
JAVA=${JAVA:-java}

[[ $VERSION =~ ^[0-9][0-9A-Za-z._-]*$ ]] || die "no neo4j.version in $HERE/neo4j/pom.xml"
check_uint HERMES_NEO4J_START_TIMEOUT "$START_TIMEOUT"
check_heap HERMES_NEO4J_HEAP "$HEAP"

cmd_fetch() {
  [[ -f $CACHE_DIR/complete ]] && return 0
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch Neo4j $VERSION)"
  command -v javac >/dev/null || die "javac not found (a JDK 17+ compiles the runner once)"
  mkdir -p "$CACHE_DIR"
  lock_cache "$CACHE_DIR/.lock"
  if [[ -f $CACHE_DIR/complete ]]; then unlock_cache; return 0; fi
  local tmp="$CACHE_DIR/fetch.$$"
  rm -rf -- "$tmp" "$CACHE_DIR/lib" "$CACHE_DIR/classes"
  mkdir -p "$tmp"
  log "fetching org.neo4j.test:neo4j-harness:$VERSION and its dependencies (about 144 MB) with mvn"
  if ! mvn_quiet -f "$HERE/neo4j/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      "-DoutputDirectory=$tmp/lib"; then
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
  unlock_cache
}

runner_ready() { # dir: the runner said where Bolt listens
  grep -q '^NEO4J_BOLT=' "$1/runner.out" 2>/dev/null
}

cmd_start() {
  local port=${1:-}
  [[ -z $port ]] || check_port PORT "$port"
  already_running "$(cat "$URL_FILE" 2>/dev/null)" && return 0
  command -v "$JAVA" >/dev/null || die "no java on PATH (set JAVA)"
  cmd_fetch
  [[ -n $port ]] || port=$(free_port)
  mkdir -p "$RUN_DIR"
  clean_state "$URL_FILE" "$LOG_FILE" # the leftovers of a server that died
  local dir t0=$SECONDS
  dir=$(data_dir_new "${TMPDIR:-/tmp}" hermesbus-neo4j)
  log "starting Neo4j $VERSION on 127.0.0.1:$port (heap $HEAP, dir $dir)"
  "$JAVA" "-Xmx$HEAP" -XX:+UseSerialGC -cp "$CACHE_DIR/lib/*:$CACHE_DIR/classes" Neo4jRunner \
    "$dir/data" "$port" >"$dir/runner.out" 2>"$dir/neo4j.log" &
  echo $! >"$PID_FILE"
  local status=0
  POLL_S=0.2 wait_ready "$START_TIMEOUT" runner_ready "$dir" || status=$?
  if ((status == 1)); then
    tail -20 "$dir/neo4j.log" >&2 || true
    die "its log: $dir/neo4j.log"
  elif ((status != 0)); then
    cmd_stop --fast
    exit 1
  fi
  local url="bolt://127.0.0.1:$port" debug
  echo "$url" >"$URL_FILE"
  # the server's own log (the runner's stderr is its own errors only)
  debug=$(find "$dir/data" -path '*/logs/debug.log' -print -quit 2>/dev/null || true)
  echo "${debug:-$dir/neo4j.log}" >"$LOG_FILE"
  log "ready after $((SECONDS - t0))s (log: ${debug:-$dir/neo4j.log})"
  echo "HERMES_NEO4J_URL=$url"
}

keep_logs() { # the logs stay where they were, the store files go
  local dir
  dir=$(data_dir) || return 0
  find "$dir" -type f ! -name '*.log' ! -name runner.out -delete
  find "$dir" -mindepth 1 -type d -empty -delete
  log "logs kept: $dir"
}

cmd_stop() { # [--fast] [--keep-logs]
  if has_flag --fast "$@"; then
    stop_service 0 || true # its data is thrown away: SIGKILL at once
  else
    stop_service 15 || true # it closes its store files first: 5 to 12 s
  fi
  if has_flag --keep-logs "$@"; then keep_logs; fi
  clean_state "$URL_FILE" "$LOG_FILE"
}

cmd_status() { # the URL, as start printed it when it found the server running
  running_pid >/dev/null || return 3
  cat "$URL_FILE"
}

main "$@"
