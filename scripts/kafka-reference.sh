#!/usr/bin/env bash
# The reference cluster: Apache Kafka 4.4.0 (pinned), three KRaft nodes on
# 127.0.0.1, each a combined broker and controller, over a data folder the
# caller names. The conformance suite runs its client × scenario matrix on
# it (scripts/conformance.sh --reference; docs/conformance.md).
#
# Usage: scripts/kafka-reference.sh COMMAND [DIR [N]]
#   fetch        copy the broker's and the tools' jars with their dependencies
#                into .cache/kafka-4.4.0/jars (Maven, from
#                scripts/kafka-reference/pom.xml; once: a second fetch finds them)
#   setup DIR    write DIR/node-<n>/server.properties (n = 0, 1, 2) and format
#                each node's storage (fetches first when needed)
#   start DIR    setup when DIR has no setup yet, then start the three nodes in
#                the background and wait until each answers on its port
#   stop DIR     SIGTERM every node (controlled shutdown), SIGKILL past 60 s
#   status DIR   each node: running or not, pid, client address
#   node DIR N   run node N in the foreground (exec java), for a harness that
#                signals the process itself (internal/kafkaref)
#   classpath    print the classpath
# Environment (read by setup):
#   KAFKA_REF_PORTS           client ports of nodes 0,1,2 (default 19092,19093,19094)
#   KAFKA_REF_INTERNAL_PORTS  inter-broker ports (default 19192,19193,19194)
#   KAFKA_REF_CONTROLLER_PORTS controller ports (default 19292,19293,19294)
#   KAFKA_REF_ADVERTISE       the client addresses the nodes advertise, host:port
#                             comma separated (default 127.0.0.1:<client port>):
#                             the conformance suite's wire taps
#   KAFKA_REF_HEAP            the JVM heap of each node (default 512m)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=4.4.0
cache="$root/.cache/kafka-$version"
jars="$cache/jars"

die() { echo "kafka-reference: $*" >&2; exit 1; }

fetch() {
  if [ -f "$jars/kafka_2.13-$version.jar" ] && [ -f "$jars/kafka-tools-$version.jar" ] &&
    ls "$jars"/log4j-slf4j-impl-*.jar >/dev/null 2>&1; then
    return
  fi
  command -v mvn >/dev/null || die "mvn not found (apt-get install -y maven)"
  mkdir -p "$jars"
  echo "kafka-reference: fetching Apache Kafka $version with Maven into $jars" >&2
  mvn -q -B -f "$root/scripts/kafka-reference/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$jars" >&2
}

java_cmd() {
  command -v java >/dev/null || die "java not found (a JDK 17 or later)"
  echo java
}

# ports NAME DEFAULT: the three ports of $NAME, or DEFAULT.
ports() {
  local v="${!1:-$2}"
  IFS=, read -r -a arr <<<"$v"
  [ "${#arr[@]}" = 3 ] || die "$1 must list 3 ports, got '$v'"
  echo "${arr[@]}"
}

