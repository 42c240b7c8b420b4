# The README's two commands: `make run` and `make test`. Both bootstrap everything on a fresh
# Debian machine that has only python3 and apt: the virtualenv, the package, and a JDK for Spark.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench java postgres postgres-jdbc clean

run: $(STAMP) java postgres
	$(BIN)/rebalancer pipeline run

test: $(STAMP) java postgres
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .

# Every headline figure, one script each (see README "Benchmarks").
bench: $(STAMP) java postgres-jdbc
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit $$?; done

java:
	@scripts/ensure-java.sh

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
	@touch $@

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache out data
