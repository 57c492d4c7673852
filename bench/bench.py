#!/usr/bin/env python3
"""rustbuilder benchmark harness: the generated Rust Memcached operator vs Kubebuilder's Go one.

Usage (from the repository root; `make bench` runs `prepare`, `build-times`, `run` and `report`):

    python3 bench/bench.py prepare        # build rustbuilder, scaffold + build both operators
    python3 bench/bench.py build-times    # scaffolding and build figures (section "Scaffolding")
    python3 bench/bench.py run            # the cluster workloads (BENCH_SIZES, BENCH_RUNS, BENCH_IDLE)
    python3 bench/bench.py report         # tables (Markdown) and the chart from the results
    python3 bench/bench.py write-costs    # kube-apiserver's CPU per request, by kind of write (dry runs)
    python3 bench/bench.py fleet [N]      # what each engaged cluster of a fleet costs, with N control planes

Only the Python 3.11 standard library is needed, plus matplotlib for the chart (`report` says how to get it).
Results go to bench/results/*.json; the Go project is generated in a temporary directory and never
kept in the repository.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
# BENCH_PPROF=S: a CPU profile of kube-apiserver over the first S seconds of the create and scale phases
PPROF_SECONDS = int(os.environ.get("BENCH_PPROF", "0"))
HOME = Path.home()
CACHE = Path(os.environ.get("CACHE_DIR", HOME / ".cache/rustbuilder"))
KUBEBUILDER_VERSION = os.environ.get("KUBEBUILDER_VERSION", "v4.16.0")
ENVTEST_K8S_VERSION = os.environ.get("ENVTEST_K8S_VERSION", "1.36.3")
RB_TARGET = Path(os.environ.get("RB_TARGET_DIR", CACHE / "target"))
PROJECTS_TARGET = Path(os.environ.get("PROJECTS_TARGET_DIR", CACHE / "target-projects"))
RUSTBUILDER = RB_TARGET / "release/rustbuilder"
BENCH_CACHE = CACHE / "bench"
GO_CACHE = BENCH_CACHE / f"kubebuilder-{KUBEBUILDER_VERSION}"  # manager binary + CRD of the Go operator
RUST_DIR = BENCH_CACHE / "rust-project"  # the generated Rust project (rebuilt by `prepare`)
# Its manager and its `envtest` example (the local cluster: `envtest local-cluster KUBECONFIG`), copied
# out of the shared target dir, where every other generated project builds a manager and an `envtest`
# example of its own (possibly from another rustbuilder-envtest).
RUST_BIN = BENCH_CACHE / "rust-bin"

GROUP, VERSION, PLURAL, KIND = "cache.example.com", "v1alpha1", "memcacheds", "Memcached"
IMAGE = "memcached:1.6.26-alpine3.19"
INIT_FLAGS = ["--domain", "example.com"]
API_FLAGS = [
    "create", "api", "--group", "cache", "--version", "v1alpha1", "--kind", "Memcached",
    "--image", IMAGE,
    "--image-container-command", "memcached,--memory-limit=64,-o,modern,-v",
    "--image-container-port", "11211", "--run-as-user", "1001",
    "--plugins", "deploy-image/v1-alpha",
]
NS = "bench"
# Cluster profiles. "unlimited" lifts the client-side rate limits of kube-controller-manager and
# kube-scheduler (20 and 50 requests/s by default), as `kwokctl --disable-qps-limits` does, so the
# operators, not the cluster's own controllers, set the pace. "default" keeps them.
UNLIMITED = "--kube-api-qps=5000 --kube-api-burst=10000"
CLUSTER_PROFILES = {
    "unlimited": {"ENVTEST_KUBE_CONTROLLER_MANAGER_FLAGS": UNLIMITED, "ENVTEST_KUBE_SCHEDULER_FLAGS": UNLIMITED},
    "default": {},
}
# The generated Rust operator reconciles 16 objects at a time; controller-runtime's default is 1.
# "rust-1" is the same generated project with MAX_CONCURRENT_RECONCILES set to 1 (comparable settings).
WORKERS_CONST = "const MAX_CONCURRENT_RECONCILES: u16 = 16;"
# Scale-out: "rust-3" is the same Rust operator run as three replicas with `--sharding`, each reconciling,
# watching and caching a third of the objects. Its cluster's kube-apiserver has the ShardedListAndWatch
# feature gate on (BENCH_SHARD_GATE=0: off, and each replica filters on the client); other operators' clusters
# are started as before.
SHARDED = {"rust-3": 3}
# "rust-labelled" is the same generated project with its Deployment cache made by `manager.owned_labelled`:
# only the Deployments labelled as the operator's, selected by the API server, instead of every Deployment.
OWNED_CACHE = "manager.owned::<Deployment>()"
# BENCH_FOREIGN=N: N Deployments that no operator owns (0 replicas, in a namespace of their own) exist before
# the operator starts, as the other workloads of a shared cluster would: what the default cache holds and
# the labelled one does not.
FOREIGN = int(os.environ.get("BENCH_FOREIGN", "0"))
# BENCH_RUST_BASE=FILE: "rust-base" runs that Rust operator binary (a dist build kept from before a change,
# say), so that one run measures the change side by side with what it replaces; BENCH_RUST_ALT=FILE:
# "rust-alt" runs a third (another candidate, or a script that `exec`s the operator in another environment:
# the PID stays the operator's).
RUST_BASE = os.environ.get("BENCH_RUST_BASE")
RUST_ALT = os.environ.get("BENCH_RUST_ALT")
FOREIGN_NS = "bench-foreign"
SHARD_GATE = "ShardedListAndWatch"
SHARD_GATE_ON = os.environ.get("BENCH_SHARD_GATE", "1") != "0"
WRITE_VERBS = {"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}  # as apiserver_request_total names them


def log(*args):
    print(time.strftime("%H:%M:%S"), *args, file=sys.stderr, flush=True)


def die(msg):
    print(f"bench: {msg}", file=sys.stderr)
    sys.exit(1)


def sh(cmd, cwd=None, env=None, check=True, quiet=True):
    # `env` adds to the environment; a value of None removes the variable.
    e = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            e.pop(key, None)
        else:
            e[key] = value
    r = subprocess.run(cmd, cwd=cwd, env=e, text=True,
                       stdout=subprocess.PIPE if quiet else None,
                       stderr=subprocess.STDOUT if quiet else None)
    if check and r.returncode != 0:
        die(f"`{' '.join(map(str, cmd))}` failed ({r.returncode}) in {cwd}:\n{(r.stdout or '')[-3000:]}")
    return r


def timed(cmd, cwd=None, env=None):
    t = time.monotonic()
    sh(cmd, cwd=cwd, env=env)
    return time.monotonic() - t


# ---------------------------------------------------------------------------------------------
# Prerequisites and builds
# ---------------------------------------------------------------------------------------------

def go_bin():
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if not go:
        die("Go is missing: the Kubebuilder reference operator is built with Go (install Go 1.25+ and put "
            "`go` on PATH)")
    return go


def go_env():
    go = go_bin()
    return {"PATH": f"{Path(go).parent}:{os.environ['PATH']}"}


def kubebuilder_bin():
    """The real kubebuilder CLI, built with `go install` once and cached by version."""
    for p in (CACHE / "bench-bin/kubebuilder", BENCH_CACHE / f"bin-{KUBEBUILDER_VERSION}/kubebuilder"):
        if p.exists():
            out = sh([str(p), "version"], check=False).stdout or ""
            if KUBEBUILDER_VERSION in out:
                return p
    gobin = BENCH_CACHE / f"bin-{KUBEBUILDER_VERSION}"
    log(f"building kubebuilder {KUBEBUILDER_VERSION} with go install (Go module proxy)")
    sh([go_bin(), "install", f"sigs.k8s.io/kubebuilder/v4@{KUBEBUILDER_VERSION}"],
       env=dict(go_env(), GOBIN=str(gobin)))
    return gobin / "kubebuilder"


def build_rustbuilder():
    log("cargo build --release (rustbuilder)")
    sh(["cargo", "build", "--release", "--locked"], cwd=REPO, env={"CARGO_TARGET_DIR": str(RB_TARGET)})
    return RUSTBUILDER


def assets():
    r = sh([str(RUSTBUILDER), "envtest", "use", ENVTEST_K8S_VERSION, "-p", "path"], check=False)
    path = (r.stdout or "").strip().splitlines()[-1:] or [""]
    if r.returncode != 0 or not Path(path[0]).is_dir():
        die("the control-plane assets are missing: run `make envtest` (builds etcd, kube-apiserver, "
            f"kube-controller-manager, kube-scheduler, kwok with Go; about 15 min the first time)\n{r.stdout}")
    return path[0]


def scaffold_go(dest: Path):
    kb = kubebuilder_bin()
    env = go_env()
    t_init = timed([str(kb), "init", *INIT_FLAGS, "--repo", "example.com/memcached-operator",
                    "--skip-go-version-check"], cwd=dest, env=env)
    t_api = timed([str(kb), *API_FLAGS, "--make=false"], cwd=dest, env=env)
    return t_init, t_api


def scaffold_rust(dest: Path):
    t_init = timed([str(RUSTBUILDER), "init", *INIT_FLAGS, "--project-name", "memcached-operator"], cwd=dest)
    t_api = timed([str(RUSTBUILDER), *API_FLAGS], cwd=dest)
    return t_init, t_api


def prepare_go():
    """Kubebuilder's Go operator: scaffolded in a temp dir, built, binary + CRD cached by version."""
    manager, crd = GO_CACHE / "manager", GO_CACHE / "crd.yaml"
    if manager.exists() and crd.exists() and (GO_CACHE / "manager-16-workers").exists():
        log(f"Go operator cached: {manager}")
        return
    with tempfile.TemporaryDirectory(prefix="bench-go-") as d:
        d = Path(d) / "memcached-operator"  # kubebuilder names the project after the directory
        d.mkdir()
        log("kubebuilder init + create api (deploy-image/v1-alpha) in", d)
        scaffold_go(d)
        env = go_env()
        # controller-gen (from the Go module proxy) writes the CRD, RBAC and the DeepCopy methods.
        sh(["make", "manifests", "generate"], cwd=d, env=env)
        log("go build (Go operator)")
        sh([go_bin(), "build", "-o", "bin/manager", "cmd/main.go"], cwd=d, env=env)
        GO_CACHE.mkdir(parents=True, exist_ok=True)
        shutil.copy(d / "bin/manager", manager)
        shutil.copy(d / f"config/crd/bases/{GROUP}_{PLURAL}.yaml", crd)
        # "go-16": the same operator with 16 workers, as a Go user would set it to match ours.
        log("go build (Go operator, MaxConcurrentReconciles: 16)")
        controller = d / "internal/controller/memcached_controller.go"
        source = controller.read_text()
        if GO_SETUP_CALL not in source or GO_CONTROLLER_IMPORT_AFTER not in source:
            die(f"{controller} no longer has `{GO_SETUP_CALL}`: update GO_SETUP_CALL in bench.py")
        patched = source.replace(GO_SETUP_CALL, GO_SETUP_CALL + GO_16_WORKERS, 1).replace(
            GO_CONTROLLER_IMPORT_AFTER, GO_CONTROLLER_IMPORT_AFTER + GO_CONTROLLER_IMPORT, 1)
        controller.write_text(patched)
        sh([go_bin(), "build", "-o", "bin/manager-16-workers", "cmd/main.go"], cwd=d, env=env)
        shutil.copy(d / "bin/manager-16-workers", GO_CACHE / "manager-16-workers")


