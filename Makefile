# lakelog: `make run` and `make test` set everything up on a fresh machine (Python 3.11 + Java 17).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NATIVE_STAMP := $(VENV)/.native-installed
# rustup's cargo builds native/ (the Kafka record codec); it lives here on a fresh machine.
export PATH := $(HOME)/.cargo/bin:$(PATH)
DATA_DIR ?= ./data
HOST ?= 127.0.0.1
PORT ?= 8082
KAFKA_PORT ?= 9092

.PHONY: install kafka-jars run test test-fast lint format bench clean chaos

install: $(STAMP) $(NATIVE_STAMP)

# The venv is rebuilt when the pinned dependencies change. The last step starts Spark once so
# its package resolution puts the Delta jars in the Ivy cache: tests never download them.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# compat: the project root goes on sys.path, so Spark's lookup of `pyspark_*` modules finds
	# pyspark_lakelog (format("lakelog") with no registration call), as with an installed wheel.
	$(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	$(BIN)/python -m pipeline.spark
	# Azurite, the Azure Blob emulator the object-store tests run against (npm, Node 20).
	mkdir -p $(VENV)/azurite && cd $(VENV)/azurite && npm install --no-audit --no-fund --silent azurite@3.37.0
	touch $(STAMP)

# The Rust record codec (native/), rebuilt when its sources change; the Python reference codec
# serves without it, five to ten times slower.
$(NATIVE_STAMP): $(STAMP) native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)
	$(BIN)/python -m pip install --quiet ./native
	touch $(NATIVE_STAMP)

run: install
	$(BIN)/lakelog serve --data-dir $(DATA_DIR) --host $(HOST) --port $(PORT) --kafka-port $(KAFKA_PORT)

# Apache Kafka's jars (its Java clients, tools, Streams, Connect, MirrorMaker 2 and the broker the
# tests compare against), downloaded once with mvn into .venv/kafka-<version>/libs.
kafka-jars: install
	$(BIN)/python -m tests.apache_kafka

test: install kafka-jars
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/pytest

test-fast: install
	$(BIN)/pytest -m "not spark"

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format .

bench: install
	$(BIN)/python bench/produce_fetch.py

# Long fault runs (RELIABILITY.md): each prints its figures and fails on any anomaly
# (T2b, the control, fails when it finds none).
CHAOS_SEED ?= 1
chaos: install
	$(BIN)/python -m chaos run T1 --seed $(CHAOS_SEED) --ops 20000 --duration-s 300
	$(BIN)/python -m chaos run T2 --seed $(CHAOS_SEED) --ops 5000 --duration-s 300
	$(BIN)/python -m chaos run T2 --seed $(CHAOS_SEED) --ops 2000 --duration-s 200 --store s3
	$(BIN)/python -m chaos run T2 --seed $(CHAOS_SEED) --ops 2000 --duration-s 200 --store azure
	$(BIN)/python -m chaos run T2b --seed $(CHAOS_SEED) --ops 1000 --duration-s 120
	$(BIN)/python -m chaos run T3 --seed $(CHAOS_SEED) --ops 5000 --duration-s 300
	$(BIN)/python -m chaos run T3g --seed $(CHAOS_SEED) --ops 3000 --duration-s 300
	$(BIN)/python -m chaos run T4 --seed $(CHAOS_SEED) --ops 3000 --duration-s 300
	$(BIN)/python -m chaos run TK --seed $(CHAOS_SEED) --ops 20000 --duration-s 300
	$(BIN)/python -m chaos run SQ --seed $(CHAOS_SEED) --ops 2000 --duration-s 300
	CHAOS_LONG=1 $(BIN)/pytest -q -p no:cacheprovider tests/reliability/test_fuzz.py
	LAKELOG_MIRROR_MAKER_TEST=1 $(BIN)/pytest -q -p no:cacheprovider tests/kafka/test_kafka_applications.py -k mirror

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
