#!/usr/bin/env bash
# Copy the Apache Pulsar jars that jvm/pulsar/pom.xml pins (the broker, BookKeeper's bookie, Pulsar's
# patched ZooKeeper) from Maven Central to a per-user cache, where rebalancer.testing.PulsarCluster
# finds them: ${XDG_CACHE_HOME:-~/.cache}/rebalancer/pulsar-<version>/lib.
# Idempotent: a cache filled from the same pom is left alone, so a second run needs no network
# (and Maven's own ~/.m2 keeps a re-fetch offline too).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pom="$root/jvm/pulsar/pom.xml"
version="$(sed -n 's:.*<pulsar\.version>\(.*\)</pulsar\.version>.*:\1:p' "$pom" | head -n 1)"
[ -n "$version" ] || { echo "make: no <pulsar.version> in $pom" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rebalancer"
dest="$cache/pulsar-$version"
stamp="$(sha256sum "$pom" | cut -d' ' -f1)"
if [ -f "$dest/.complete" ] && [ "$(cat "$dest/.complete")" = "$stamp" ]; then exit 0; fi
command -v mvn >/dev/null || { echo "make: 'mvn' is missing; run scripts/ensure-maven.sh" >&2; exit 1; }
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.pulsar-$version.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "make: fetching Apache Pulsar $version from Maven Central into $dest" >&2
if ! mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies@lib \
    -Dpulsar.out="$tmp" >"$tmp/mvn.log" 2>&1; then
  cat "$tmp/mvn.log" >&2
  echo "make: Maven could not fetch Apache Pulsar $version (is Maven Central reachable?)" >&2
  exit 1
fi
rm -f "$tmp/mvn.log"
ls "$tmp/lib/pulsar-broker-$version.jar" >/dev/null
echo "$stamp" > "$tmp/.complete"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
