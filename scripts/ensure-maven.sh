#!/usr/bin/env bash
# Maven fetches the JVM jars the tests need from Maven Central (the Apache Kafka broker jars of
# rebalancer.testing.KafkaCluster: scripts/fetch-kafka.sh). Use the machine's mvn, else install
# Debian's maven with apt-get.
set -euo pipefail
if command -v mvn >/dev/null; then exit 0; fi
if ! command -v apt-get >/dev/null; then
  echo "make: the tests need Maven to fetch JVM jars and 'mvn' is missing; install maven and retry" >&2
  exit 1
fi
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "make: 'mvn' not found; installing maven with apt-get" >&2
$sudo apt-get update -qq
# No recommends: the JDK is already there (scripts/ensure-java.sh runs first).
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven >/dev/null
command -v mvn >/dev/null || { echo "make: apt-get installed maven but 'mvn' is still missing" >&2; exit 1; }
