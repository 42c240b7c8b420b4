#!/usr/bin/env bash
# Spark needs a JDK 17+. Use the machine's java if it is new enough, else install one with apt-get.
set -euo pipefail
java_major() {
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1") ? v[2] : v[1]; exit}'
}
if command -v java >/dev/null && [ "$(java_major)" -ge 17 ] 2>/dev/null; then exit 0; fi
if ! command -v apt-get >/dev/null; then
  echo "make: Spark needs Java 17 or newer and 'java' is missing; install a JDK 17 (e.g. openjdk-17-jre-headless)" >&2
  exit 1
fi
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "make: 'java' 17+ not found; installing a headless JRE with apt-get" >&2
$sudo apt-get update -qq
for pkg in openjdk-17-jre-headless openjdk-21-jre-headless default-jre-headless; do
  if $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null 2>&1; then
    if [ "$(java_major)" -ge 17 ] 2>/dev/null; then exit 0; fi
  fi
done
echo "make: could not install a Java 17+ runtime with apt-get; install openjdk-17-jre-headless and retry" >&2
exit 1
