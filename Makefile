# rustbuilder: build, test, and regenerate the sample projects.
#
#   make demo   the Memcached tutorial end to end on a local control plane (the main job)
#   make test   everything CI runs

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

# Build caches shared by every clone on this machine, so CI and later runs reuse them.
CACHE_DIR ?= $(HOME)/.cache/rustbuilder
export CARGO_TARGET_DIR ?= $(CACHE_DIR)/target
# The generated projects share one build dir of their own (they have the same dependencies and vendor
# the same runtime, which cargo builds once for all of them); each keeps its binaries in its own
# target/, so two projects built at once never run each other's `crdgen`. Cargo tells apart the builds
# of projects there by package name only, and reuses a build newer than the sources: projects of one
# name but different code (a tutorial's `project` on its way, the golden one) must not be built at once,
# nor one from sources older than the other's build.
PROJECTS_TARGET_DIR ?= $(CACHE_DIR)/target-projects
in-project = CARGO_BUILD_BUILD_DIR=$(PROJECTS_TARGET_DIR) CARGO_TARGET_DIR=$(CURDIR)/$(1)/target
# Debug builds keep line tables only: backtraces still name file and line, and a generated project's test
# binary is a fraction of the ~350 MB full debug info makes it (less to link, less disk).
export CARGO_PROFILE_DEV_DEBUG ?= line-tables-only
# Every change to the runtime leaves a new set of test binaries in the shared target dirs: past this size a
# debug dir is emptied before the tests (the build refills it) instead of filling the disk.
CACHE_LIMIT_MB ?= 25000

RUSTBUILDER := $(CARGO_TARGET_DIR)/debug/rustbuilder

# Each step of `make test` ends with a line saying how long it took, so CI's log shows where the time goes:
# a step's recipe starts with $(step-start) and ends with $(step-end). The steps' times and the test
# binaries' (hack/test-binaries.py, the golden projects) are logged too, and `make test` ends with the
# slowest of each, so a regression shows the day it lands. Beside its time, a step says how much CPU time
# the machine spent meanwhile (all processes: run nothing else beside `make test` to read it as the step's).
STEP_TIMES := bin/step-times
export TEST_TIMES_LOG := $(CURDIR)/$(STEP_TIMES)/binaries.log
busy-seconds = $$(awk -v hz=$$(getconf CLK_TCK) '/^cpu / { print int(($$2 + $$3 + $$4 + $$7 + $$8 + $$9) / hz) }' /proc/stat)
step-start = @mkdir -p $(STEP_TIMES) && echo "$$(date +%s) $(busy-seconds)" > $(STEP_TIMES)/$@
step-end = @read started busy < $(STEP_TIMES)/$@; took=$$(( $$(date +%s) - started )); cpu=$$(( $(busy-seconds) - busy )); \
  echo "==> $@: $${took}s, CPU $${cpu}s (ended $$(date -u +%T) UTC)"; echo "$$took $@ (CPU $${cpu}s)" >> $(STEP_TIMES)/steps.log
ENVTEST_K8S_VERSION ?= 1.36.3
TESTDATA := testdata/project-basic testdata/project testdata/project-multigroup testdata/project-webhooks testdata/project-cronjob
# The projects are tested several at a time (in make test's job slots; alone, STEP_JOBS at a time), the
# longest first: one compiles while another's tests wait on their control plane. Each project's output is
# printed whole when it is done.
TESTDATA_BY_LENGTH := testdata/project-cronjob testdata/project-multigroup testdata/project \
  testdata/project-basic testdata/project-webhooks
PROJECT_TESTS := $(TESTDATA_BY_LENGTH:%=%/.test)

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
	$(step-start)
	cargo build --locked
	$(step-end)

.PHONY: install
install: ## Install rustbuilder into ~/.cargo/bin.
	cargo install --locked --path .

.PHONY: lint
lint: ## Check formatting, clippy and rustdoc for the CLI and the runtime crates.
	$(step-start)
	cargo fmt --all --check
	cargo clippy --locked --workspace --all-targets -- -D warnings
	# The runtime crates leave the Kubernetes version to the binary that uses them; rustdoc needs one.
	K8S_OPENAPI_ENABLED_VERSION=1.36 RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps --all-features
	$(step-end)

