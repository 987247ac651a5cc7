#!/usr/bin/env bash
# Sourced by the service scripts (kafka.sh, schema-registry.sh, elasticsearch.sh, redis.sh,
# neo4j.sh): what they share. Logging and usage errors, checks of arguments and settings,
# free ports, pid files, start-and-wait, stop (SIGTERM, then SIGKILL), status, their data
# folder and the fetch cache's lock. Each script keeps only what is its own: how its server
# is fetched, configured, launched and asked whether it is ready.
#
# The script sets, before it calls these (bash 3.2, as on macOS, under set -euo pipefail):
#   LOG_NAME     prefix of its stderr lines (kafka.sh)
#   SERVICE      what it runs, in messages (Kafka)
#   USAGE        its commands, for usage errors (fetch | start [PORT] | stop | status)
#   STOP_FLAGS   the flags its stop takes (--keep-logs)
#   RUN_DIR      its state folder; `run_files NAME` names the files in it (below)
#   PID_PATTERN  an extended regex the server's command line matches (a recycled pid does not)
# and defines cmd_start, cmd_stop, cmd_status (cmd_fetch if it has one), which `main "$@"`
# runs once it has checked the command line.

run_files() { # NAME: the state files in RUN_DIR, PID_FILE (NAME.pid), DIR_FILE (NAME.dir, the
  # data folder's path) and URL_FILE (NAME.url); MARKER marks a data folder as made by us
  PID_FILE="$RUN_DIR/$1.pid"
  DIR_FILE="$RUN_DIR/$1.dir"
  URL_FILE="$RUN_DIR/$1.url"
  MARKER=".hermesbus-$1"
}