# Where the Go operator's SetupWithManager builds its controller, and what "go-16" adds there.
GO_SETUP_CALL = "ctrl.NewControllerManagedBy(mgr)."
GO_16_WORKERS = "\n\t\tWithOptions(controller.Options{MaxConcurrentReconciles: 16})."
GO_CONTROLLER_IMPORT_AFTER = '\tctrl "sigs.k8s.io/controller-runtime"\n'
GO_CONTROLLER_IMPORT = '\t"sigs.k8s.io/controller-runtime/pkg/controller"\n'


def prepare_rust(one_worker=True, labelled=False):
    """The generated Rust project, built with the `dist` profile; `one_worker`: also "rust-1"; `labelled`: also
    "rust-labelled"."""
    if RUST_DIR.exists():
        shutil.rmtree(RUST_DIR)
    RUST_DIR.mkdir(parents=True)
    log("rustbuilder init + create api (deploy-image/v1-alpha) in", RUST_DIR)
    scaffold_rust(RUST_DIR)
    env = {"CARGO_TARGET_DIR": str(PROJECTS_TARGET)}
    # The project writes its own manifests (`cargo run --bin crdgen -- --write`): config/crd/bases, which
    # the local cluster installs, and config/rbac/role.yaml.
    sh(["make", "manifests"], cwd=RUST_DIR, env=env)
    # The binary the image ships: Cargo.toml's `dist` profile (release, LTO, one codegen unit).
    log("cargo build --profile dist (Rust operator) + the envtest example (local cluster)")
    sh(["cargo", "build", "--profile", "dist", "--bins"], cwd=RUST_DIR, env=env)
    sh(["cargo", "build", "--example", "envtest"], cwd=RUST_DIR, env=env)
    RUST_BIN.mkdir(parents=True, exist_ok=True)
    shutil.copy(rust_manager_built(), RUST_BIN / "manager")
    shutil.copy(PROJECTS_TARGET / "debug/examples/envtest", RUST_BIN / "envtest")
    # Each variant is the generated controller with one line changed; one not asked for leaves no binary of
    # an older build to be run under its name.
    variants = (("manager-1-worker", one_worker, WORKERS_CONST, WORKERS_CONST.replace("= 16", "= 1")),
                ("manager-labelled", labelled, OWNED_CACHE, OWNED_CACHE.replace("owned::", "owned_labelled::")))
    controller = RUST_DIR / "src/controller/memcached.rs"
    generated = controller.read_text()
    for binary, wanted, line, changed in variants:
        if not wanted:
            (RUST_BIN / binary).unlink(missing_ok=True)
            continue
        if line not in generated:
            die(f"{controller} no longer has `{line}`: update bench.py")
        log(f"cargo build --profile dist (Rust operator: {changed})")
        controller.write_text(generated.replace(line, changed))
        sh(["cargo", "build", "--profile", "dist", "--bins"], cwd=RUST_DIR, env=env)
        controller.write_text(generated)
        shutil.copy(rust_manager_built(), RUST_BIN / binary)


def operators():
    """The operators `run` measures, and `prepare` builds (BENCH_OPERATORS)."""
    return os.environ.get("BENCH_OPERATORS", "rust,go,baseline,rust-1,go-16,rust-3").split(",")


def rust_manager(operator="rust"):
    for name, variable, path in (("rust-base", "BENCH_RUST_BASE", RUST_BASE), ("rust-alt", "BENCH_RUST_ALT", RUST_ALT)):
        if operator == name:
            if not path:
                die(f"the {name} operator runs the binary {variable} names: set it")
            return Path(path)
    return RUST_BIN / {"rust-1": "manager-1-worker", "rust-labelled": "manager-labelled"}.get(operator, "manager")


def rust_manager_built():
    meta = json.loads(sh(["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=RUST_DIR).stdout)
    bins = [t["name"] for p in meta["packages"] for t in p["targets"] if "bin" in t["kind"]]
    name = next(b for b in bins if b != "crdgen")
    return PROJECTS_TARGET / "dist" / name


def cmd_prepare():
    # Only what the chosen operators need: the Go builds for go and go-16, the one-worker build for rust-1.
    ops = operators()
    go = any(op in ("go", "go-16") for op in ops)
    if go:
        go_bin()
    build_rustbuilder()
    assets()
    if go:
        prepare_go()
    prepare_rust(one_worker="rust-1" in ops, labelled="rust-labelled" in ops)
    log("prepared")


# ---------------------------------------------------------------------------------------------
# Scaffolding and build figures
# ---------------------------------------------------------------------------------------------

def median_range(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs), "all": xs}


# The results file of `build-times`, which `report` reads (BENCH_BUILD_OUT: another one in bench/results/).
BUILD_TIMES = os.environ.get("BENCH_BUILD_OUT", "build-times.json")
# Builds as a user runs them: cargo's own defaults (incremental debug builds) and the profile the generated
# Cargo.toml sets, not the settings rustbuilder's Makefile exports for its own builds.
USER_CARGO = {"CARGO_INCREMENTAL": None, "CARGO_PROFILE_DEV_DEBUG": None}
# Projects of 1, 10 and 30 plain kinds (`create api` without plugins), for build times as a project grows.
BENCH_KINDS = [int(n) for n in os.environ.get("BENCH_KINDS", "1,10,30").split(",") if n.strip() and int(n) > 0]


def kind(i):
    return f"Widget{i}"


def append_comment(path: Path):
    with open(path, "a") as f:
        f.write(f"\n// touched {time.monotonic_ns()}\n")


def kinds_rust(d: Path, n: int, cold: bool, reps: int):
    """A Rust project of `n` plain kinds: scaffolded, then its builds timed."""
    d.mkdir(parents=True)
    sh([str(RUSTBUILDER), "init", *INIT_FLAGS, "--project-name", "memcached-operator"], cwd=d)
    for i in range(1, n + 1):
        sh([str(RUSTBUILDER), "create", "api", "--group", "cache", "--version", "v1alpha1", "--kind", kind(i)],
           cwd=d)
    target = d.parent / "target" if cold else PROJECTS_TARGET
    env = dict(USER_CARGO, CARGO_TARGET_DIR=str(target))
    sh(["cargo", "fetch"], cwd=d, env=env)
    res = {}
    if cold:
        res["cold"] = timed(["cargo", "build"], cwd=d, env=env)
    else:
        sh(["cargo", "build"], cwd=d, env=env)  # the runtime crates, which the project carries, at this path
    sh(["cargo", "test", "--no-run"], cwd=d, env=env)  # the dev-dependencies too
    # The project's own crate, its dependencies built.
    sh(["cargo", "clean", "-p", "memcached-operator"], cwd=d, env=env)
    res["build"] = timed(["cargo", "build"], cwd=d, env=env)
    res["test_build"] = timed(["cargo", "test", "--no-run"], cwd=d, env=env)
    rebuild, test_rebuild, manifests = [], [], []
    for _ in range(reps):
        append_comment(d / "src/controller/widget1.rs")
        rebuild.append(timed(["cargo", "build"], cwd=d, env=env))
        append_comment(d / "src/controller/widget1.rs")
        test_rebuild.append(timed(["cargo", "test", "--no-run"], cwd=d, env=env))
        append_comment(d / "src/api/v1alpha1/widget1.rs")
        manifests.append(timed(["make", "manifests"], cwd=d, env=env))
    res.update(rebuild=median_range(rebuild), test_rebuild=median_range(test_rebuild),
               manifests=median_range(manifests))
    return res


def kinds_go(d: Path, n: int, cold: bool, reps: int):
    """Kubebuilder's project of `n` plain kinds: scaffolded, then its builds timed as `kinds_rust` times them."""
    d.mkdir(parents=True)
    kb = kubebuilder_bin()
    tools_env = go_env()
    sh([str(kb), "init", *INIT_FLAGS, "--repo", "example.com/memcached-operator", "--skip-go-version-check"],
       cwd=d, env=tools_env)
    for i in range(1, n + 1):
        sh([str(kb), "create", "api", "--group", "cache", "--version", "v1alpha1", "--kind", kind(i),
            "--resource", "--controller", "--make=false"], cwd=d, env=tools_env)
    # controller-gen is built into bin/ with a cache of its own, so a cold build starts from nothing.
    sh(["make", "manifests", "generate"], cwd=d,
       env=dict(tools_env, GOCACHE=str(d.parent / "gocache-tools")) if cold else tools_env)
    env = dict(tools_env, GOCACHE=str(d.parent / "gocache")) if cold else tools_env
    sh([go_bin(), "mod", "download"], cwd=d, env=env)
    build = [go_bin(), "build", "-o", "bin/manager", "cmd/main.go"]
    res = {}
    if cold:
        res["cold"] = timed(build, cwd=d, env=env)
    else:
        sh(build, cwd=d, env=env)
    # `make test`'s packages: all but the e2e tests; `-run '^$'` builds the test binaries and runs none.
    packages = [p for p in sh([go_bin(), "list", "./..."], cwd=d, env=env).stdout.split() if "/e2e" not in p]
    test = [go_bin(), "test", "-count=1", "-run", "^$", *packages]
    sh(test, cwd=d, env=env)  # the test dependencies too
    # The project's own packages, their dependencies built: every file of them changed, so none is cached.
    for path in sorted(d.glob("api/**/*.go")) + sorted(d.glob("internal/**/*.go")) + sorted(d.glob("cmd/*.go")):
        append_comment(path)
    res["build"] = timed(build, cwd=d, env=env)
    res["test_build"] = timed(test, cwd=d, env=env)
    rebuild, test_rebuild, manifests = [], [], []
    for _ in range(reps):
        append_comment(d / "internal/controller/widget1_controller.go")
        rebuild.append(timed(build, cwd=d, env=env))
        append_comment(d / "internal/controller/widget1_controller.go")
        test_rebuild.append(timed(test, cwd=d, env=env))
        append_comment(d / "api/v1alpha1/widget1_types.go")
        manifests.append(timed(["make", "manifests"], cwd=d, env=env))
    res.update(rebuild=median_range(rebuild), test_rebuild=median_range(test_rebuild),
               manifests=median_range(manifests))
    return res


def cmd_build_times(reps=int(os.environ.get("BENCH_BUILD_REPS", "3"))):
    go_bin()
    res = {"scaffold": {}, "build": {}}
    for tool, fn in (("rustbuilder", scaffold_rust), ("kubebuilder", scaffold_go)):
        inits, apis = [], []
        for _ in range(reps):
            with tempfile.TemporaryDirectory(prefix="bench-scaffold-") as d:
                d = Path(d) / "memcached-operator"  # kubebuilder names the project after the directory
                d.mkdir()
                i, a = fn(d)
                inits.append(i)
                apis.append(a)
        res["scaffold"][tool] = {"init": median_range(inits), "create_api": median_range(apis)}
        log(tool, "init", inits, "create api", apis)

    if os.environ.get("BENCH_BUILD_SKIP"):  # scaffolding figures only
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / BUILD_TIMES).write_text(json.dumps(res, indent=2))
        log("wrote", RESULTS / BUILD_TIMES, "(builds skipped)")
        return
    # Builds. Cold (BENCH_BUILD_COLD=1, the default) = an empty build cache of its own, with the
    # dependencies already downloaded; warm (BENCH_BUILD_COLD=0) = the shared caches (GOCACHE default,
    # PROJECTS_TARGET_DIR), cold builds skipped. Incremental = rebuild after touching the controller.
    cold = os.environ.get("BENCH_BUILD_COLD", "1") != "0"
    mode = "cold" if cold else "warm caches, cold builds skipped"
    if os.environ.get("BENCH_MEMCACHED_BUILDS", "1") != "0":
        res["build"] = dict(build_memcached(cold, reps), mode=mode)
    # As the project grows: the same builds for 1, 10 and 30 kinds, side by side.
    res["kinds"] = {"mode": mode, "reps": reps}
    for n in BENCH_KINDS:
        for tool, fn in (("rustbuilder", kinds_rust), ("kubebuilder", kinds_go)):
            with tempfile.TemporaryDirectory(prefix=f"bench-kinds-{n}-") as d:
                # kubebuilder names the project after the directory
                figures = fn(Path(d) / "memcached-operator", n, cold, reps)
            log(tool, n, "kinds", figures)
            res["kinds"].setdefault(str(n), {})[tool] = figures
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / BUILD_TIMES).write_text(json.dumps(res, indent=2))
    log("wrote", RESULTS / BUILD_TIMES)


