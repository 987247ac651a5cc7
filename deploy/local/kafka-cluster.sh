#!/usr/bin/env bash
# A three-broker Apache Kafka cluster on the loopback interface (KRaft: each node a broker
# and one of three controller voters), from the jars kafka.sh fetches; for the tests of the
# bus under broker faults and for trying a replicated bus by hand. Every topic it makes by
# default has three replicas, writes need two in sync (min.insync.replicas=2), and a killed
# node leaves a quorum of two.
#
#   deploy/local/kafka-cluster.sh start DIR          start the nodes; prints KAFKA_CLUSTER_BOOTSTRAP=...
#   deploy/local/kafka-cluster.sh kill DIR NODE      SIGKILL node NODE (1, 2 or 3)
#   deploy/local/kafka-cluster.sh halt DIR NODE      SIGTERM it: a controlled shutdown, waited for
#   deploy/local/kafka-cluster.sh restart DIR NODE   start node NODE again on its data; wait until ready
#   deploy/local/kafka-cluster.sh stop DIR [--keep-logs]  stop every node, delete DIR's data and secure/
#   deploy/local/kafka-cluster.sh status DIR         each node: running or not; exit 3 if none runs
#
# DIR is the cluster's own folder (made if missing): node-N/ holds each node's config,
# data and logs, DIR/env the bootstrap lines. Secure listeners: when DIR/secure/ holds
# server.pem (the nodes' key and certificate), ca.pem and scram.users (lines "NAME
# PASSWORD"), each node also listens for SASL_SSL with SCRAM-SHA-512 (those users,
# KAFKA_CLUSTER_SECURE=...), and ACLs are enforced there: nothing is allowed unless an ACL
# allows it, except for the super user named in DIR/secure/super.user. The PLAINTEXT
# listeners stay open, unauthenticated and all-powerful, on loopback only: the tests'
# own control of the cluster; never a production layout.
#
# HERMES_KAFKA_CLUSTER_HEAP: each node's heap (default 384m); HERMES_KAFKA_START_TIMEOUT
# as for kafka.sh.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
LOG_NAME=kafka-cluster.sh SERVICE="Kafka node"
USAGE="start DIR | kill DIR NODE | halt DIR NODE | restart DIR NODE | stop DIR [--keep-logs] | status DIR"
# shellcheck source=deploy/local/lib.sh
source "$SCRIPT_DIR/lib.sh"

NODES=3
PID_PATTERN='kafka\.Kafka'
START_TIMEOUT=${HERMES_KAFKA_START_TIMEOUT:-120}
HEAP=${HERMES_KAFKA_CLUSTER_HEAP:-384m}
JAVA=${JAVA:-java}
check_uint HERMES_KAFKA_START_TIMEOUT "$START_TIMEOUT"
check_heap HERMES_KAFKA_CLUSTER_HEAP "$HEAP"

node_dir() { echo "$DIR/node-$1"; }

use_node() { # N: the lib's state files are this node's
  RUN_DIR=$(node_dir "$1")
  run_files kafka
}

lib_dir() { # the jars, fetched by kafka.sh once
  local line
  line=$(bash "$SCRIPT_DIR/kafka.sh" fetch) || die "cannot fetch the Kafka jars (kafka.sh fetch)"
  echo "${line#KAFKA_LIB=}"
}

jvm_args() { # N: JVM, the java command line of node N up to its main class
  JVM=("$JAVA" "-Xmx$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$(node_dir "$1")/log4j2.properties" -cp "$LIB/*")
}

secure() { # DIR/secure holds what a secure listener needs (super.user: one name)
  local f
  for f in server.pem ca.pem scram.users super.user; do [[ -s $DIR/secure/$f ]] || return 1; done
}

