#!/usr/bin/env bash
# Sourced by test.sh: after a failed run, say where the logs of every service that ran
# are (the run folder is kept then). Reads RUN_DIR and HERMES_TEST_*_LOG; a service whose
# log is missing or empty did not run and is not listed.
#
#   evidence EXIT_STATUS

evidence() { # exit status
  local what path found=""
  for what in "embedded broker" "Apache Kafka" "schema registry" "Elasticsearch" "Redis" "Neo4j"; do
    case $what in
      "embedded broker") path=$HERMES_TEST_EMBEDDED_LOG ;;
      "Apache Kafka") path=$HERMES_TEST_KAFKA_LOG ;;
      "Elasticsearch") path=$HERMES_TEST_ELASTICSEARCH_LOG ;;
      "Redis") path=$HERMES_TEST_REDIS_LOG ;;
      "Neo4j") path=$HERMES_TEST_NEO4J_LOG ;;
      *) path=$HERMES_TEST_SCHEMA_REGISTRY_LOG ;;
    esac
    if [[ -s $path ]]; then
      [[ -n $found ]] || printf '\n== failed (exit %s): the logs of the services are kept in %s\n' "$1" "$RUN_DIR"
      found=1
      printf '%-16s log: %s\n' "$what" "$path"
    fi
  done
  [[ -n $found ]] || rm -rf "$RUN_DIR" # it failed before any service started: nothing to keep
}