def build_memcached(cold: bool, reps: int):
    """The deploy-image Memcached project of both tools: release and debug builds, then after an edit."""
    res = {}
    with tempfile.TemporaryDirectory(prefix="bench-build-") as d:
        d = Path(d)
        go_dir, rs_dir = d / "go/memcached-operator", d / "rust/memcached-operator"
        go_dir.mkdir(parents=True)
        rs_dir.mkdir(parents=True)
        scaffold_go(go_dir)
        env = dict(go_env(), GOCACHE=str(d / "gocache")) if cold else go_env()
        sh(["make", "manifests", "generate"], cwd=go_dir, env=env)
        sh([go_bin(), "mod", "download"], cwd=go_dir, env=env)
        first = timed([go_bin(), "build", "-o", "bin/manager", "cmd/main.go"], cwd=go_dir, env=env)
        go_inc = []
        for _ in range(reps):
            with open(go_dir / "internal/controller/memcached_controller.go", "a") as f:
                f.write("\n// touched\n")
            go_inc.append(timed([go_bin(), "build", "-o", "bin/manager", "cmd/main.go"], cwd=go_dir, env=env))
        log("go first build", first, "incremental", go_inc)
        res["go"] = {"incremental": median_range(go_inc),
                     "binary_bytes": (go_dir / "bin/manager").stat().st_size}
        if cold:
            res["go"]["cold"] = first

        scaffold_rust(rs_dir)
        target = d / "target" if cold else PROJECTS_TARGET
        renv = dict(USER_CARGO, CARGO_TARGET_DIR=str(target))
        sh(["cargo", "fetch"], cwd=rs_dir, env=renv)
        ctrl = rs_dir / "src/controller/memcached.rs"
        for profile, flags in (("cargo_release", ["--release"]), ("cargo_debug", [])):
            first = timed(["cargo", "build", *flags, "--bins"], cwd=rs_dir, env=renv)
            inc = []
            for _ in range(reps):
                with open(ctrl, "a") as f:
                    f.write("\n// touched\n")
                inc.append(timed(["cargo", "build", *flags, "--bins"], cwd=rs_dir, env=renv))
            log(profile, "first build", first, "incremental", inc)
            res[profile] = {"incremental": median_range(inc)}
            if cold:
                res[profile]["cold"] = first
        manager = target / "release/memcached-operator"
        res["cargo_release"]["binary_bytes"] = manager.stat().st_size if manager.exists() else 0
    return res


# ---------------------------------------------------------------------------------------------
# A small Kubernetes client (stdlib only): TLS client certificates from the admin kubeconfig.
# ---------------------------------------------------------------------------------------------

class Kube:
    def __init__(self, kubeconfig: Path, tmp: Path):
        cfg = json.loads(sh(["kubectl", "config", "view", "--raw", "-o", "json",
                             "--kubeconfig", str(kubeconfig)]).stdout)
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        server = cluster["server"].removeprefix("https://")
        self.host, _, port = server.partition(":")
        self.port = int(port or 443)
        ctx = ssl.create_default_context()

        def data(d, key):
            if key + "-data" in d:
                return base64.b64decode(d[key + "-data"])
            return Path(d[key]).read_bytes()

        ca = tmp / "ca.crt"
        ca.write_bytes(data(cluster, "certificate-authority"))
        ctx.load_verify_locations(str(ca))
        cert, key = tmp / "client.crt", tmp / "client.key"
        cert.write_bytes(data(user, "client-certificate"))
        key.write_bytes(data(user, "client-key"))
        ctx.load_cert_chain(str(cert), str(key))
        ctx.check_hostname = False  # served for 127.0.0.1 / localhost
        self.ctx = ctx
        self.local = threading.local()
        self.requests = {}  # (verb, resource) -> count, what this harness sent
        self.lock = threading.Lock()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)
            self.local.conn = c
        return c

    def count(self, verb, resource):
        with self.lock:
            self.requests[(verb, resource)] = self.requests.get((verb, resource), 0) + 1

    def request(self, method, path, body=None, ctype="application/json", verb=None, resource=None):
        if verb:
            self.count(verb, resource)
        for attempt in range(5):
            c = self._conn()
            try:
                headers = {"Accept": "application/json"}
                payload = None
                if body is not None:
                    payload = json.dumps(body).encode() if not isinstance(body, (bytes, str)) else body
                    headers["Content-Type"] = ctype
                c.request(method, path, body=payload, headers=headers)
                r = c.getresponse()
                data = r.read()
                if r.status == 429 or r.status >= 500:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                return r.status, data
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.conn = None
                time.sleep(0.2)
        raise RuntimeError(f"{method} {path}: no answer")

    def json(self, method, path, body=None, **kw):
        status, data = self.request(method, path, body, **kw)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {data[:300]!r}")
        return json.loads(data) if data else None

    def metrics(self):
        """apiserver_request_total summed by (verb, resource[/subresource]); long-running excluded."""
        status, data = self.request("GET", "/metrics")
        out = {}
        for line in data.decode().splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels, value = line.rsplit(" ", 1)
            lab = {}
            for part in labels[len("apiserver_request_total{"):-1].split('",'):
                k, _, v = part.partition('="')
                lab[k] = v.rstrip('"')
            res = lab.get("resource", "")
            if not res:
                continue  # non-resource URLs (/metrics, /healthz, ...)
            if lab.get("subresource"):
                res += "/" + lab["subresource"]
            if lab.get("group"):
                res += "." + lab["group"]
            key = f"{lab['verb']} {res}"
            out[key] = out.get(key, 0) + float(value)
        return out

    def cpu_profile(self, seconds: int, out: Path):
        """kube-apiserver's own CPU profile (Go's pprof) over the next `seconds`, written to `out`, in a
        thread; the caller joins it."""

        def run():
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=seconds + 60)
            try:
                c.request("GET", f"/debug/pprof/profile?seconds={seconds}")
                r = c.getresponse()
                data = r.read()
                if r.status != 200:
                    log(f"kube-apiserver's profile: {r.status} {data[:200]!r}")
                    return
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data)
            finally:
                c.close()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def watch(self, path, on_event, stop: threading.Event, resource):
        """List then watch `path` in a thread; calls on_event(type, obj) for every change."""

        def run():
            while not stop.is_set():
                lst = self.json("GET", path, verb="LIST", resource=resource)
                for o in lst["items"]:
                    on_event("ADDED", o)
                rv = lst["metadata"]["resourceVersion"]
                self.count("WATCH", resource)
                c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx)
                try:
                    c.request("GET", f"{path}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true",
                              headers={"Accept": "application/json"})
                    r = c.getresponse()
                    while not stop.is_set():
                        line = r.readline()
                        if not line:
                            break
                        ev = json.loads(line)
                        if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            on_event(ev["type"], ev["object"])
                except (OSError, http.client.HTTPException):
                    pass
                finally:
                    c.close()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t


def diff(after, before):
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0}


# ---------------------------------------------------------------------------------------------
# Cluster, operators, process sampling
# ---------------------------------------------------------------------------------------------

class ClusterMixup(Exception):
    pass