main() { # COMMAND [ARGS...]: check the command line, then run the script's cmd_COMMAND
  local cmd=${1:-}
  [[ $# -gt 0 ]] && shift
  [[ -n $cmd && $(type -t "cmd_$cmd") == function ]] || unknown_command "$cmd"
  case $cmd in
    start) (($# <= 1)) || usage_error "start takes one PORT at most" ;;
    stop) only_flags "${STOP_FLAGS:-}" "$@" ;;
    *) only_flags "" "$@" ;;
  esac
  "cmd_$cmd" "$@"
}

# ---------------------------------------------------------------- messages

log() { printf '%s: %s\n' "$LOG_NAME" "$*" >&2; }
die() { log "$*"; exit 1; }

usage_error() { # MESSAGE: one line naming what is wrong, and the usage; exit 2
  log "$1; usage: $0 $USAGE"
  exit 2
}

unknown_command() { # COMMAND
  if [[ -z $1 ]]; then usage_error "no command given"; fi
  usage_error "unknown command '$1'"
}

only_flags() { # ALLOWED GIVEN...: a usage error for a GIVEN not in ALLOWED (space-separated)
  local allowed=" $1 " flag
  shift
  for flag in "$@"; do
    [[ $allowed == *" $flag "* ]] || usage_error "unexpected argument '$flag'"
  done
}

has_flag() { # FLAG GIVEN...: whether FLAG is among GIVEN
  local flag=$1 given
  shift
  for given in "$@"; do
    [[ $given == "$flag" ]] && return 0
  done
  return 1
}

# ---------------------------------------------------------------- checks

check_uint() { # NAME VALUE: a setting that must be a whole number
  [[ $2 =~ ^[0-9]+$ ]] || die "$1 must be a number, got '$2'"
}

check_heap() { # NAME VALUE: a JVM heap size (-Xmx)
  [[ $2 =~ ^[0-9]+[kKmMgG]?$ ]] || die "$1 must look like 512m or 1g, got '$2'"
}

check_port() { # NAME VALUE: a TCP port, 1 to 65535 (a usage error otherwise)
  if [[ ! $2 =~ ^[0-9]{1,5}$ ]] || ((10#$2 < 1 || 10#$2 > 65535)); then
    usage_error "$1 must be a port number from 1 to 65535, got '$2'"
  fi
}

# ---------------------------------------------------------------- ports

free_port() { # [PORT...]: a port on 127.0.0.1 that nothing listens on now, none of the PORTs
  # Two things made a port handed out here taken by the time its server bound it (CI:
  # two Elasticsearch nodes of side-by-side test sets, one's HTTP port the other's
  # transport port): a port asked of the kernel (bind to 0) comes from the ephemeral
  # range, which the kernel also hands to the next caller asking, and to every outgoing
  # connection meanwhile. So a port is drawn below that range, and claimed under a lock
  # in a folder every caller of this user shares (HERMES_PORT_CLAIMS) until its server
  # has long bound it: no two calls return the same port within CLAIM_S.
  python3 - "$@" <<'PY'
import fcntl, os, random, socket, stat, sys, time

CLAIM_S = 1800  # a claim outlives the slowest start (a server listening is seen by bind)
avoid = set(sys.argv[1:])
claims = os.environ.get("HERMES_PORT_CLAIMS") or f"/tmp/hermesbus-ports-{os.getuid()}"
os.makedirs(claims, mode=0o700, exist_ok=True)
found = os.lstat(claims)  # in /tmp: another user may have made it first
if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
    sys.exit(f"free_port: {claims} must be a folder of this user's, mode 0700 (remove it)")
NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def ephemeral():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:  # Linux
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 49152, 65535  # macOS and the IANA default


low, high = ephemeral()
# Below the ephemeral range (Linux: 20000-32767), else above it; else anywhere.
span = (20000, low - 1) if low > 21000 else (high + 1, 65535) if high < 64000 else (1024, 65535)


def bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


lock = os.open(os.path.join(claims, ".lock"), os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)
with os.fdopen(lock, "r+") as held:
    fcntl.flock(held, fcntl.LOCK_EX)
    now = time.time()
    for name in os.listdir(claims):  # claims of starts long over
        path = os.path.join(claims, name)
        try:
            if name.isdigit() and now - os.stat(path).st_mtime > CLAIM_S:
                os.unlink(path)
        except FileNotFoundError:
            pass
    for _ in range(10000):
        port = random.randint(*span)
        claim = os.path.join(claims, str(port))
        if str(port) in avoid or os.path.lexists(claim) or not bindable(port):
            continue
        made = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
        with os.fdopen(made, "w") as f:
            f.write(f"{os.getppid()}\n")
        print(port)
        sys.exit(0)
sys.exit(f"no free port in {span[0]}-{span[1]} on 127.0.0.1")
PY
}

again_if_port_taken() { # LOG COMMAND...: COMMAND, its stderr kept in LOG, then shown
  # Once more if it failed because a port it was handed got taken before its server bound
  # it: free_port claims ports against our own scripts, not every program on the machine.
  local log=$1 rc=0
  shift
  "$@" 2>"$log" || rc=$?
  cat -- "$log" >&2
  ((rc != 0)) || return 0
  grep -qE 'already in use|already bound|BindException|[Ff]ailed to bind' "$log" || return "$rc"
  cp -- "$log" "$log.first"
  printf '%s: a port was taken meanwhile (see %s); starting on other ports\n' "${LOG_NAME:-$0}" "$log.first" >&2
  rc=0
  "$@" 2>"$log" || rc=$?
  cat -- "$log" >&2
  return "$rc"
}

# ---------------------------------------------------------------- processes and pid files

pid_gone() { # PID: no such process, or one that has exited and waits for its parent (a zombie)
  kill -0 "$1" 2>/dev/null || return 0
  local state=""
  if [[ -r /proc/$1/stat ]]; then
    state=$(cat "/proc/$1/stat" 2>/dev/null || true)
    state=${state##*") "} # after "PID (COMMAND) ": the state letter
  else
    state=$(ps -o stat= -p "$1" 2>/dev/null || true)
  fi
  [[ $state == Z* ]]
}

pid_cmdline() { # PID: its command line, the words joined by spaces
  if [[ -r /proc/$1/cmdline ]]; then
    tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null
  else
    ps -o args= -p "$1" 2>/dev/null
  fi
}

running_pid() { # prints the pid in PID_FILE when that process runs and matches PID_PATTERN
  local pid line
  pid=$(cat "$PID_FILE" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  ! pid_gone "$pid" || return 1
  line=$(pid_cmdline "$pid") || return 1
  [[ $line =~ $PID_PATTERN ]] || return 1
  echo "$pid"
}

stop_pid() { # PID GRACE: SIGTERM, SIGKILL (it and its children) after GRACE s; 0: SIGKILL at once
  local pid=$1 grace=$2 deadline
  if ((grace > 0)); then
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + grace))
    while ! pid_gone "$pid" && ((SECONDS <= deadline)); do sleep 0.1; done
    pid_gone "$pid" && return 0
    log "$SERVICE (pid $pid) did not stop within ${grace}s of SIGTERM: sending SIGKILL"
  fi
  pkill -KILL -P "$pid" 2>/dev/null || true # its children would outlive it
  kill -KILL "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 10))
  while ! pid_gone "$pid" && ((SECONDS <= deadline)); do sleep 0.1; done
  pid_gone "$pid" && return 0
  log "$SERVICE (pid $pid) is still there 10s after SIGKILL"
  return 1
}

stop_service() { # GRACE: stop the server in PID_FILE, if it runs (see stop_pid)
  local pid
  pid=$(running_pid) || return 0
  log "stopping $SERVICE (pid $pid)"
  stop_pid "$pid" "$1"
}

wait_ready() { # TIMEOUT CHECK...: poll CHECK until it succeeds; 1 (logged) when the process in
  # PID_FILE exits first, 2 (logged) when TIMEOUT seconds pass. POLL_S: seconds between polls.
  local timeout=$1 deadline pid
  shift
  deadline=$((SECONDS + timeout))
  while :; do
    pid=$(cat "$PID_FILE" 2>/dev/null || true)
    if [[ -n $pid ]] && pid_gone "$pid"; then
      log "$SERVICE exited during start-up"
      return 1
    fi
    if "$@"; then return 0; fi
    if ((SECONDS > deadline)); then
      log "$SERVICE was not ready within ${timeout}s"
      return 2
    fi
    sleep "${POLL_S:-0.25}"
  done
}

already_running() { # LINE: when the server runs, say so and print LINE (what start prints)
  local pid
  pid=$(running_pid) || return 1
  log "already running (pid $pid), reusing it"
  printf '%s\n' "$1"
}

report_status() { # LINE: "running pid=PID LINE" when the server runs, else "not running" and 3
  local pid
  if pid=$(running_pid); then
    echo "running pid=$pid $1"
    return 0
  fi
  echo "not running"
  return 3
}

# Ask a Kafka broker over the Kafka protocol: ApiVersions (v0), then Metadata (v4..v8,
# the non-flexible versions) and require that it lists itself, and at least BROKERS brokers
# (default 1: a cluster's node is ready when it sees the others). Exit 0 when it answers.
probe_kafka() { # PORT [BROKERS]
  python3 - "$1" "${2:-1}" <<'PY'
import socket, struct, sys

port, brokers = int(sys.argv[1]), int(sys.argv[2])

def call(sock, api_key, version, body, corr):
    client = b"hermesbus-probe"
    req = struct.pack(">hhih", api_key, version, corr, len(client)) + client + body
    sock.sendall(struct.pack(">i", len(req)) + req)
    n = struct.unpack(">i", recv(sock, 4))[0]
    resp = recv(sock, n)
    if struct.unpack(">i", resp[:4])[0] != corr:
        sys.exit(1)
    return resp[4:]

def recv(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            sys.exit(1)
        buf += chunk
    return buf

try:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.settimeout(3)
        r = call(s, 18, 0, b"", 1)  # ApiVersions v0
        err, count = struct.unpack(">hi", r[:6])
        if err != 0:
            sys.exit(1)
        ranges = {}
        for i in range(count):
            k, lo, hi = struct.unpack(">hhh", r[6 + 6 * i: 12 + 6 * i])
            ranges[k] = (lo, hi)
        lo, hi = ranges.get(3, (0, -1))
        v = max(lo, 4)
        if v > min(hi, 8):
            sys.exit(0)  # cannot speak a non-flexible Metadata; ApiVersions answered
        body = struct.pack(">i", -1) + b"\x00"  # all topics, no auto-create
        r = call(s, 3, v, body, 2)  # Metadata
        off = 4  # throttle_time_ms
        (nb,) = struct.unpack(">i", r[off:off + 4]); off += 4
        listed = False
        for _ in range(nb):
            off += 4  # node_id
            (hl,) = struct.unpack(">h", r[off:off + 2]); off += 2 + hl
            (p,) = struct.unpack(">i", r[off:off + 4]); off += 4
            (rl,) = struct.unpack(">h", r[off:off + 2]); off += 2 + max(rl, 0)
            listed = listed or p == port
        sys.exit(0 if listed and nb >= brokers else 1)
except (OSError, struct.error):
    sys.exit(1)
PY
}

kafka_log4j() { # DIR NAME: a Kafka node's log4j2 config in DIR: everything to DIR/logs/server.log
  # at WARN, the lifecycle lines ("Kafka Server started", shutdown) at INFO; no console
  cat >"$1/log4j2.properties" <<EOF
status = warn
name = $2
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $1/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
logger.controller.name = kafka.server.ControllerServer
logger.controller.level = INFO
EOF
}

# ---------------------------------------------------------------- the data folder

data_dir_new() { # PARENT PREFIX: make PARENT/PREFIX.XXXXXX, mark it, note it in DIR_FILE; print it
  local dir
  dir=$(mktemp -d "$1/$2.XXXXXX") || die "cannot make a folder in $1"
  : >"$dir/$MARKER"
  echo "$dir" >"$DIR_FILE"
  echo "$dir"
}

data_dir() { # print the folder noted in DIR_FILE if it is one we made (it carries MARKER)
  local dir
  dir=$(cat "$DIR_FILE" 2>/dev/null) || return 1
  [[ -n $dir && -f $dir/$MARKER ]] || return 1
  echo "$dir"
}

clean_state() { # [FILE...]: delete our data folder, the pid file, DIR_FILE and the FILEs
  local dir
  if dir=$(data_dir); then rm -rf -- "$dir"; fi
  rm -f -- "$PID_FILE" "$DIR_FILE" "$@"
}

# ---------------------------------------------------------------- the fetch cache

lock_cache() { # LOCK_FILE: hold it on fd 9 (concurrent fetches into one cache wait in turn)
  exec 9>"$1"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
}

unlock_cache() { exec 9>&-; }

mvn_quiet() { # ARGS...: mvn -q -B ARGS, its output on stderr (colour codes, blank lines stripped)
  # stdout is kept for the one line a script prints. Debian's Maven 3.8 prints bare colour
  # resets even in batch mode.
  mvn -q -B "$@" 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^[[:space:]]*$/d' >&2
}
