# rustbuilder: build, test, and regenerate the sample projects.
#
#   make demo   the Memcached tutorial end to end on a local control plane (the main job)
#   make test   everything CI runs

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

# Build caches shared by every clone on this machine, so CI and later runs reuse them.
CACHE_DIR ?= $(HOME)/.cache/rustbuilder
export CARGO_TARGET_DIR ?= $(CACHE_DIR)/target
# The generated projects share one target dir of their own (they have the same dependencies).
PROJECTS_TARGET_DIR ?= $(CACHE_DIR)/target-projects

RUSTBUILDER := $(CARGO_TARGET_DIR)/debug/rustbuilder
ENVTEST_K8S_VERSION ?= 1.36.3
TESTDATA := testdata/project-basic testdata/project

.PHONY: all
all: build

.PHONY: demo
demo: build ## The Memcached tutorial end to end on a local cluster: scaffold, build, run, apply, show.
	RUSTBUILDER=$(RUSTBUILDER) hack/demo.sh

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the rustbuilder CLI.
	cargo build --locked

.PHONY: install
install: ## Install rustbuilder into ~/.cargo/bin.
	cargo install --locked --path .

.PHONY: lint
lint: ## Check formatting and clippy for the CLI.
	cargo fmt --check
	cargo clippy --locked --all-targets -- -D warnings

.PHONY: test
test: build lint test-cli test-harness verify-testdata test-testdata test-docs ## Run every test: CLI, golden projects, their own tests on a real control plane.

.PHONY: test-cli
test-cli: ## Unit and integration tests of the CLI.
	cargo test --locked

.PHONY: envtest
envtest: build ## Provide the control-plane binaries (built from Go modules the first time).
	$(RUSTBUILDER) envtest use $(ENVTEST_K8S_VERSION) -p path

ASSETS = $$($(RUSTBUILDER) envtest use $(ENVTEST_K8S_VERSION) -p path)

.PHONY: test-harness
test-harness: build envtest ## Test the envtest harness that generated projects carry (real control plane).
	cd hack/envtest-harness && CARGO_TARGET_DIR=$(PROJECTS_TARGET_DIR) cargo fmt --check
	cd hack/envtest-harness && CARGO_TARGET_DIR=$(PROJECTS_TARGET_DIR) cargo clippy --all-targets -- -D warnings
	cd hack/envtest-harness && KUBEBUILDER_ASSETS="$(ASSETS)" CARGO_TARGET_DIR=$(PROJECTS_TARGET_DIR) cargo test

.PHONY: testdata
testdata: build ## Regenerate the sample projects in testdata/ from their PROJECT files.
	for project in $(TESTDATA); do \
	  $(RUSTBUILDER) alpha generate --input-dir $$project; \
	  CARGO_TARGET_DIR=$(PROJECTS_TARGET_DIR) $(RUSTBUILDER) manifests --dir $$project; \
	done

.PHONY: verify-testdata
verify-testdata: testdata ## Fail when testdata/ differs from what rustbuilder generates.
	for project in $(TESTDATA); do \
	  CARGO_TARGET_DIR=$(PROJECTS_TARGET_DIR) $(RUSTBUILDER) manifests --check --dir $$project; \
	done
	@if [ -n "$$(git status --porcelain -- testdata)" ]; then \
	  git status --short -- testdata; git --no-pager diff --stat -- testdata; \
	  echo "testdata/ is out of date: run 'make testdata' and commit the result" >&2; exit 1; \
	fi

.PHONY: test-testdata
test-testdata: build envtest ## Lint and test each sample project (envtest: a real etcd + kube-apiserver).
	for project in $(TESTDATA); do \
	  echo "==> $$project"; \
	  $(MAKE) -C $$project lint test test-e2e RUSTBUILDER=$(RUSTBUILDER) CARGO_TARGET_DIR=$(PROJECTS_TARGET_DIR); \
	done

DOCS := docs/getting-started.md docs/zh/getting-started.md

.PHONY: test-docs
test-docs: build envtest ## Check the tutorials' snippets against testdata/project and run their commands.
	PATH="$(dir $(RUSTBUILDER)):$$PATH" KUBEBUILDER_ASSETS="$(ASSETS)" CARGO_TARGET_DIR=$(PROJECTS_TARGET_DIR) \
	  python3 hack/doc-test.py $(DOCS)

.PHONY: bench
bench: ## Benchmark the generated Memcached operator against Kubebuilder's Go one on a local cluster (hours; BENCH_* knobs in docs/benchmarks.md).
	RB_TARGET_DIR=$(CARGO_TARGET_DIR) PROJECTS_TARGET_DIR=$(PROJECTS_TARGET_DIR) ENVTEST_K8S_VERSION=$(ENVTEST_K8S_VERSION) python3 bench/bench.py prepare
	RB_TARGET_DIR=$(CARGO_TARGET_DIR) PROJECTS_TARGET_DIR=$(PROJECTS_TARGET_DIR) ENVTEST_K8S_VERSION=$(ENVTEST_K8S_VERSION) python3 bench/bench.py run
	RB_TARGET_DIR=$(CARGO_TARGET_DIR) PROJECTS_TARGET_DIR=$(PROJECTS_TARGET_DIR) ENVTEST_K8S_VERSION=$(ENVTEST_K8S_VERSION) python3 bench/bench.py build-times
	python3 bench/bench.py report
