#!/usr/bin/env bash
# Copy Spark's Kafka connector (spark-sql-kafka-0-10) that jvm/spark-kafka/pom.xml pins, with its
# runtime dependencies, from Maven Central to a per-user cache, where benchmarks/kafka_source.py
# (`--against spark-kafka`) finds them: ${XDG_CACHE_HOME:-~/.cache}/rebalancer/spark-kafka-<version>/jars.
# Jars the pyspark wheel already ships in pyspark/jars (Spark's own, Scala, Hadoop, snappy, lz4...)
# are left out, whatever their version there, so the session keeps one copy of each class.
# Idempotent: a cache filled from the same pom and the same pyspark is left alone.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pom="$root/jvm/spark-kafka/pom.xml"
python="${PYTHON_BIN:-$root/.venv/bin/python}"
version="$(sed -n 's:.*<spark\.kafka\.version>\(.*\)</spark\.kafka\.version>.*:\1:p' "$pom" | head -n 1)"
[ -n "$version" ] || { echo "make: no <spark.kafka.version> in $pom" >&2; exit 1; }
pyspark_jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' 2>/dev/null)" \
  || { echo "make: $python cannot import pyspark; run 'make' to install the package first" >&2; exit 1; }
[ -d "$pyspark_jars" ] || { echo "make: no jars directory in the pyspark package ($pyspark_jars)" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rebalancer"
dest="$cache/spark-kafka-$version"
stamp="$( { sha256sum "$pom"; ls "$pyspark_jars"; } | sha256sum | cut -d' ' -f1)"
if [ -f "$dest/.complete" ] && [ "$(cat "$dest/.complete")" = "$stamp" ]; then exit 0; fi
command -v mvn >/dev/null || { echo "make: 'mvn' is missing; run scripts/ensure-maven.sh" >&2; exit 1; }
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.spark-kafka-$version.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "make: fetching Spark's Kafka connector $version from Maven Central into $dest" >&2
if ! mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies@jars \
    -Dspark.kafka.out="$tmp" >"$tmp/mvn.log" 2>&1; then
  cat "$tmp/mvn.log" >&2
  echo "make: Maven could not fetch spark-sql-kafka-0-10_2.13 $version (is Maven Central reachable?)" >&2
  exit 1
fi
rm -f "$tmp/mvn.log"
# The artifact name is the file name without its trailing "-<version>.jar".
shipped="$(ls "$pyspark_jars" | sed -n 's/-[0-9][^-]*\.jar$//p' | sort -u)"
for jar in "$tmp"/jars/*.jar; do
  name="$(basename "$jar" | sed 's/-[0-9][^-]*\.jar$//')"
  if grep -qxF "$name" <<<"$shipped"; then rm -f "$jar"; fi
done
ls "$tmp/jars/spark-sql-kafka-0-10_2.13-$version.jar" "$tmp"/jars/kafka-clients-*.jar >/dev/null
echo "$stamp" > "$tmp/.complete"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