class Cluster:
    """The generated project's local cluster (`cargo run --example envtest -- local-cluster KUBECONFIG`):
    etcd, kube-apiserver, controller-manager, scheduler, kwok with fake nodes. Run from the project
    directory, it installs the project's CRDs (config/crd/bases) before it writes the kubeconfig.
    Stopped with SIGINT."""

    def __init__(self, tmp: Path, extra_pods: int, profile: str, feature_gates=()):
        self.kubeconfig = tmp / "kubeconfig"
        example = RUST_BIN / "envtest"
        env = dict(os.environ, KUBEBUILDER_ASSETS=assets(), **CLUSTER_PROFILES[profile])
        if feature_gates:
            # kube-apiserver's feature gates, added to its flags as the drills add them
            gates = " --feature-gates=" + ",".join(f"{g}=true" for g in feature_gates)
            env["ENVTEST_KUBE_APISERVER_FLAGS"] = (env.get("ENVTEST_KUBE_APISERVER_FLAGS", "") + gates).strip()
        self.log = open(tmp / "cluster.log", "w")
        self.proc = subprocess.Popen([str(example), "local-cluster", str(self.kubeconfig)], cwd=RUST_DIR,
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while not self.kubeconfig.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                die(f"the local cluster did not start; see {tmp / 'cluster.log'}")
            time.sleep(0.2)
        self.kube = Kube(self.kubeconfig, tmp)
        try:
            self.wait_served()
            # a fresh etcd: no namespace of ours, no Memcached anywhere
            if self.kube.json("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}")["items"]:
                raise ClusterMixup("Memcached objects exist in a fresh cluster")
            self.kube.json("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
            self.add_nodes(extra_pods)
        except (ClusterMixup, RuntimeError):
            self.stop()
            raise

    def wait_served(self):
        """The CRD is Established before the kubeconfig is written, but the apiserver may still answer
        404 for its group for a moment."""
        deadline = time.monotonic() + 60
        while self.kube.request("GET", cr_path())[0] != 200:
            if time.monotonic() > deadline:
                die(f"{PLURAL}.{GROUP} is not served")
            time.sleep(0.2)

    def add_nodes(self, pods):
        """The local cluster has 3 fake nodes of 110 pods: add kwok nodes so `pods` fit."""
        n = max(0, -(-(pods - 300) // 1000))
        for i in range(n):
            res = {"cpu": "1000", "memory": "4Ti", "pods": "1000"}
            self.kube.json("POST", "/api/v1/nodes", {
                "metadata": {"name": f"bench-node-{i}", "annotations": {"kwok.x-k8s.io/node": "fake"},
                             "labels": {"type": "kwok"}},
                "status": {"capacity": res, "allocatable": res}})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            nodes = self.kube.json("GET", "/api/v1/nodes")["items"]
            ok = all(any(c["type"] == "Ready" and c["status"] == "True"
                         for c in n.get("status", {}).get("conditions", []))
                     and not n.get("spec", {}).get("taints") for n in nodes)
            if ok and len(nodes) >= 3 + n:
                return
            time.sleep(0.5)
        die("extra fake nodes did not become Ready")

    def kubectl(self, *args):
        return sh(["kubectl", "--kubeconfig", str(self.kubeconfig), *args])

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Sampler:
    """Polls /proc/PID for RSS (VmRSS, VmHWM), its anonymous part (RssAnon: the heap and stacks, the
    process's own) and CPU time (utime+stime). The rest of RSS is file pages, nearly all the binary's
    code: the page cache holds them once for every process that runs the same file."""

    def __init__(self, pid):
        self.pid = pid
        self.peak = 0
        self.peak_anon = 0
        self.file = 0
        self.stop = threading.Event()
        self.tck = os.sysconf("SC_CLK_TCK")
        threading.Thread(target=self.run, daemon=True).start()

    def rss(self):
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines())
            return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024
        except (OSError, KeyError):
            return 0, 0

    def cpu(self):
        try:
            f = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / self.tck
        except OSError:
            return 0.0

    def split(self):
        """(RssAnon, RssFile) in bytes."""
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines())
            return int(fields["RssAnon"].split()[0]) * 1024, int(fields["RssFile"].split()[0]) * 1024
        except (OSError, KeyError):
            return 0, 0

    def run(self):
        while not self.stop.is_set():
            rss, hwm = self.rss()
            self.peak = max(self.peak, rss, hwm)
            anon, file = self.split()
            self.peak_anon = max(self.peak_anon, anon)
            self.file = max(self.file, file)
            time.sleep(0.25)

    def reset_peak(self):
        self.peak = self.rss()[0]


class NetSampler:
    """Bytes each process received and sent over TCP: the kernel's count per connection (tcpi_bytes_received,
    tcpi_bytes_sent, as `ss -tinp` shows them, TLS and HTTP/2 framing included), sampled every second and
    summed over every connection the process had. For an operator nearly all of it is its connections to
    kube-apiserver: the watch events, the lists and the answers to its requests. (`rchar` in /proc/PID/io
    does not count it: the Rust runtime reads sockets with recv(2), which it leaves out.) A connection
    closed within a second of its last sample loses what it received in that second."""

    def __init__(self, pids):
        self.pids = set(pids)
        self.conns = {}  # (pid, local, peer) -> (received, sent), the latest sample
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.sample()
        threading.Thread(target=self.run, daemon=True).start()

    def sample(self):
        out = sh(["ss", "-tinpH"], check=False).stdout or ""
        found = {}
        owners = []
        for line in out.splitlines():
            if not line.startswith((" ", "\t")):
                parts = line.split()
                pids = {int(x) for x in re.findall(r"pid=(\d+)", line)} & self.pids
                owners = [(pid, parts[3], parts[4]) for pid in pids] if len(parts) >= 5 else []
                continue
            received = re.search(r"bytes_received:(\d+)", line)
            sent = re.search(r"bytes_sent:(\d+)", line)
            for key in owners:
                found[key] = (int(received.group(1)) if received else 0, int(sent.group(1)) if sent else 0)
            owners = []
        with self.lock:
            for key, (received, sent) in found.items():
                old = self.conns.get(key, (0, 0))
                self.conns[key] = (max(old[0], received), max(old[1], sent))

    def run(self):
        while not self.stop.wait(1.0):
            self.sample()

    def totals(self, pid):
        """(received, sent) bytes of pid's connections so far."""
        self.sample()
        with self.lock:
            conns = [v for (p, _, _), v in self.conns.items() if p == pid]
        return sum(r for r, _ in conns), sum(s for _, s in conns)


def descendants(pid):
    """The PIDs of pid's children, their children, and so on."""
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def cluster_cpu(pid):
    """CPU seconds (utime + stime) used so far by each program of the cluster started as pid, by name
    (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok: what the operator's requests
    cost the cluster shows here)."""
    tck, total = os.sysconf("SC_CLK_TCK"), {}
    for child in descendants(pid):
        try:
            stat = Path(f"/proc/{child}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        total[name] = total.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tck
    return total


def start_operator(name, cluster: Cluster, tmp: Path):
    """The operator's processes: one, or for a sharded one (SHARDED) its replicas, each with `--sharding`
    and a log of its own."""
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig), RUST_LOG="info",
               MEMCACHED_IMAGE=IMAGE)  # as config/manager/manager.yaml sets it
    if name in SHARDED:
        return start_replicas(name, SHARDED[name], env, tmp)
    logf = open(tmp / f"{name}.log", "w")
    if name in ("go", "go-16"):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(GO_CACHE / "crd.yaml"))
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}")
        cluster.wait_served()
        binary = GO_CACHE / ("manager-16-workers" if name == "go-16" else "manager")
        cmd = [str(binary), "--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=0"]
    else:
        cmd = [str(rust_manager(name)), "--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=0"]
        # E.g. `heaptrack -o FILE`: a profiler that runs the operator as its child (RSS is then the
        # profiler's own, so such a run is for the profile only).
        cmd = shlex.split(os.environ.get("BENCH_WRAP_RUST", "")) + cmd
    # A session of its own, so that stopping it reaches a wrapped operator too (see `stop_operator`).
    p = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    time.sleep(3)  # informers synced (both list 0 objects at start)
    if p.poll() is not None:
        die(f"the {name} operator exited at start; see {tmp / (name + '.log')}")
    return [p]


# What a sharded replica logs once it works on its ranges, and which way it selects its objects.
SHARD_STARTED = "started ranges"
SHARD_FILTERING = {"server-side shard selector": "server-side", "filtering on the client": "client-side"}


def start_replicas(name, count, env, tmp: Path):
    """`count` replicas of the Rust operator with `--sharding`, their shard Leases in the bench namespace;
    returns once every one has started its ranges (all joined before the first object exists)."""
    cmd = [str(rust_manager("rust")), "--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=0",
           "--sharding"]
    cmd = shlex.split(os.environ.get("BENCH_WRAP_RUST", "")) + cmd
    procs, logs = [], []
    for i in range(count):
        log_path = tmp / f"{name}-{i}.log"
        logf = open(log_path, "w")
        procs.append(subprocess.Popen(cmd, env=dict(env, POD_NAMESPACE=NS), stdout=logf,
                                      stderr=subprocess.STDOUT, start_new_session=True))
        logs.append(log_path)
    def fail(msg):
        for p in procs:
            if p.poll() is None:
                stop_operator(p)
        die(msg + " (BENCH_KEEP_LOGS=1 keeps the logs)")

    deadline = time.monotonic() + 90
    while True:
        texts = [p.read_text() for p in logs]
        for p, path in zip(procs, logs):
            if p.poll() is not None:
                fail(f"a replica of {name} exited at start; see {path.name}")
        if all(SHARD_STARTED in t and any(k in t for k in SHARD_FILTERING) for t in texts):
            break
        if time.monotonic() > deadline:
            fail(f"the replicas of {name} did not all start their ranges within 90 s; see {name}-*.log")
        time.sleep(0.5)
    time.sleep(3)  # the ranges settled once all had joined; caches synced (nothing to list yet)
    return procs


def shard_filtering(procs, tmp: Path, name):
    """How the replicas selected their objects, as their logs say: server-side or client-side."""
    modes = set()
    for i in range(len(procs)):
        text = (tmp / f"{name}-{i}.log").read_text()
        modes |= {mode for needle, mode in SHARD_FILTERING.items() if needle in text}
    return ",".join(sorted(modes))


def stop_operator(proc):
    """SIGTERM to the operator's whole process group (a `BENCH_WRAP_RUST` wrapper and its child), then
    SIGKILL after 20 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


# ---------------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------------

def cr_path(name=""):
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}"
    return f"{base}/{name}" if name else base


def deployment_for(cr):
    """What the baseline writes: the Deployment both operators make (owned by the CR)."""
    name = cr["metadata"]["name"]
    size = (cr.get("spec") or {}).get("size", 1)
    labels = {"app.kubernetes.io/name": "memcached-operator", "app.kubernetes.io/instance": name,
              "app.kubernetes.io/managed-by": "bench"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": labels, "ownerReferences": [{
            "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": name, "uid": cr["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"replicas": size, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{
                         "name": "memcached", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                         "command": ["memcached", "--memory-limit=64", "-o", "modern", "-v"],
                         "ports": [{"containerPort": 11211, "name": "memcached"}],
                         "securityContext": {"runAsNonRoot": True, "runAsUser": 1001,
                                             "allowPrivilegeEscalation": False,
                                             "capabilities": {"drop": ["ALL"]}}}]}}}}


class State:
    """Watched CRs and Deployments; `converged(size)` when every CR is Available=True and its
    Deployment has `size` ready replicas."""

    def __init__(self, n):
        self.n = n
        self.available = {}
        self.ready = {}
        self.written = {}  # Deployment name -> when its spec.replicas was first seen at the target size
        self.target = 1
        # Deployments with `target` ready replicas out of `target`, and when all N first were: the
        # cluster's share ends there; what follows until convergence is the operator's status report.
        self.at_target = set()
        self.all_ready_at = None
        self.cv = threading.Condition()

    def aim(self, size):
        """A new phase: from now on `size` replicas are the goal (call with `cv` held)."""
        self.target = size
        self.at_target = {name for name, (ready, want) in self.ready.items() if ready == want == size}
        self.all_ready_at = None

    def on_cr(self, typ, o):
        status = o.get("status") or {}
        conds = status.get("conditions") or []
        ok = any(c.get("type") == "Available" and c.get("status") == "True" for c in conds)
        # A status that says which spec it describes must describe the current one (the Go operator's
        # has no observedGeneration; the Rust operator writes it once the Deployment is complete).
        seen = status.get("observedGeneration")
        ok = ok and (seen is None or seen == o["metadata"].get("generation"))
        with self.cv:
            self.available[o["metadata"]["name"]] = ok and typ != "DELETED"
            self.cv.notify_all()

    def on_dep(self, typ, o):
        st = o.get("status") or {}
        with self.cv:
            name = o["metadata"]["name"]
            if (o.get("spec") or {}).get("replicas") == self.target and typ != "DELETED":
                self.written.setdefault((self.target, name), time.monotonic())
            ready = (st.get("readyReplicas") or 0) if typ != "DELETED" else -1
            want = (o.get("spec") or {}).get("replicas")
            self.ready[name] = (ready, want)
            if ready == want == self.target:
                self.at_target.add(name)
                if len(self.at_target) >= self.n and self.all_ready_at is None:
                    self.all_ready_at = time.monotonic()
            else:
                self.at_target.discard(name)
            self.cv.notify_all()

    def converged(self, size):
        avail = sum(1 for v in self.available.values() if v)
        assert size == self.target, "aim() at a size before waiting for it"
        ready = len(self.at_target)
        return avail >= self.n and ready >= self.n, avail, ready

    def wait(self, size, timeout, t0):
        with self.cv:
            while True:
                done, avail, ready = self.converged(size)
                if done:
                    return time.monotonic() - t0
                left = t0 + timeout - time.monotonic()
                if left <= 0:
                    log(f"timeout: {avail}/{self.n} Available, {ready}/{self.n} Deployments ready")
                    return None
                self.cv.wait(min(left, 5))


def create_foreign(kube, n):
    """`n` Deployments of nobody's (0 replicas: no Pods) in FOREIGN_NS."""
    log(f"creating {n} foreign Deployments in {FOREIGN_NS}")
    kube.json("POST", "/api/v1/namespaces", {"metadata": {"name": FOREIGN_NS}})

    def create(i):
        labels = {"app": f"foreign-{i:05d}"}
        kube.json("POST", f"/apis/apps/v1/namespaces/{FOREIGN_NS}/deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": f"foreign-{i:05d}", "labels": labels},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": IMAGE}]}}}})

    parallel(create, range(n))