# The steps of `make test` run side by side, TEST_JOBS jobs at once over all of them: a step that runs
# several jobs (test binaries, golden projects, tutorials) takes its extra slots from make's jobserver
# (hack/jobslots.py), at most STEP_JOBS at once (the golden projects as many as the slots allow: a
# sub-make given its own -j would leave the shared jobserver). Two cores run three jobs: most of them wait on a control
# plane or on cargo, a third keeps the cores busy meanwhile. On a fresh machine the control plane and
# helm build from Go modules (`envtest`, `helm`) while the steps that need neither (lint, testdata, the
# packages) compile. TEST_JOBS=1 STEP_JOBS=1 runs everything one at a time.
export TEST_JOBS ?= 3
export STEP_JOBS ?= 2
# The Go programs the tests start (etcd, kube-apiserver, the rest of a cluster, kubectl, helm; and `go build`
# on a fresh machine) collect their garbage four times less often: a control plane of a test lives seconds
# to minutes, and its start takes a fifth less CPU so (machine CPU per start of a throw-away control
# plane, 24 starts each way: 2.5 s → 2.0 s; kube-apiserver's peak memory about 265 → 355 MiB).
export GOGC ?= 400

# In `make test` each golden project's tests are a job of their own (PROJECT_TESTS, not test-testdata).
# make gives a free slot to the first step in this order that is ready, and the scripts that run many
# jobs (test binaries, tutorials) take an extra slot only when make leaves it free (hack/jobslots.py):
# the long steps (the tutorials and the drills, six minutes each) start as soon as `testdata` is
# written, and the short ones (golden projects, test binaries) fill the slots around them, so that no
# long step is left to run alone at the end.
TEST_STEPS = verify-testdata lint test-drills test-docs test-runtime test-package $(PROJECT_TESTS) test-helm \
  test-cli

.PHONY: test
test: ## Run every test: CLI, runtime crates, their packages, golden projects, their own tests on a real control plane, the Helm chart, fault drills.
	@$(MAKE) --no-print-directory test-start prune-cache build
	+@$(MAKE) --no-print-directory -j$(TEST_JOBS) $(TEST_STEPS) SIDE_BY_SIDE=1
	@read started busy < $(STEP_TIMES)/test-start; \
	  echo "==> make test: $$(( $$(date +%s) - started ))s in all, CPU $$(( $(busy-seconds) - busy ))s"
	@echo "==> the slowest steps (seconds):"; { cat $(STEP_TIMES)/steps.log 2>/dev/null || true; } | sort -rn | awk 'NR <= 5 { print "      " $$0 }'
	@echo "==> the slowest test binaries (seconds):"; { cat $(TEST_TIMES_LOG) 2>/dev/null || true; } | sort -rn | awk 'NR <= 5 { print "      " $$0 }'
	@echo "==> the test binaries that took the most CPU (seconds):"; { cat $(TEST_TIMES_LOG) 2>/dev/null || true; } \
	  | sed -nE 's/^[0-9]+ (.*) \((.*; )?CPU ([0-9]+)s\)$$/\3 \1/p' | sort -rn | awk 'NR <= 5 { print "      " $$0 }'

# What the steps wait for when they run side by side, besides what they build on: regenerating
# testdata/ rewrites files the others read (they wait for `testdata`, not for its check: make starts the
# ready steps in the order above when a step ends, and a step still waiting on the check would lose its
# turn to the steps after it). The tutorials build projects named like golden ones (`project`,
# `project-cronjob`) with other code, in the same build dir: hack/doc-test.py names their artifacts
# apart, so they need not wait for the golden projects' tests. The Helm chart's test builds the golden
# project where its own tests do.
ifdef SIDE_BY_SIDE
test-cli test-testdata $(PROJECT_TESTS) test-helm test-docs: testdata
test-helm: testdata/project/.test
endif

.PHONY: test-start
test-start:
	$(step-start)
	@rm -f $(STEP_TIMES)/steps.log $(TEST_TIMES_LOG)

.PHONY: prune-cache
prune-cache: ## Empty a shared debug target dir that has grown past CACHE_LIMIT_MB.
	$(step-start)
	@for dir in $(CARGO_TARGET_DIR)/debug $(PROJECTS_TARGET_DIR)/debug; do \
	  if [ -d $$dir ] && [ $$(du -sm $$dir | cut -f1) -gt $(CACHE_LIMIT_MB) ]; then \
	    echo "prune-cache: $$dir is over $(CACHE_LIMIT_MB) MB; emptying it"; rm -rf $$dir; \
	  fi; \
	done
	$(step-end)

# Test binaries run STEP_JOBS at a time at most (hack/test-binaries.py), the longest first, each binary's
# output printed whole when it ends.
TEST_BINARIES := python3 hack/test-binaries.py

