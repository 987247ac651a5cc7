#!/usr/bin/env bash
# Sourced by test.sh: after a failed run, say where the logs of every service that ran
# are (the run folder is kept then), for each set of services (one per worker: its
# folder's env file names the logs). A service whose log is missing or empty did not run
# and is not listed.
#
#   evidence EXIT_STATUS SET_FOLDER...

evidence() { # exit status, set folders
  local status=$1 set what variable path found=""
  shift
  for set in "$@"; do
    [[ -f $set/env ]] || continue
    for what in "embedded broker" "Apache Kafka" "schema registry" "Elasticsearch" "Redis" "Neo4j"; do
      case $what in
        "embedded broker") variable=HERMES_TEST_EMBEDDED_LOG ;;
        "Apache Kafka") variable=HERMES_TEST_KAFKA_LOG ;;
        "Elasticsearch") variable=HERMES_TEST_ELASTICSEARCH_LOG ;;
        "Redis") variable=HERMES_TEST_REDIS_LOG ;;
        "Neo4j") variable=HERMES_TEST_NEO4J_LOG ;;
        *) variable=HERMES_TEST_SCHEMA_REGISTRY_LOG ;;
      esac
      # the set's last word on it (its env file may say it twice: before and after start)
      path=$( (source "$set/env" && printf %s "${!variable:-}"))
      if [[ -s $path ]]; then
        [[ -n $found ]] || printf '\n== failed (exit %s): the logs of the services are kept in %s\n' "$status" "$RUN_DIR"
        found=1
        printf '%-5s %-16s log: %s\n' "${set##*/}" "$what" "$path"
      fi
    done
  done
  [[ -n $found ]] || rm -rf "$RUN_DIR" # it failed before any service started: nothing to keep
}
