#!/usr/bin/env bash
# The Pulsar conformance harness (conformance/pulsar) is compiled by Maven, which needs javac: a JDK,
# not just the JRE scripts/ensure-java.sh may have installed. Install Debian's headless JDK 17 if missing.
set -euo pipefail
if command -v javac >/dev/null; then exit 0; fi
if ! command -v apt-get >/dev/null; then
  echo "make: the Pulsar conformance harness needs a JDK 17 (javac) and 'javac' is missing; install openjdk-17-jdk-headless" >&2
  exit 1
fi
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "make: 'javac' not found; installing a headless JDK with apt-get" >&2
$sudo apt-get update -qq
for pkg in openjdk-17-jdk-headless openjdk-21-jdk-headless default-jdk-headless; do
  if $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1; then
    command -v javac >/dev/null && exit 0
  fi
done
echo "make: could not install a JDK with apt-get; install openjdk-17-jdk-headless and retry" >&2
exit 1