def parallel(fn, items, workers=16):
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(fn, items))


class Baseline:
    """The plain client: for each CR, create its Deployment; when it is ready, patch the CR status."""

    def __init__(self, kube: Kube, state: State):
        self.kube, self.state = kube, state
        self.marked = set()
        self.pending = None
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(16)

    def on_dep(self, typ, o):
        name = o["metadata"]["name"]
        st = o.get("status") or {}
        if (st.get("readyReplicas") or 0) >= 1 and name not in self.marked:
            with self.lock:
                if name in self.marked:
                    return
                self.marked.add(name)
            self.pool.submit(self.mark, name)

    def mark(self, name):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.kube.json("PATCH", cr_path(name) + "/status", {"status": {"conditions": [{
            "type": "Available", "status": "True", "reason": "Reconciling", "message": "ready",
            "lastTransitionTime": now}]}}, ctype="application/merge-patch+json",
            verb="PATCH", resource=f"{PLURAL}/status.{GROUP}")
        # the watch of CRs sees it too; mark locally as well so the state is right without it
        self.state.on_cr("MODIFIED", {"metadata": {"name": name}, "status": {"conditions": [
            {"type": "Available", "status": "True"}]}})

    def create(self, crs):
        parallel(lambda cr: self.kube.json("POST", f"/apis/apps/v1/namespaces/{NS}/deployments",
                                           deployment_for(cr), verb="POST", resource="deployments.apps"),
                 crs)

    def scale(self, names, size):
        parallel(lambda n: self.kube.json("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/{n}",
                                          {"spec": {"replicas": size}}, ctype="application/merge-patch+json",
                                          verb="PATCH", resource="deployments.apps"), names)


def trial(operator, n, idle, profile, timeout=900):
    """One run: fresh cluster, one operator (or the baseline), create N CRs, scale 1->2, idle."""
    log(f"=== trial {operator} N={n} cluster={profile}")
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        tmp = Path(tmp)
        gates = (SHARD_GATE,) if operator in SHARDED and SHARD_GATE_ON else ()
        for attempt in range(3):
            try:
                cluster = Cluster(tmp, extra_pods=2 * n + 50, profile=profile, feature_gates=gates)
                break
            except (ClusterMixup, RuntimeError) as e:
                log(f"cluster start failed ({e}); starting another")
                for f in tmp.iterdir():
                    if f.is_file():
                        f.unlink()
        else:
            die("the local cluster did not start cleanly three times")
        kube = cluster.kube
        procs = []
        stop = threading.Event()
        try:
            if FOREIGN:
                create_foreign(kube, FOREIGN)
            state = State(n)
            baseline = None
            if operator == "baseline":
                baseline = Baseline(kube, state)
                # The baseline writes its own status: the Rust CRD (installed by the cluster) has one.
            else:
                procs = start_operator(operator, cluster, tmp)
            kube.watch(cr_path(), state.on_cr, stop, f"{PLURAL}.{GROUP}")

            def on_dep(typ, o):
                state.on_dep(typ, o)
                if baseline:
                    baseline.on_dep(typ, o)

            kube.watch(f"/apis/apps/v1/namespaces/{NS}/deployments", on_dep, stop, "deployments.apps")
            time.sleep(1)
            # One sampler per process of the operator (three for rust-3).
            samplers = [Sampler(p.pid) for p in procs]
            net = NetSampler([p.pid for p in procs]) if procs else None
            names = [f"memcached-{i:04d}" for i in range(n)]
            out = {"operator": operator, "n": n, "size": [1, 2], "cluster": profile, "phases": {}}
            if gates:
                out["feature_gates"] = list(gates)
            if FOREIGN:
                out["foreign_deployments"] = FOREIGN
            if operator in SHARDED:
                out["shard_filtering"] = shard_filtering(procs, tmp, operator)

            def phase(name, action, size, wait=True):
                m0 = kube.metrics()
                own0 = dict(kube.requests)
                c0 = [x.cpu() for x in samplers]
                b0 = [net.totals(x.pid) for x in samplers]
                k0 = cluster_cpu(cluster.proc.pid)
                for x in samplers:
                    x.reset_peak()
                with state.cv:
                    state.aim(size)
                profile = None
                if PPROF_SECONDS and wait:
                    profile = kube.cpu_profile(PPROF_SECONDS, RESULTS / "pprof" / f"{operator}-{n}-{name}.pb.gz")
                t0 = time.monotonic()
                action()
                wall = state.wait(size, timeout, t0) if wait else None
                if not wait:
                    time.sleep(idle)
                m1 = kube.metrics()
                k1 = cluster_cpu(cluster.proc.pid)
                own = diff(kube.requests, own0)
                req = diff(m1, m0)
                # the harness's own requests (creates, size patches, its watches) are not the operator's
                for (verb, res), cnt in own.items():
                    k = f"{verb} {res}"
                    if k in req:
                        req[k] = max(0, req[k] - cnt)
                if profile:
                    profile.join()
                seen = [v for (size_, _), v in state.written.items() if size_ == size]
                ph = {"wall": wall, "requests": req,
                      # the operator's own part: until every Deployment exists with `size` replicas
                      "deployments_written": (max(seen) - t0) if wait and len(seen) >= n else None,
                      # ... and until every Deployment had all its Pods ready (the cluster's share ends)
                      "pods_ready": (state.all_ready_at - t0) if wait and state.all_ready_at else None,
                      "harness_requests": {f"{v} {r}": c for (v, r), c in own.items()},
                      "cluster_cpu_seconds": {k: round(v - k0.get(k, 0.0), 2) for k, v in sorted(k1.items())}}
                if samplers:
                    # Each process's figures; for several, the operator's CPU is their sum and its
                    # peak RSS the sum of their peaks.
                    reps = []
                    for x, cpu0, (rx0, tx0) in zip(samplers, c0, b0):
                        rx, tx = net.totals(x.pid)
                        reps.append({"cpu_seconds": x.cpu() - cpu0, "peak_rss_bytes": x.peak,
                                     "bytes_received": rx - rx0, "bytes_sent": tx - tx0})
                    ph["cpu_seconds"] = sum(r["cpu_seconds"] for r in reps)
                    ph["peak_rss_bytes"] = sum(r["peak_rss_bytes"] for r in reps)
                    ph["replicas"] = reps
                out["phases"][name] = ph
                log(f"{operator} N={n} {name}: wall={wall} writes={summarize(req)}")
                return wall

            def create():
                crs = parallel(lambda nm: kube.json(
                    "POST", cr_path(), {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                                        "metadata": {"name": nm, "namespace": NS},
                                        # containerPort: the Go CRD requires it; the Rust CRD has none
                                        # (the apiserver prunes it)
                                        "spec": {"size": 1, "containerPort": 11211}},
                    verb="POST", resource=f"{PLURAL}.{GROUP}"), names)
                if baseline:
                    baseline.create(crs)

            def scale():
                parallel(lambda nm: kube.json("PATCH", cr_path(nm), {"spec": {"size": 2}},
                                              ctype="application/merge-patch+json",
                                              verb="PATCH", resource=f"{PLURAL}.{GROUP}"), names)
                if baseline:
                    baseline.scale(names, 2)

            if phase("create", create, 1) is None:
                out["timeout"] = "create"
            elif phase("scale", scale, 2) is None:
                out["timeout"] = "scale"
            else:
                phase("idle", lambda: None, 2, wait=False)
            if samplers:
                # Over the whole trial, per process (VmHWM: its peak RSS since it started); the operator's
                # totals are their sums.
                reps = []
                for x in samplers:
                    rx, tx = net.totals(x.pid)
                    reps.append({"peak_rss_bytes": x.rss()[1], "cpu_seconds": x.cpu(),
                                 "peak_rss_anon_bytes": x.peak_anon, "rss_file_bytes": x.file,
                                 "bytes_received": rx, "bytes_sent": tx})
                    x.stop.set()
                net.stop.set()
                out["replicas"] = reps
                out["peak_rss_bytes_total"] = sum(r["peak_rss_bytes"] for r in reps)
                out["cpu_seconds_total"] = sum(r["cpu_seconds"] for r in reps)
            return out
        finally:
            stop.set()
            for p in procs:
                stop_operator(p)
            cluster.stop()
            if os.environ.get("BENCH_KEEP_LOGS"):
                keep = RESULTS / "logs" / f"{operator}-{n}-{int(time.time())}"
                keep.mkdir(parents=True, exist_ok=True)
                for f in tmp.glob("*.log"):
                    shutil.copy(f, keep)


def is_write(key):
    return key.split(" ", 1)[0] in WRITE_VERBS


def requests_of(phase, operator):
    """apiserver requests of a phase without the harness's own (CR creates, size patches, its watches);
    for the plain client, its Deployment and status writes are put back: they are its work."""
    req = dict(phase["requests"])
    if operator == "baseline":
        for k, v in phase["harness_requests"].items():
            if k.split(" ", 1)[1] in ("deployments.apps", f"{PLURAL}/status.{GROUP}"):
                req[k] = req.get(k, 0) + v
    return req


def operator_writes(phase, operator):
    """Writes the operator (or the plain client) makes on its own objects: the CRs (Go's finalizer),
    their status and the Deployments (their `scale` included). Events are counted apart
    (`event_writes`): the controller-manager and the scheduler write events too."""
    req = requests_of(phase, operator)
    tot = 0
    for k, v in req.items():
        res = k.split(" ", 1)[1]
        if is_write(k) and (res.startswith(PLURAL) or res in ("deployments.apps", "deployments/scale.apps")):
            tot += v
    return tot


def event_writes(phase):
    return sum(v for k, v in phase["requests"].items() if is_write(k) and k.split(" ", 1)[1].startswith("events"))


def cluster_writes(phase):
    return sum(v for k, v in phase["requests"].items() if is_write(k))


def summarize(req):
    return {k: int(v) for k, v in sorted(req.items()) if k.split()[0] in WRITE_VERBS}


