# The README's two commands: `make run` and `make test`. Both bootstrap everything on a fresh
# Debian machine that has only python3 and apt: the virtualenv, the package, and a JDK for Spark.
# `make run` installs only what the main job needs (the core, the 'spark' and 'cli' extras, a JDK);
# `make test` installs everything (every extra, the dev tools, PostgreSQL, Kafka's and Pulsar's jars).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run

.PHONY: run test lint bench java kafka pulsar spark-kafka postgres postgres-jdbc pulsar-conformance clean

run: $(RUN_STAMP) java
	$(BIN)/rebalancer pipeline run --mode overwrite --compare-hash

# Two pytest workers: every test that needs a server (PostgreSQL, Kafka's or Pulsar's brokers, a Spark
# cluster) runs on one of them, so each server starts once (tests/conftest.py, "two workers").
TEST_WORKERS ?= 2

test: $(STAMP) java postgres kafka pulsar pulsar-conformance
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check .

# Every headline figure, one script each (see README "Benchmarks").
bench: $(STAMP) java postgres-jdbc pulsar-conformance spark-kafka
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit $$?; done

# The Pulsar conformance harness (conformance/pulsar, docs/shedding.md): Maven builds it against the
# pulsar-broker its pom pins, caching the jars in ~/.m2; rebuilt only when its sources change.
PULSAR_HARNESS := conformance/pulsar/target/pulsar-conformance.jar
pulsar-conformance: java
	@scripts/ensure-jdk.sh
	@scripts/ensure-maven.sh
	@$(MAKE) --no-print-directory $(PULSAR_HARNESS)

$(PULSAR_HARNESS): conformance/pulsar/pom.xml $(shell find conformance/pulsar/src -type f)
	mvn -q -B -f conformance/pulsar/pom.xml package

java:
	@scripts/ensure-java.sh

# rebalancer.testing.KafkaCluster's real brokers: Maven (apt-get installs it where missing) copies the
# Kafka jars jvm/kafka/pom.xml pins to ~/.cache/rebalancer/kafka-<version>; skipped once they are there.
kafka: java
	@scripts/ensure-maven.sh
	@scripts/fetch-kafka.sh

# rebalancer.testing.PulsarCluster's real cluster: Maven copies the Pulsar jars jvm/pulsar/pom.xml pins
# (broker, bookie, ZooKeeper) to ~/.cache/rebalancer/pulsar-<version>; skipped once they are there.
pulsar: java
	@scripts/ensure-maven.sh
	@scripts/fetch-pulsar.sh

# Spark's own Kafka connector, which benchmarks/kafka_source.py runs against ours (--against spark-kafka):
# Maven copies what jvm/spark-kafka/pom.xml pins, less the jars pyspark already ships, to
# ~/.cache/rebalancer/spark-kafka-<version>; skipped once they are there.
spark-kafka: $(STAMP) java
	@scripts/ensure-maven.sh
	@PYTHON_BIN=$(BIN)/python scripts/fetch-spark-kafka.sh

# The PostgreSQL sink's tests start a private server; its benchmark also needs Debian's JDBC driver.
postgres:
	@scripts/ensure-postgres.sh

postgres-jdbc:
	@scripts/ensure-postgres.sh --jdbc

$(BIN)/python:
	@scripts/ensure-venv.sh $(PYTHON) $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	@touch $@ $(RUN_STAMP)

# The main job's packages alone: pyspark and its report's libraries, rich for the command's output.
# One line says what comes and how long it takes (1.5-2 minutes measured on a 2-core machine), then
# pip shows its progress: without --quiet, which hides the download bars.
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	@echo "make run: installs pyspark, pandas, pyarrow, matplotlib, rich (~1 GB, 2-4 min)"
	@$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -e '.[spark,cli]'
	@touch $@

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache out data