.PHONY: test-cli
test-cli: envtest helm ## Unit and integration tests of the CLI (kustomize builds of config/ with envtest's kubectl, charts rendered with helm).
	$(step-start)
	+HELM=$(HELM) KUBEBUILDER_ASSETS="$(ASSETS)" $(TEST_BINARIES) --doc --locked
	$(step-end)

.PHONY: test-package
test-package: build ## `cargo package` of the CLI and the runtime crates; a CLI installed from its package scaffolds what this one does.
	$(step-start)
	RUSTBUILDER=$(RUSTBUILDER) hack/test-package.sh
	$(step-end)

.PHONY: envtest
# Side by side (`make test`), the CLI is built already: `build`, phony, would run again for a second, and on
# a fresh machine the free job slots would go meanwhile to steps that wait on nothing (helm's Go build),
# holding the control plane's Go build, which most tests wait for, back by minutes.
envtest: $(if $(SIDE_BY_SIDE),,build) ## Provide the control-plane binaries, the simulated cluster's too (downloaded, kwok built with Go, the first time).
	$(step-start)
	$(RUSTBUILDER) envtest use $(ENVTEST_K8S_VERSION) --cluster -p path
	$(step-end)

ASSETS = $$($(RUSTBUILDER) envtest use $(ENVTEST_K8S_VERSION) --cluster -p path)

.PHONY: test-runtime
test-runtime: build envtest ## Test rustbuilder-runtime and rustbuilder-envtest on a real control plane.
	$(step-start)
	+KUBEBUILDER_ASSETS="$(ASSETS)" $(TEST_BINARIES) --doc --example-env TEST_MANAGER_BIN=manager --locked -p rustbuilder-runtime -p rustbuilder-envtest
	$(step-end)

.PHONY: testdata
# A project with user code (a tutorial's: testdata/user-code/<project>/) is regenerated from its PROJECT
# file like the others, then gets its user files back on top of the scaffold before its manifests are
# written: the scaffold's changes still show in the diff, and the code the tutorial teaches is kept once.
# Each project's vendored runtime (not committed: written afresh) gets its sources' times before the
# manifests' build (hack/vendored-runtime-times.sh), so cargo builds it once for the five, not five times.
testdata: build ## Regenerate the sample projects in testdata/ from their PROJECT files (manifests included).
	$(step-start)
	for project in $(TESTDATA); do \
	  user=testdata/user-code/$$(basename $$project); \
	  $(RUSTBUILDER) alpha generate --skip-manifests --input-dir $$project || exit 1; \
	  if [ -d $$user ]; then cp -R $$user/. $$project/; fi; \
	  hack/vendored-runtime-times.sh $$project; \
	  $(call in-project,$$project) $(RUSTBUILDER) manifests --quiet --dir $$project || exit 1; \
	done
	$(step-end)

.PHONY: verify-testdata
# `testdata` has just written every file, manifests included, so git says all that differs (`manifests
# --check` itself is tested in tests/cli.rs).
verify-testdata: testdata ## Fail when testdata/ differs from what rustbuilder generates.
	$(step-start)
	@if [ -n "$$(git status --porcelain -- testdata)" ]; then \
	  git status --short -- testdata; git --no-pager diff --stat -- testdata; \
	  echo "testdata/ is out of date: run 'make testdata' and commit the result" >&2; exit 1; \
	fi
	$(step-end)

# The golden projects must not need the CLI: their tests run with a PATH that has no rustbuilder on it.
NO_RUSTBUILDER_PATH := $(shell printf '%s\n' "$$PATH" | tr ':' '\n' | while read -r dir; do [ -x "$$dir/rustbuilder" ] || echo "$$dir"; done | paste -sd: -)

.PHONY: test-testdata
test-testdata: build envtest ## Lint and test each sample project (envtest: a real etcd + kube-apiserver).
	$(step-start)
	$(if $(filter-out $(TESTDATA_BY_LENGTH),$(TESTDATA)),$(error TESTDATA_BY_LENGTH misses a project of TESTDATA))
	+$(MAKE) --no-print-directory $(if $(findstring jobserver,$(MAKEFLAGS)),,-j$(STEP_JOBS)) --output-sync=recurse $(PROJECT_TESTS)
	$(step-end)