def cmd_run():
    ops = operators()
    # What the chosen operators need (the plain client needs only the local cluster).
    binaries = {"rust": rust_manager("rust"), "rust-1": rust_manager("rust-1"), "rust-3": rust_manager("rust"),
                "rust-labelled": rust_manager("rust-labelled"),
                **{op: rust_manager(op) for op in ("rust-base", "rust-alt") if op in ops},
                "go": GO_CACHE / "manager", "go-16": GO_CACHE / "manager-16-workers"}
    needed = [RUSTBUILDER, RUST_BIN / "envtest"] + [binaries[op] for op in ops if op in binaries]
    if not all(p.exists() for p in needed):
        die("run `python3 bench/bench.py prepare` (or `make bench`) first")
    if any(op != "baseline" for op in ops) and not shutil.which("ss"):
        die("`ss` is missing: the operators' network traffic is read with it (install iproute2)")
    assets()
    sizes = [int(x) for x in os.environ.get("BENCH_SIZES", "100,500,1000").split(",")]
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    idle = int(os.environ.get("BENCH_IDLE", "60"))
    profile = os.environ.get("BENCH_CLUSTER", "unlimited")
    if profile not in CLUSTER_PROFILES:
        die(f"BENCH_CLUSTER={profile}: one of {', '.join(CLUSTER_PROFILES)}")
    deadline = os.environ.get("BENCH_DEADLINE")  # HH:MM: start no trial after it
    RESULTS.mkdir(exist_ok=True)
    out_file = RESULTS / os.environ.get("BENCH_OUT", f"run-{time.strftime('%Y%m%d-%H%M%S')}.json")
    results = json.loads(out_file.read_text()) if out_file.exists() else {"trials": []}
    results["machine"] = machine()
    for r in range(runs):
        for n in sizes:
            for op in (ops if r % 2 == 0 else list(reversed(ops))):  # alternate the order
                if deadline and time.strftime("%H:%M") >= deadline:
                    log("deadline reached, stopping")
                    out_file.write_text(json.dumps(results, indent=2))
                    return
                res = trial(op, n, idle, profile)
                res["run"] = r
                results["trials"].append(res)
                out_file.write_text(json.dumps(results, indent=2))
    log("wrote", out_file)


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
    return {"cpus": os.cpu_count(), "cpu": cpu, "mem_kib": int(mem), "kernel": os.uname().release}


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