write_config() { # N: server.properties and log4j2.properties of node N, from DIR/ports
  local n=$1 dir voters port cport sport listeners advertised map
  dir=$(node_dir "$n")
  mkdir -p "$dir/data" "$dir/logs"
  voters=""
  for ((i = 1; i <= NODES; i++)); do
    voters+="${voters:+,}$i@127.0.0.1:$(port_of controller "$i")"
  done
  port=$(port_of plain "$n") cport=$(port_of controller "$n")
  listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
  advertised="PLAINTEXT://127.0.0.1:$port"
  map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if secure; then
    sport=$(port_of secure "$n")
    listeners+=",SASL_SSL://127.0.0.1:$sport"
    advertised+=",SASL_SSL://127.0.0.1:$sport"
    map+=",SASL_SSL:SASL_SSL"
  fi
  cat >"$dir/server.properties" <<EOF
# Written by deploy/local/kafka-cluster.sh: node $n of $NODES, KRaft, loopback only.
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$map
log.dirs=$dir/data
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
auto.create.topics.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
# a node back from a kill takes its partitions' leadership back soon
leader.imbalance.check.interval.seconds=10
EOF
  if secure; then
    cat >>"$dir/server.properties" <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$DIR/secure/server.pem
ssl.truststore.type=PEM
ssl.truststore.location=$DIR/secure/ca.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:ANONYMOUS;User:$(cat "$DIR/secure/super.user")
EOF
  fi
  kafka_log4j "$dir" "hermesbus-kafka-node-$n"
  cat >>"$dir/log4j2.properties" <<EOF
# the ACLs' refusals, for the secure tests' logs
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = INFO
EOF
}

port_of() { # KIND N: the port of node N's listener KIND (plain, controller, secure)
  sed -n "s/^$1-$2=//p" "$DIR/ports"
}

format() { # N
  local dir scram=()
  dir=$(node_dir "$1")
  if secure; then
    local name password
    while read -r name password || [[ -n $name ]]; do # a last line without its newline too
      [[ -n $name ]] || continue
      scram+=(--add-scram "SCRAM-SHA-512=[name=$name,password=$password]")
    done <"$DIR/secure/scram.users"
  fi
  jvm_args "$1"
  # the SCRAM passwords are on this one command line while it runs (StorageTool takes
  # them no other way): a test cluster's, on a machine of its own user
  if ! "${JVM[@]}" kafka.tools.StorageTool format \
      "--cluster-id=$(cat "$DIR/cluster.id")" -c "$dir/server.properties" ${scram[@]+"${scram[@]}"} \
      >"$dir/logs/format.out" 2>&1; then
    cat "$dir/logs/format.out" >&2
    die "node $1: storage format failed"
  fi
}

launch() { # N: start node N in the background (its data formatted)
  local n=$1 dir
  dir=$(node_dir "$n")
  use_node "$n"
  rm -f -- "$PID_FILE" # a killed node's: the new one writes its own
  jvm_args "$n"
  setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' kafka-launch "$PID_FILE" \
    "${JVM[@]}" kafka.Kafka "$dir/server.properties" \
    >>"$dir/logs/stdout.log" 2>&1 </dev/null &
}

ready() { # N [BROKERS]: node N logged its start and lists itself (and BROKERS brokers)
  local dir
  dir=$(node_dir "$1")
  grep -q 'Kafka Server started' "$dir/logs/server.log" 2>/dev/null \
    && probe_kafka "$(port_of plain "$1")" "${2:-1}"
}

wait_node() { # N BROKERS
  use_node "$1"
  wait_ready "$START_TIMEOUT" ready "$1" "$2" || {
    tail -n 30 "$(node_dir "$1")/logs/server.log" >&2 2>/dev/null || true
    die "node $1 did not start (logs: $(node_dir "$1")/logs)"
  }
}

bootstrap() { # KIND
  local line="" n
  for ((n = 1; n <= NODES; n++)); do line+="${line:+,}127.0.0.1:$(port_of "$1" "$n")"; done
  echo "$line"
}

