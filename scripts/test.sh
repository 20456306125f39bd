#!/usr/bin/env bash
# The whole test suite: installs what it needs when missing, checks format and
# vet, then runs every test with the race detector. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '== %s\n' "$*"; }

# Debian packages for the real-client tests (kcat, kafka-python, confluent-kafka,
# node for kafkajs).
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
/usr/bin/python3 -c 'import kafka' >/dev/null 2>&1 || need+=(python3-kafka)
/usr/bin/python3 -c 'import confluent_kafka' >/dev/null 2>&1 || need+=(python3-confluent-kafka)
# python3-venv: the suite makes a virtual environment with a recent
# confluent-kafka (group.protocol=consumer, KIP-848) itself.
/usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
# node and npm run the kafkajs client (the suite installs kafkajs itself).
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# A JDK and Maven build and run the Java client drivers (internal/conformance/java)
# and Apache Kafka's own tools (scripts/kafka-reference.sh fetch).
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

log "go modules"
go mod download

# Apache Kafka's jars (Maven, once): its command-line tools run against kaas in
# internal/kafkatools.
log "Apache Kafka's tools"
scripts/kafka-reference.sh fetch

log "gofmt"
unformatted=$(gofmt -l ./cmd ./internal)
if [ -n "$unformatted" ]; then
  echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi

log "go vet"
go vet ./...

log "go test -race"
go test -race -count=1 -timeout 20m ./... 2>&1 | tee /tmp/kaas-test.log

# Whole requests of every served API, from kmsg's shapes, mutated: no
# input panics a broker or goes unanswered (broker.FuzzDispatch; bounded).
log "fuzzing requests of every served API (60 s)"
if ! go test -run '^$' -fuzz '^FuzzDispatch$' -fuzztime 60s -parallel 2 ./internal/broker >/tmp/kaas-fuzz.log 2>&1; then
  cat /tmp/kaas-fuzz.log; exit 1
fi
tail -2 /tmp/kaas-fuzz.log | tee -a /tmp/kaas-test.log

# The group APIs answered as Apache Kafka answers: the same raw requests to
# kaas and to the reference cluster (three KRaft JVMs), answers compared
# (docs/conformance.md, "Answers side by side"; about 3 minutes, alone so
# that the JVMs do not slow the tests above).
log "group answers side by side with Apache Kafka"
KAAS_CONFORMANCE_PROTOCOL=1 go test -count=1 -timeout 15m -run 'TestGroupAnswersMatchKafka$' ./internal/conformance 2>&1 | tee -a /tmp/kaas-test.log