def fmt_range(xs, f="{:.1f}"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    med = statistics.median(xs)
    if len(xs) == 1:
        return f.format(med)
    return f"{f.format(med)} ({f.format(min(xs))}–{f.format(max(xs))})"


# Rows of the report, in order.
OPERATORS = {"rust": "rust (16 workers: default)", "rust-1": "rust, 1 worker",
             "rust-labelled": "rust, labelled Deployment cache",
             "rust-base": "rust, the BENCH_RUST_BASE build", "rust-alt": "rust, the BENCH_RUST_ALT build",
             "rust-3": "rust, 3 sharded replicas (RSS, CPU: their sum)", "go": "go (1 worker: default)",
             "go-16": "go, 16 workers", "baseline": "plain client"}


def per_replica(by, cluster):
    """The table of each process of an operator (trials that recorded them): a sharded operator's replicas
    next to one unsharded replica of the Rust operator at the same N."""
    rows = [(n, op) for n in sorted({k[1] for k in by if k[0] == cluster}) for op in OPERATORS
            if any(t.get("replicas") for t in by.get((cluster, n, op), []))]
    if not rows:
        return []
    lines = ["\nPer process of the operator, over the whole trial: each replica's peak RSS, CPU and bytes received "
             "and sent over TCP (its connections to kube-apiserver: watch events, lists, answers), as median "
             "(lowest–highest) over replicas and runs; \"largest ÷ rust\" divides the largest replica's by one "
             "unsharded Rust replica's (median) at the same N:\n",
             "| N | operator | processes | shard selection | peak RSS (MiB) | largest ÷ rust | of which anonymous "
             "(MiB) | file pages (MiB) | CPU (s) | largest ÷ rust | received (MiB) | largest ÷ rust | sent (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, op in rows:
        ts = [t for t in by[(cluster, n, op)] if t.get("replicas")]
        one = [r for t in by.get((cluster, n, "rust"), []) for r in t.get("replicas", [])]

        def cells(key, scale):
            xs = [r[key] / scale for t in ts for r in t["replicas"]]
            ref = [r[key] / scale for r in one]
            ok = op != "rust" and xs and ref and statistics.median(ref) > 0
            ratio = f"{100 * max(xs) / statistics.median(ref):.0f} %" if ok else "—"
            return [fmt_range(xs, "{:.1f}" if key != "cpu_seconds" else "{:.2f}"), ratio]

        procs = sorted({len(t["replicas"]) for t in ts})
        selection = ", ".join(sorted({t["shard_filtering"] for t in ts if t.get("shard_filtering")})) or "—"
        row = [str(n), OPERATORS[op].split(" (RSS")[0], "/".join(map(str, procs)), selection]
        row += cells("peak_rss_bytes", 2**20)
        # Runs before the split was recorded have no anonymous and file figures.
        split = all("peak_rss_anon_bytes" in r for t in ts for r in t["replicas"])
        row += [cells(k, 2**20)[0] if split else "—" for k in ("peak_rss_anon_bytes", "rss_file_bytes")]
        row += cells("cpu_seconds", 1) + cells("bytes_received", 2**20)
        row.append(cells("bytes_sent", 2**20)[0])
        lines.append("| " + " | ".join(row) + " |")
    return lines


def cmd_report():
    files = [Path(p) for p in sys.argv[2:]] or sorted(RESULTS.glob("run-*.json"))
    trials = [t for f in files for t in json.loads(f.read_text())["trials"]]
    if not trials and not (RESULTS / BUILD_TIMES).exists():
        die("no results: run `python3 bench/bench.py run` (or `build-times`) first")
    by = {}
    for t in trials:
        by.setdefault((t.get("cluster", "default"), t["n"], t["operator"]), []).append(t)
    lines = []
    for cluster in sorted({k[0] for k in by}, key=lambda c: c != "unlimited"):
        lines.append(f"\n#### Cluster: {cluster}\n")
        lines.append("| N | operator | runs | create (s) | × plain | Deployments written (s) | scale (s) | × plain | "
                     "Deployments scaled (s) | own writes/CR: create | scale | events/CR (create+scale) | "
                     "idle: own writes | idle: events | peak RSS (MiB) | RSS growth | CPU (s) |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        # Peak RSS against the operator's own at the smallest N measured: linear growth would be N/N0.
        rss_of = lambda ts: [t["peak_rss_bytes_total"] / 2**20 for t in ts if t.get("peak_rss_bytes_total")]
        smallest = {}
        for (c, n, op), ts in sorted(by.items()):
            if c == cluster and rss_of(ts) and op not in smallest:
                smallest[op] = (n, statistics.median(rss_of(ts)))
        for n in sorted({k[1] for k in by if k[0] == cluster}):
            base = by.get((cluster, n, "baseline"), [])
            walls = lambda ts, name: [t["phases"][name]["wall"] for t in ts
                                      if name in t["phases"] and t["phases"][name]["wall"]]
            bc = statistics.median(walls(base, "create")) if walls(base, "create") else None
            bs = statistics.median(walls(base, "scale")) if walls(base, "scale") else None
            for op in OPERATORS:
                ts = by.get((cluster, n, op))
                if not ts:
                    continue
                ph = lambda name: [t["phases"][name] for t in ts if name in t["phases"]]
                cw, sw = walls(ts, "create"), walls(ts, "scale")
                ratio = lambda xs, b: fmt_range([x / b for x in xs], "{:.2f}") if b and xs else "—"
                wc = [operator_writes(p, op) / n for p in ph("create")]
                ws = [operator_writes(p, op) / n for p in ph("scale")]
                ev = [(event_writes(t["phases"]["create"]) + event_writes(t["phases"]["scale"])) / n
                      for t in ts if "scale" in t["phases"]]
                wi = [operator_writes(p, op) for p in ph("idle")]
                ei = [event_writes(p) for p in ph("idle")]
                rss = rss_of(ts)
                n0, rss0 = smallest.get(op, (n, None))
                growth = f"×{statistics.median(rss) / rss0:.2f} (N ×{n / n0:g})" if rss and rss0 and n > n0 else "—"
                cpu = [t["cpu_seconds_total"] for t in ts if t.get("cpu_seconds_total") is not None]
                timeout = sum(1 for t in ts if t.get("timeout"))
                name = OPERATORS[op]
                if timeout:
                    name += f" ({timeout} timed out)"
                dw = lambda name: fmt_range([p.get("deployments_written") for p in ph(name)])
                lines.append(f"| {n} | {name} | {len(ts)} | {fmt_range(cw)} | {ratio(cw, bc)} | {dw('create')} | "
                             f"{fmt_range(sw)} | {ratio(sw, bs)} | {dw('scale')} | {fmt_range(wc, '{:.2f}')} | {fmt_range(ws, '{:.2f}')} | "
                             f"{fmt_range(ev, '{:.2f}')} | {fmt_range(wi, '{:.0f}')} | {fmt_range(ei, '{:.0f}')} | "
                             f"{fmt_range(rss)} | {growth} | {fmt_range(cpu)} |")
        lines += per_replica(by, cluster)
        # Where each phase's time goes: the operator's writes, then the cluster's Pods, then the report.
        lines.append("\nWhere the time goes (medians, s): until every Deployment was written, until every Pod was "
                     "ready, until converged (the status reported it):\n")
        lines.append("| N | operator | create: written | Pods ready | converged | scale: written | Pods ready | "
                     "converged |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for n in sorted({k[1] for k in by if k[0] == cluster}):
            for op in OPERATORS:
                ts = by.get((cluster, n, op))
                if not ts:
                    continue
                cells = []
                for name in ("create", "scale"):
                    for key in ("deployments_written", "pods_ready", "wall"):
                        xs = [t["phases"][name].get(key) for t in ts if name in t["phases"]]
                        xs = [x for x in xs if x is not None]
                        cells.append(f"{statistics.median(xs):.1f}" if xs else "—")
                lines.append(f"| {n} | {OPERATORS[op]} | " + " | ".join(cells) + " |")
        # What each phase cost the cluster's programs in CPU (trials that recorded it).
        programs = ("kube-apiserver", "etcd", "kube-controller", "kube-scheduler", "kwok")
        costed = [(n, op) for n in sorted({k[1] for k in by if k[0] == cluster}) for op in OPERATORS
                  if any("cluster_cpu_seconds" in p for t in by.get((cluster, n, op), [])
                         for p in t["phases"].values())]
        if costed:
            lines.append("\nCPU seconds per phase (medians): the cluster's programs, then the operator's own; "
                         "the plain client's row is what the same work costs the cluster without an operator:\n")
            head = " | ".join(f"{ph}: {prog.replace('kube-controller', 'controller-manager')}"
                              for ph in ("create", "scale") for prog in programs + ("operator",))
            lines.append(f"| N | operator | {head} |")
            lines.append("|---|---|" + "---|" * (2 * (len(programs) + 1)))
            for n, op in costed:
                cells = []
                for ph in ("create", "scale"):
                    phases = [t["phases"][ph] for t in by[(cluster, n, op)] if ph in t["phases"]]
                    for prog in programs:
                        xs = [p["cluster_cpu_seconds"].get(prog, 0.0) for p in phases if "cluster_cpu_seconds" in p]
                        cells.append(f"{statistics.median(xs):.1f}" if xs else "—")
                    xs = [p["cpu_seconds"] for p in phases if p.get("cpu_seconds") is not None]
                    cells.append(f"{statistics.median(xs):.1f}" if xs else "—")
                lines.append(f"| {n} | {OPERATORS[op]} | " + " | ".join(cells) + " |")
        # requests by verb and resource, the largest N, first run of each operator
        nmax = max(k[1] for k in by if k[0] == cluster)
        lines.append(f"\nRequests by verb and resource at N={nmax} (first run; the harness's own requests "
                     "removed; includes controller-manager, scheduler and kwok):\n")
        ops = [op for op in OPERATORS if by.get((cluster, nmax, op))]
        keys = sorted({k for op in ops for p in by[(cluster, nmax, op)][0]["phases"].values()
                       for k, v in requests_of(p, op).items() if v})
        label = {"rust": "Rust", "rust-1": "Rust 1w", "rust-3": "Rust ×3", "rust-labelled": "Rust lab.",
                 "rust-base": "Rust base", "rust-alt": "Rust alt", "go": "Go", "go-16": "Go 16w",
                 "baseline": "plain"}
        lines.append("| verb resource | " + " | ".join(f"{label[op]} {ph}" for op in ops
                                                       for ph in ("create", "scale", "idle")) + " |")
        lines.append("|---|" + "---|" * (3 * len(ops)))
        for k in keys:
            row = []
            for op in ops:
                for ph in ("create", "scale", "idle"):
                    p = by[(cluster, nmax, op)][0]["phases"].get(ph)
                    row.append(str(int(requests_of(p, op).get(k, 0))) if p else "—")
            lines.append(f"| {k} | " + " | ".join(row) + " |")
    bt = RESULTS / BUILD_TIMES
    if bt.exists():
        b = json.loads(bt.read_text())
        lines.append("\n#### Scaffolding and builds\n")
        lines.append("| what | rustbuilder / cargo | kubebuilder / go |")
        lines.append("|---|---|---|")
        s = b["scaffold"]
        for k in ("init", "create_api"):
            lines.append(f"| `{k.replace('_', ' ')}` | {fmt_range(s['rustbuilder'][k]['all'], '{:.2f}')} s | "
                         f"{fmt_range(s['kubebuilder'][k]['all'], '{:.2f}')} s |")
        bb = b.get("build") or {}
        if not bb:
            lines.append("| builds | not measured in this run | not measured in this run |")
    if bt.exists() and bb:
        cold = lambda x: f"{x['cold']:.1f} s" if "cold" in x else "not measured"
        lines.append(f"| cold build (`cargo build --release` / `go build`) | {cold(bb['cargo_release'])} | "
                     f"{cold(bb['go'])} |")
        lines.append(f"| incremental after touching the controller (release / go build) | "
                     f"{fmt_range(bb['cargo_release']['incremental']['all'])} s | "
                     f"{fmt_range(bb['go']['incremental']['all'])} s |")
        lines.append(f"| cold build, `cargo build` (debug) | {cold(bb['cargo_debug'])} | — |")
        lines.append(f"| incremental, `cargo build` (debug) | {fmt_range(bb['cargo_debug']['incremental']['all'])} s | — |")
        lines.append(f"| manager binary | {bb['cargo_release'].get('binary_bytes', 0) / 2**20:.1f} MiB | "
                     f"{bb['go']['binary_bytes'] / 2**20:.1f} MiB |")
        lines.append(f"\nBuild mode: {bb.get('mode', 'cold')}.")
    kinds = json.loads(bt.read_text()).get("kinds", {}) if bt.exists() else {}
    ns = sorted(int(n) for n in kinds if n.isdigit())
    if ns:
        lines.append("\n#### Builds as the project grows (plain kinds)\n")
        lines.append("| kinds | what | rustbuilder / cargo | kubebuilder / go |")
        lines.append("|---|---|---|---|")
        rows = (
            ("cold", "cold build (`cargo build` / `go build`)"),
            ("build", "build of the project's own code, dependencies built"),
            ("test_build", "then the test build (`cargo test --no-run` / `go test -run '^$'`)"),
            ("rebuild", "rebuild after editing a controller"),
            ("test_rebuild", "test build after editing a controller"),
            ("manifests", "`make manifests` after editing an API type"),
        )
        for n in ns:
            figures = kinds[str(n)]
            for key, what in rows:
                cells = []
                for tool in ("rustbuilder", "kubebuilder"):
                    x = figures.get(tool, {}).get(key)
                    if x is None:
                        cells.append("not measured")
                    elif isinstance(x, dict):
                        cells.append(f"{fmt_range(x['all'])} s")
                    else:
                        cells.append(f"{x:.1f} s")
                lines.append(f"| {n} | {what} | " + " | ".join(cells) + " |")
        lines.append(f"\nBuild mode: {kinds.get('mode', 'cold')}; {kinds.get('reps', '?')} edit(s) per figure.")
    text = "\n".join(lines) + "\n"
    (RESULTS / "tables.md").write_text(text)
    print(text)
    if by:
        chart(by)


def chart(by):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is missing: `python3 -m pip install matplotlib` for docs/benchmarks-convergence.png")
        return
    cluster = "unlimited" if any(k[0] == "unlimited" for k in by) else "default"
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, phase in zip(axes, ("create", "scale")):
        for op, style in (("rust", "o-"), ("rust-1", "o:"), ("go", "s-"), ("go-16", "s:"), ("baseline", "^--")):
            ns = sorted(k[1] for k in by if k[0] == cluster and k[2] == op)
            xs, med, lo, hi = [], [], [], []
            for n in ns:
                w = [t["phases"][phase]["wall"] for t in by[(cluster, n, op)]
                     if phase in t["phases"] and t["phases"][phase]["wall"]]
                if w:
                    xs.append(n)
                    med.append(statistics.median(w))
                    lo.append(statistics.median(w) - min(w))
                    hi.append(max(w) - statistics.median(w))
            if xs:
                label = {"rust": "rustbuilder (Rust)", "rust-1": "rustbuilder, 1 worker", "go": "Kubebuilder (Go)",
                         "go-16": "Kubebuilder (Go), 16 workers", "baseline": "plain client"}[op]
                ax.errorbar(xs, med, yerr=[lo, hi], fmt=style, capsize=3, label=label)
        ax.set_title({"create": "create N Memcached (size 1)", "scale": "scale every CR 1 → 2"}[phase])
        ax.set_xlabel("N (custom resources)")
        ax.set_ylabel("seconds until converged")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    out = REPO / "docs/benchmarks-convergence.png"
    fig.savefig(out, dpi=110)
    log("wrote", out)


# ---------------------------------------------------------------------------------------------
# What one write costs the API server
# ---------------------------------------------------------------------------------------------

def memcached_status(size, generation):
    """The status the Rust operator applies once a rollout to `size` replicas is complete."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def condition(type_, status, reason, message):
        return {"type": type_, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": now, "observedGeneration": generation}

    return {"conditions": [condition("Available", "True", "PodsAvailable", "At least one Pod serves"),
                           condition("Progressing", "False", "RolledOut", "Pods run the latest template"),
                           condition("Degraded", "False", "AsExpected", "")],
            "observedGeneration": generation, "replicas": size, "readyReplicas": size,
            "selector": "app.kubernetes.io/name=memcached-operator"}


def cmd_write_costs():
    """What each kind of request the workload's phases make costs the cluster in CPU. Dry runs (`dryRun=All`)
    are decoded, defaulted, validated, admitted and get their managed fields computed, but are not
    stored: they start no watch event and no controller, so they compare the ways of making one write.
    Stored writes (each changes the object) add etcd, the watch events and what the cluster's
    controllers do about them (no operator runs). BENCH_WRITE_ROUNDS rounds (5) of BENCH_WRITES (1000)
    requests of each kind in turn over 16 connections, spread over 200 objects; each program's idle CPU
    over the same time is subtracted; the median round is reported. BENCH_WITHOUT_CRD_RULES=1 removes
    the CRD's CEL rules (`x-kubernetes-validations`) first, to show what they cost."""
    total = int(os.environ.get("BENCH_WRITES", "1000"))
    rounds = int(os.environ.get("BENCH_WRITE_ROUNDS", "5"))
    objects = 200
    manager = "memcached-operator"
    deployments = f"/apis/apps/v1/namespaces/{NS}/deployments"
    apply = {"ctype": "application/apply-patch+yaml"}
    merge = {"ctype": "application/merge-patch+json"}
    with tempfile.TemporaryDirectory(prefix="bench-writes-") as tmp:
        cluster = Cluster(Path(tmp), extra_pods=0, profile="unlimited")
        kube = cluster.kube
        try:
            # The objects as the scale phase finds them: CRs with a status, Deployments applied by the
            # operator's field manager (0 replicas: no Pods, so the cluster stays quiet).
            def setup(i):
                name = f"memcached-{i:04d}"
                cr = kube.json("POST", cr_path(), {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                                                   "metadata": {"name": name}, "spec": {"size": 1}})
                kube.json("PATCH", f"{cr_path(name)}/status?fieldManager={manager}&force=true",
                          {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name},
                           "status": memcached_status(1, 1)}, **apply)
                deployment = deployment_for(cr)
                deployment["spec"]["replicas"] = 0
                kube.json("PATCH", f"{deployments}/{name}?fieldManager={manager}&force=true", deployment, **apply)
                return cr

            if os.environ.get("BENCH_WITHOUT_CRD_RULES"):
                crd = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}"
                rules = "/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-validations"
                kube.json("PATCH", crd, [{"op": "remove", "path": rules}], ctype="application/json-patch+json")
                time.sleep(3)  # the API server has rebuilt its handler of the CRD
            crs = parallel(setup, range(objects))
            names = [cr["metadata"]["name"] for cr in crs]

            def scaled(cr):
                d = deployment_for(cr)
                d["spec"]["replicas"] = 2
                return d

            def status(name, value):
                return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name},
                        "status": memcached_status(value, value)}

            def new_deployment(i):
                d = scaled(crs[i])
                d["metadata"]["name"] = f"new-{names[i]}"
                return d

            def event(i):
                """What the Rust operator publishes when it creates a Deployment (events.k8s.io/v1)."""
                return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                        "metadata": {"name": f"{names[i]}.bench", "namespace": NS},
                        "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
                        "reportingController": manager, "reportingInstance": f"{manager}-bench",
                        "action": "Create", "reason": "DeploymentCreated", "type": "Normal",
                        "note": f"Created Deployment {names[i]} with 1 replica",
                        "regarding": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "namespace": NS,
                                      "name": names[i], "uid": crs[i]["metadata"]["uid"]}}

            # (what, stored?, send(object index, value)); stored writes alternate the value 2, 1, 2, ...
            dry = "dryRun=All"
            events = f"/apis/events.k8s.io/v1/namespaces/{NS}/events"
            kinds = [
                ("GET of a Deployment (a read, for scale)", False, lambda i, v: kube.json(
                    "GET", f"{deployments}/{names[i]}")),
                ("create: POST of a Deployment", False, lambda i, v: kube.json(
                    "POST", f"{deployments}?{dry}&fieldManager={manager}", new_deployment(i))),
                ("create: server-side apply of a new Deployment", False, lambda i, v: kube.json(
                    "PATCH", f"{deployments}/new-{names[i]}?{dry}&fieldManager={manager}&force=true",
                    new_deployment(i), **apply)),
                ("create: POST of an Event (events.k8s.io)", False, lambda i, v: kube.json(
                    "POST", f"{events}?{dry}", event(i))),
                ("scale: server-side apply of the whole Deployment", False, lambda i, v: kube.json(
                    "PATCH", f"{deployments}/{names[i]}?{dry}&fieldManager={manager}&force=true",
                    scaled(crs[i]), **apply)),
                ("scale: update (PUT) of the whole Deployment, as read", False, lambda i, v: kube.json(
                    "PUT", f"{deployments}/{names[i]}?{dry}&fieldManager={manager}", updated[i])),
                ("scale: merge patch of the Deployment's spec.replicas", False, lambda i, v: kube.json(
                    "PATCH", f"{deployments}/{names[i]}?{dry}&fieldManager={manager}",
                    {"spec": {"replicas": 2}}, **merge)),
                ("scale: merge patch of deployments/scale", False, lambda i, v: kube.json(
                    "PATCH", f"{deployments}/{names[i]}/scale?{dry}&fieldManager={manager}",
                    {"spec": {"replicas": 2}}, **merge)),
                ("status: server-side apply of the Memcached status", False, lambda i, v: kube.json(
                    "PATCH", f"{cr_path(names[i])}/status?{dry}&fieldManager={manager}&force=true",
                    status(names[i], 2), **apply)),
                ("the harness: merge patch of the Memcached spec.size", False, lambda i, v: kube.json(
                    "PATCH", f"{cr_path(names[i])}?{dry}", {"spec": {"size": 2}}, **merge)),
                ("the harness: merge patch of the Memcached spec.size", True, lambda i, v: kube.json(
                    "PATCH", cr_path(names[i]), {"spec": {"size": v}}, **merge)),
                ("status: server-side apply of the Memcached status", True, lambda i, v: kube.json(
                    "PATCH", f"{cr_path(names[i])}/status?fieldManager={manager}&force=true",
                    status(names[i], v), **apply)),
            ]

            def cpu():
                return cluster_cpu(cluster.proc.pid)

            def spent(before, after, seconds):
                """CPU seconds per program between two samples, less its idle rate over `seconds`."""
                return {k: after[k] - before.get(k, 0.0) - idle.get(k, 0.0) * seconds for k in after}

            time.sleep(5)  # the setup's watch events delivered
            before, t0 = cpu(), time.monotonic()
            time.sleep(10)
            after, seconds = cpu(), time.monotonic() - t0
            idle = {k: (after[k] - before.get(k, 0.0)) / seconds for k in after}
            # An update sends the object as read, with its resourceVersion (the Deployment controller
            # has written the status by now).
            updated = parallel(lambda i: kube.json("GET", f"{deployments}/{names[i]}"), range(objects))
            for d in updated:
                d["spec"]["replicas"] = 2
            for label, stored, send in kinds:
                if not stored:
                    parallel(lambda i: send(i, 2), range(objects))  # warm up: connections, caches
            samples = {k: [] for k in range(len(kinds))}
            passes = [0] * len(kinds)  # stored writes alternate 2, 1, 2, ... over the passes of each kind
            for r in range(rounds):
                for k, (label, stored, send) in enumerate(kinds):
                    values = [(i % objects, 2 - (passes[k] + i // objects) % 2) for i in range(total)]
                    passes[k] += -(-total // objects)
                    before, t0 = cpu(), time.monotonic()
                    parallel(lambda job: send(*job), values)
                    wall = time.monotonic() - t0
                    time.sleep(1 if stored else 0)  # what the cluster does about the last writes
                    samples[k].append({"wall": wall, "cpu_seconds": spent(before, cpu(), time.monotonic() - t0)})
                log(f"round {r + 1} of {rounds}")
        finally:
            cluster.stop()

    def ms(sample, program=None):
        cpu = sample["cpu_seconds"]
        return 1000 * (cpu.get(program, 0.0) if program else sum(cpu.values())) / total

    results = []
    for k, (label, stored, _) in enumerate(kinds):
        apiserver = median_range([ms(x, "kube-apiserver") for x in samples[k]])
        cluster_ms = median_range([ms(x) for x in samples[k]])
        results.append({"request": label, "stored": stored, "n": total, "rounds": samples[k],
                        "apiserver_ms_per_request": apiserver, "cluster_ms_per_request": cluster_ms})
    out = {"machine": machine(), "without_crd_rules": bool(os.environ.get("BENCH_WITHOUT_CRD_RULES")),
           "idle_cpu_per_second": idle, "requests": results}
    RESULTS.mkdir(exist_ok=True)
    out_file = RESULTS / os.environ.get("BENCH_OUT", "write-costs.json")
    out_file.write_text(json.dumps(out, indent=2))
    print(f"\nCPU per request (ms; median of {rounds} rounds of {total}, range), 16 connections:\n")
    print("| request | | kube-apiserver | whole cluster |")
    print("|---|---|---|---|")
    for r in results:
        a, c = r["apiserver_ms_per_request"], r["cluster_ms_per_request"]
        print(f"| {r['request']} | {'stored' if r['stored'] else 'dry run'} | "
              f"{a['median']:.2f} ({a['min']:.2f}–{a['max']:.2f}) | {c['median']:.2f} ({c['min']:.2f}–{c['max']:.2f}) |")
    log("wrote", out_file)


# What `profile-summary` reads in a kube-apiserver CPU profile: the CPU of everything under each function.
PROFILE_PARTS = [
    ("all", None),
    ("server-side apply (patch applied, field management included)",
     "k8s.io/apiserver/pkg/endpoints/handlers.(*applyPatcher).applyPatchToCurrentObject"),
    ("… of which field management",
     "k8s.io/apimachinery/pkg/util/managedfields/internal.(*FieldManager).Apply"),
    ("merge patches (patch applied)",
     "k8s.io/apiserver/pkg/endpoints/handlers.(*jsonPatcher).applyPatchToCurrentObject"),
    ("field tracking of every other write",
     "k8s.io/apimachinery/pkg/util/managedfields/internal.(*FieldManager).Update"),
    ("`scale` of Deployments", "k8s.io/kubernetes/pkg/registry/apps/deployment/storage.(*ScaleREST).Update"),
    ("status of custom resources",
     "k8s.io/apiextensions-apiserver/pkg/registry/customresource.(*StatusREST).Update"),
    ("status of Deployments", "k8s.io/kubernetes/pkg/registry/apps/deployment/storage.(*StatusREST).Update"),
    ("updates in storage (the patch, field management and etcd within)",
     "k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate"),
    ("creates in storage (etcd within)", "k8s.io/apiserver/pkg/storage/etcd3.(*store).Create"),
    ("watches: events sent", "k8s.io/apiserver/pkg/storage/cacher.(*Cacher).dispatchEvents"),
    ("Go's garbage collector", "runtime.gcBgMarkWorker"),
]


def cmd_profile_summary():
    """CPU seconds under each function of PROFILE_PARTS, for each profile given (a Markdown table)."""
    files = [Path(f) for f in sys.argv[2:]]
    if not files:
        die("usage: bench.py profile-summary PROFILE.pb.gz...")
    columns = []
    for f in files:
        out = sh([go_bin(), "tool", "pprof", "-top", "-cum", "-nodecount=1000000", "-nodefraction=0", str(f)]).stdout
        cum = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 6 and re.fullmatch(r"[0-9.]+m?s", parts[3]):
                v = parts[3]
                cum[" ".join(parts[5:])] = float(v[:-2]) / 1000 if v.endswith("ms") else float(v[:-1])
        total = re.search(r"Total samples = ([0-9.]+)(m?s)", out)
        cum[None] = float(total.group(1)) / (1000 if total.group(2) == "ms" else 1)
        columns.append(cum)
    print("| CPU seconds under | " + " | ".join(f.name.removesuffix(".pb.gz") for f in files) + " |")
    print("|---|" + "---|" * len(files))
    for label, fn in PROFILE_PARTS:
        print(f"| {label} | " + " | ".join(f"{c.get(fn, 0.0):.1f}" for c in columns) + " |")


def cmd_fleet():
    """The cost of each engaged cluster of a fleet: the runtime's `fleet_cost` example (release build) starts
    N control planes (default 10), engages one cluster, then the other N-1 at once, then disengages them
    all, and prints its figures; saved to bench/results/fleet-N<N>.json, summed up here."""
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    env = {**os.environ, "KUBEBUILDER_ASSETS": os.environ.get("KUBEBUILDER_ASSETS") or str(assets())}
    cmd = ["cargo", "run", "--quiet", "--release", "--locked", "-p", "rustbuilder-runtime",
           "--example", "fleet_cost", "--", str(count)]
    log("$", shlex.join(cmd))
    out = subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    result = json.loads(out)
    result["date"] = time.strftime("%Y-%m-%d")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"fleet-N{count}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    p = result["process"]
    rest = count - 1

    def per_cluster(key, a, b, n):
        return (p[b][key] - p[a][key]) / n

    print(f"{count} clusters, one control plane each (started in {result['control_planes_started_s']:.0f} s); "
          f"{path.relative_to(REPO)}")
    print("| per engaged cluster | the first | each of the other " + str(rest) + " |")
    print("|---|---|---|")
    for label, key in [("RssAnon (KiB)", "rss_anon_kib"), ("RssAnon in use (KiB)", "rss_anon_in_use_kib"),
                       ("RssFile (KiB)", "rss_file_kib"),
                       ("sockets", "sockets"), ("threads", "threads")]:
        print(f"| {label} | {per_cluster(key, 'before', 'one', 1):.0f} | {per_cluster(key, 'one', 'all', rest):.0f} |")
    opened = result["watches_opened"]
    print(f"| watches on its API server | {sum(opened['one'])} | {(sum(opened['all']) - sum(opened['one'])) / rest:.1f} |")
    for label, key in [("engage to first list answered (ms)", "engage_to_listed_ms"),
                       ("engage to ready (ms; readiness looks every 200 ms)", "engage_to_ready_ms")]:
        first = list(result[key]["first"].values())[0]
        times = sorted(result[key]["rest_at_once"].values())
        print(f"| {label} | {first} | median {statistics.median(times):.0f}, max {max(times)} |")
    rounds = [(r["rss_anon_kib"], r["rss_anon_in_use_kib"]) for r in p["after_each_further_round"]]
    print("RssAnon, in use (KiB): " + ", ".join(f"{k} {p[k]['rss_anon_kib']}, {p[k]['rss_anon_in_use_kib']}"
                                               for k in ["before", "one", "all", "after_disengaging_all"])
          + f", after each further round {rounds}; sockets before {p['before']['sockets']}, "
          f"after {p['after_disengaging_all']['sockets']}; watches closed {result['watches_closed_after_disengaging_ms']} ms "
          f"after disengaging; /metrics with all engaged: {result['metrics']['bytes']} bytes, "
          f"encoded in {result['metrics']['encode_ms']:.1f} ms")


def main():
    cmds = {"prepare": cmd_prepare, "build-times": cmd_build_times, "run": cmd_run, "report": cmd_report,
            "write-costs": cmd_write_costs, "profile-summary": cmd_profile_summary, "fleet": cmd_fleet}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        die(f"usage: bench.py {'|'.join(cmds)}")
    cmds[sys.argv[1]]()


if __name__ == "__main__":
    main()