cmd_start() {
  command -v "$JAVA" >/dev/null || die "java not found (Kafka needs Java 17+)"
  LIB=$(lib_dir)
  mkdir -p "$DIR"
  local n running=0
  for ((n = 1; n <= NODES; n++)); do
    use_node "$n"
    if running_pid >/dev/null; then running=$((running + 1)); fi
  done
  if ((running == NODES)); then
    log "already running, reusing it"
    cat "$DIR/env"
    return 0
  fi
  ((running == 0)) || die "only $running of $NODES nodes run in $DIR: '$0 stop $DIR' first"
  rm -rf -- "$DIR"/node-* "$DIR/ports" "$DIR/env"
  python3 -c 'import base64, os
while True:
    t = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not t.startswith("-"):
        print(t)
        break' >"$DIR/cluster.id"
  local taken=() port kind
  : >"$DIR/ports"
  for ((n = 1; n <= NODES; n++)); do
    for kind in plain controller secure; do
      port=$(free_port ${taken[@]+"${taken[@]}"})
      taken+=("$port")
      echo "$kind-$n=$port" >>"$DIR/ports"
    done
  done
  for ((n = 1; n <= NODES; n++)); do write_config "$n"; done
  log "formatting $NODES nodes in $DIR"
  for ((n = 1; n <= NODES; n++)); do format "$n" & done
  wait
  for ((n = 1; n <= NODES; n++)); do
    [[ -f $(node_dir "$n")/data/meta.properties ]] || die "node $n: storage was not formatted"
  done
  log "starting $NODES nodes"
  for ((n = 1; n <= NODES; n++)); do launch "$n"; done
  for ((n = 1; n <= NODES; n++)); do wait_node "$n" "$NODES"; done
  {
    echo "KAFKA_CLUSTER_BOOTSTRAP=$(bootstrap plain)"
    if secure; then echo "KAFKA_CLUSTER_SECURE=$(bootstrap secure)"; fi
  } >"$DIR/env"
  log "ready after ${SECONDS}s"
  cat "$DIR/env"
}

node_arg() { # VALUE
  [[ $1 =~ ^[1-9]$ ]] && (($1 <= NODES)) || usage_error "NODE must be 1 to $NODES, got '$1'"
}

cmd_kill() { # NODE
  node_arg "$1"
  use_node "$1"
  local pid
  pid=$(running_pid) || die "node $1 does not run"
  SERVICE="Kafka node $1"
  stop_pid "$pid" 0
  log "node $1 (pid $pid) killed"
}

cmd_halt() { # NODE: SIGTERM, a controlled shutdown (its leaderships move first), waited for
  node_arg "$1"
  use_node "$1"
  local pid
  pid=$(running_pid) || die "node $1 does not run"
  SERVICE="Kafka node $1"
  stop_pid "$pid" 60
  log "node $1 (pid $pid) stopped"
}

cmd_restart() { # NODE
  node_arg "$1"
  use_node "$1"
  ! running_pid >/dev/null || die "node $1 runs already"
  LIB=$(lib_dir)
  : >"$(node_dir "$1")/logs/server.log" # its next start line is the one waited for
  launch "$1"
  wait_node "$1" 1
  log "node $1 ready again after ${SECONDS}s"
}

cmd_stop() { # [--keep-logs]: SIGTERM to every node at once (one alone would wait for a
  # quorum the others no longer make), SIGKILL after 30 s
  local n pid
  for ((n = 1; n <= NODES; n++)); do
    use_node "$n"
    if pid=$(running_pid); then
      SERVICE="Kafka node $n" stop_pid "$pid" 30 &
    fi
  done
  wait || true
  for ((n = 1; n <= NODES; n++)); do
    use_node "$n"
    rm -f -- "$PID_FILE"
    if has_flag --keep-logs "$@"; then
      rm -rf -- "$(node_dir "$n")/data"
    else
      rm -rf -- "$(node_dir "$n")"
    fi
  done
  rm -f -- "$DIR/env" "$DIR/ports"
  has_flag --keep-logs "$@" || rm -rf -- "$DIR/secure" # its key and passwords go with it
}

cmd_status() {
  local n up=0
  for ((n = 1; n <= NODES; n++)); do
    use_node "$n"
    if pid=$(running_pid); then
      echo "node $n: running pid=$pid"
      up=$((up + 1))
    else
      echo "node $n: not running"
    fi
  done
  ((up > 0)) || return 3
}

cmd=${1:-}
[[ -n $cmd ]] || usage_error "no command given"
[[ $(type -t "cmd_$cmd") == function ]] || unknown_command "$cmd"
shift
[[ $# -ge 1 && -n $1 ]] || usage_error "$cmd needs the cluster's folder DIR"
DIR=$1
shift
case $cmd in
  kill | halt | restart) [[ $# -eq 1 ]] || usage_error "$cmd takes DIR NODE" ;;
  stop) only_flags --keep-logs "$@" ;;
  *) only_flags "" "$@" ;;
esac
"cmd_$cmd" "$@"