.PHONY: $(PROJECT_TESTS)
# The CPU seconds of the shell's children so far, from the output of bash's `times` ("0m1.5s 0m0.2s" on its
# 2nd line), written to a file: in a pipe, `times` would run in a subshell of its own.
children-cpu = awk 'NR == 2 { split($$0, t, /[ms ]+/); print int(t[1] * 60 + t[2] + t[3] * 60 + t[4]) }'

$(PROJECT_TESTS): %/.test: build envtest
	@start=$$(date +%s); status=0; log=$$(mktemp); \
	env -u KUBEBUILDER_ASSETS PATH="$(NO_RUSTBUILDER_PATH)" CARGO_BUILD_BUILD_DIR=$(PROJECTS_TARGET_DIR) \
	  $(MAKE) -j1 -C $* lint test test-e2e CARGO_TARGET_DIR=$(CURDIR)/$*/target > $$log 2>&1 || status=$$?; \
	took=$$(( $$(date +%s) - start )); times > $*/.times; cpu=$$($(children-cpu) $*/.times); rm $*/.times; \
	echo "==> $*"; cat $$log; rm $$log; \
	echo "==> $*: $$([ $$status = 0 ] && echo ok || echo "FAILED (exit $$status)") in $${took}s, CPU $${cpu}s (ended $$(date -u +%T) UTC)"; \
	mkdir -p $(dir $(TEST_TIMES_LOG)) && echo "$$took $* (make lint test test-e2e; CPU $${cpu}s)" >> $(TEST_TIMES_LOG); \
	exit $$status

# helm, built from Go modules like the control plane (minutes the first time), cached by version outside
# the clone; the lock lets parallel runs share one build.
HELM_VERSION ?= v3.22.0
HELM := $(CACHE_DIR)/helm/$(HELM_VERSION)/helm

.PHONY: helm
helm: $(HELM) ## Provide helm (built from Go modules the first time).

$(HELM):
	@command -v go >/dev/null || { echo "building helm needs Go 1.26 or newer: install it from https://go.dev/dl" >&2; exit 1; }
	mkdir -p $(CACHE_DIR)/helm
	flock $(CACHE_DIR)/helm/.lock sh -ec 'test -x $(HELM) && exit 0; \
	  GOBIN=$(CACHE_DIR)/helm/$(HELM_VERSION).tmp go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION); \
	  mkdir -p $(dir $(HELM)); mv $(CACHE_DIR)/helm/$(HELM_VERSION).tmp/helm $(HELM); rmdir $(CACHE_DIR)/helm/$(HELM_VERSION).tmp'

.PHONY: test-helm
test-helm: envtest helm ## The golden project's Helm chart: helm lint and template, then install on a local cluster.
	$(step-start)
	HELM=$(HELM) KUBEBUILDER_ASSETS="$(ASSETS)" $(call in-project,testdata/project) hack/test-helm.sh testdata/project
	$(step-end)

# The golden operator the drills run and its image holds (docs/deploy.md): a debug build linked
# statically (glibc's static C runtime; no musl toolchain needed). `cargo rustc` gives the flag to the
# final link only, so no dependency is rebuilt for it. It lands in a target dir of its own: the golden
# project's tests, which may run meanwhile, build the same binary without the static link in theirs.
OPERATOR_DIR := bin/operator
OPERATOR := $(CURDIR)/$(OPERATOR_DIR)/target/debug/project
OCI_IMAGE := bin/oci/project
define build-oci-image
$(call in-project,$(OPERATOR_DIR)) cargo rustc --locked --manifest-path testdata/project/Cargo.toml \
  --bin project -- -C target-feature=+crt-static
python3 hack/oci-image.py --binary $(OPERATOR) --output $(OCI_IMAGE) --tag project:latest
endef

.PHONY: oci-image
oci-image: testdata ## The golden operator's container image, built without Docker: an OCI image layout in bin/oci/project.
	$(step-start)
	$(build-oci-image)
	$(step-end)

# The drills build the image themselves rather than wait for `oci-image`: a step of `make test` that
# becomes ready when another ends may wait for a slot behind steps found ready first, so a chain of
# steps starts late (in one run the image step, 5.5 minutes after the operator was built).
# hack/drills builds with the projects' build dir.
DRILLS := hack/drills/Cargo.toml