setup() {
  local dir="$1"
  fetch
  mkdir -p "$dir"
  read -r -a cp <<<"$(ports KAFKA_REF_PORTS 19092,19093,19094)"
  read -r -a ip <<<"$(ports KAFKA_REF_INTERNAL_PORTS 19192,19193,19194)"
  read -r -a ct <<<"$(ports KAFKA_REF_CONTROLLER_PORTS 19292,19293,19294)"
  local adv=()
  if [ -n "${KAFKA_REF_ADVERTISE:-}" ]; then
    IFS=, read -r -a adv <<<"$KAFKA_REF_ADVERTISE"
    [ "${#adv[@]}" = 3 ] || die "KAFKA_REF_ADVERTISE must list 3 addresses"
  else
    adv=("127.0.0.1:${cp[0]}" "127.0.0.1:${cp[1]}" "127.0.0.1:${cp[2]}")
  fi
  local voters="0@127.0.0.1:${ct[0]},1@127.0.0.1:${ct[1]},2@127.0.0.1:${ct[2]}"
  local cluster_id
  cluster_id="$(java -cp "$jars/*" kafka.tools.StorageTool random-uuid)"
  for n in 0 1 2; do
    local nd="$dir/node-$n"
    mkdir -p "$nd/data"
    cat >"$nd/server.properties" <<EOF
# Written by scripts/kafka-reference.sh setup. Settings beyond the node's
# identity and ports make the comparison with kaas fair (docs/conformance.md).
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=CLIENT://127.0.0.1:${cp[$n]},INTERNAL://127.0.0.1:${ip[$n]},CONTROLLER://127.0.0.1:${ct[$n]}
advertised.listeners=CLIENT://${adv[$n]},INTERNAL://127.0.0.1:${ip[$n]}
listener.security.protocol.map=CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
controller.listener.names=CONTROLLER
log.dirs=$nd/data
# kaas keeps one copy on a shared volume that survives any broker: here every
# partition and the group and transaction state have a replica on each node,
# and an acknowledged write is on two of them.
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.min.isr=2
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
offsets.topic.num.partitions=10
# kaas: the same 3 s initial rebalance delay (Kafka's default, set anyway),
# --dead-after 3s and --report-interval 1s for a broker's liveness.
group.initial.rebalance.delay.ms=3000
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=1000
# A small machine (2 cores).
num.network.threads=2
num.io.threads=4
num.replica.fetchers=1
log.cleaner.threads=1
EOF
    cat >"$nd/log4j2.properties" <<EOF
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=INFO
logger.state.name=state.change.logger
logger.state.level=WARN
EOF
    java -cp "$jars/*" kafka.tools.StorageTool format -t "$cluster_id" -c "$nd/server.properties" \
      --ignore-formatted >"$nd/format.log" 2>&1 || { cat "$nd/format.log" >&2; die "format node $n failed"; }
  done
  echo "$cluster_id" >"$dir/cluster-id"
}

# node DIR N: exec node N's JVM (the caller owns the process).
node() {
  local dir="$1" n="$2"
  local nd="$dir/node-$n"
  [ -f "$nd/server.properties" ] || die "no $nd/server.properties: run setup first"
  local heap="${KAFKA_REF_HEAP:-512m}"
  exec "$(java_cmd)" -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:TieredStopAtLevel=1 -Xss512k \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$nd/log4j2.properties" \
    -cp "$jars/*" kafka.Kafka "$nd/server.properties"
}

client_port() { sed -n 's/^listeners=CLIENT:\/\/127\.0\.0\.1:\([0-9]*\),.*/\1/p' "$1/server.properties"; }

running() { [ -f "$1/pid" ] && kill -0 "$(cat "$1/pid")" 2>/dev/null; }

start() {
  local dir="$1"
  [ -f "$dir/cluster-id" ] || setup "$dir"
  for n in 0 1 2; do
    local nd="$dir/node-$n"
    if running "$nd"; then continue; fi
    setsid "$0" node "$dir" "$n" >>"$nd/server.log" 2>&1 </dev/null &
    echo $! >"$nd/pid"
  done
  for n in 0 1 2; do
    local nd="$dir/node-$n" port
    port="$(client_port "$nd")"
    for _ in $(seq 1 120); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
      running "$nd" || { tail -20 "$nd/server.log" >&2; die "node $n exited"; }
      sleep 0.5
    done
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || die "node $n not listening on $port after 60 s"
    echo "node $n: 127.0.0.1:$port (pid $(cat "$nd/pid"))"
  done
}

stop() {
  local dir="$1"
  for n in 0 1 2; do
    local nd="$dir/node-$n"
    running "$nd" && kill -TERM "$(cat "$nd/pid")"
  done
  for n in 0 1 2; do
    local nd="$dir/node-$n"
    for _ in $(seq 1 120); do running "$nd" || break; sleep 0.5; done
    if running "$nd"; then kill -KILL "$(cat "$nd/pid")"; echo "node $n: killed after 60 s"; fi
    rm -f "$nd/pid"
  done
}

status() {
  local dir="$1"
  for n in 0 1 2; do
    local nd="$dir/node-$n"
    [ -f "$nd/server.properties" ] || { echo "node $n: not set up"; continue; }
    if running "$nd"; then
      echo "node $n: running, pid $(cat "$nd/pid"), 127.0.0.1:$(client_port "$nd")"
    else
      echo "node $n: stopped, 127.0.0.1:$(client_port "$nd")"
    fi
  done
}

cmd="${1:-}"
case "$cmd" in
fetch) fetch ;;
classpath) fetch; echo "$jars/*" ;;
setup | start | stop | status)
  [ -n "${2:-}" ] || die "usage: $0 $cmd DIR"
  mkdir -p "$2"
  "$cmd" "$(cd "$2" && pwd)"
  ;;
node)
  [ -n "${2:-}" ] && [ -n "${3:-}" ] || die "usage: $0 node DIR N"
  node "$(cd "$2" && pwd)" "$3"
  ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