.PHONY: test-drills
test-drills: testdata envtest ## Fault drills (docs/reliability.md), the deploy path and the image (docs/deploy.md).
	$(step-start)
	$(build-oci-image)
	cargo fmt --manifest-path $(DRILLS) --check
	$(call in-project,hack/drills) cargo clippy --locked --manifest-path $(DRILLS) --all-targets -- -D warnings
	+DRILLS_OPERATOR=$(OPERATOR) DRILLS_IMAGE=$(CURDIR)/$(OCI_IMAGE) \
	  KUBEBUILDER_ASSETS="$(ASSETS)" $(call in-project,hack/drills) \
	  $(TEST_BINARIES) --locked --manifest-path $(DRILLS) -- --nocapture
	$(step-end)

# The multi-version tutorials continue the CronJob ones, in the same shell (`<!-- continues: -->`). The
# multi-cluster one runs four local clusters and a manager of its own (its probes on :8083).
DOCS := docs/getting-started.md docs/zh/getting-started.md docs/cronjob-tutorial.md docs/zh/cronjob-tutorial.md \
  docs/multiversion-tutorial.md docs/zh/multiversion-tutorial.md \
  docs/multicluster-tutorial.md docs/zh/multicluster-tutorial.md

.PHONY: test-docs
test-docs: build envtest ## Check the tutorials' snippets against testdata/project and run their commands.
	$(step-start)
	+PATH="$(dir $(RUSTBUILDER)):$$PATH" KUBEBUILDER_ASSETS="$(ASSETS)" CARGO_BUILD_BUILD_DIR=$(PROJECTS_TARGET_DIR) \
	  env -u CARGO_TARGET_DIR python3 hack/doc-test.py $(DOCS)
	$(step-end)

# Kubebuilder's own PROJECT files (Kubebuilder's testdata and book projects, one `<name>/PROJECT` per
# directory), made into Rust projects and tested as users would. Not part of `make test`: it builds a
# project per file (minutes each); `tests/cli.rs` checks that each one generates.
KUBEBUILDER_PROJECT_FILES ?= ../shared/kubebuilder
KUBEBUILDER_OUT ?= $(CACHE_DIR)/kubebuilder-projects

.PHONY: test-kubebuilder
test-kubebuilder: build envtest ## Make each Kubebuilder PROJECT file into a Rust project and run its lint and tests (multigroup ones: e2e too).
	@test -d $(KUBEBUILDER_PROJECT_FILES) || { echo "no Kubebuilder PROJECT files in $(KUBEBUILDER_PROJECT_FILES): set KUBEBUILDER_PROJECT_FILES" >&2; exit 1; }
	for file in $(KUBEBUILDER_PROJECT_FILES)/*/PROJECT; do \
	  name=$$(basename $$(dirname $$file)); in=$(KUBEBUILDER_OUT)/$$name/in; out=$(KUBEBUILDER_OUT)/$$name/out; \
	  echo "==> $$name"; rm -rf $(KUBEBUILDER_OUT)/$$name; mkdir -p $$in; cp $$file $$in/PROJECT; \
	  CARGO_BUILD_BUILD_DIR=$(PROJECTS_TARGET_DIR) CARGO_TARGET_DIR=$$out/target $(RUSTBUILDER) alpha generate --input-dir $$in --output-dir $$out; \
	  targets="lint test"; grep -q '^multigroup: true' $$file && targets="$$targets test-e2e"; \
	  env -u KUBEBUILDER_ASSETS PATH="$(NO_RUSTBUILDER_PATH)" CARGO_BUILD_BUILD_DIR=$(PROJECTS_TARGET_DIR) \
	    $(MAKE) -C $$out $$targets CARGO_TARGET_DIR=$$out/target; \
	done

.PHONY: bench
bench: ## Benchmark the generated Memcached operator against Kubebuilder's Go one on a local cluster (hours; BENCH_* knobs in docs/benchmarks.md).
	RB_TARGET_DIR=$(CARGO_TARGET_DIR) PROJECTS_TARGET_DIR=$(PROJECTS_TARGET_DIR) ENVTEST_K8S_VERSION=$(ENVTEST_K8S_VERSION) python3 bench/bench.py prepare
	RB_TARGET_DIR=$(CARGO_TARGET_DIR) PROJECTS_TARGET_DIR=$(PROJECTS_TARGET_DIR) ENVTEST_K8S_VERSION=$(ENVTEST_K8S_VERSION) python3 bench/bench.py run
	RB_TARGET_DIR=$(CARGO_TARGET_DIR) PROJECTS_TARGET_DIR=$(PROJECTS_TARGET_DIR) ENVTEST_K8S_VERSION=$(ENVTEST_K8S_VERSION) python3 bench/bench.py build-times
	python3 bench/bench.py report
