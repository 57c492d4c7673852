#!/usr/bin/env python3
"""Runs the test binaries of a `cargo test` several at a time.

`cargo test` runs one test binary after another. Most of our binaries spend their time waiting on a
control plane (a Lease to expire, a watch to time out, pods to start), so two cores can run more than
one at once. This script builds them with `cargo test --no-run`, then runs them several at a time (in
the job slots of `make test`, see jobslots.py; outside make, JOBS at a time), the slowest first (by the
durations it recorded last time), as cargo would: from the package's directory. Doc tests, which `--no-run` does not build, run as one more job.
`--example-env VAR=NAME` hands the tests the example NAME that the same build made, in VAR, so that no
test binary runs cargo itself (they would wait on each other for cargo's lock).

Each binary's output is printed whole when it ends, under a header with its time; the script fails when
any binary fails, and lists the failures last.

    hack/test-binaries.py [--jobs N] [--doc] [--example-env VAR=NAME] CARGO_TEST_ARGS... [-- BINARY_ARGS...]
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from jobslots import job_environment, run_jobs


def built_binaries(cargo_args):
    """Builds the test binaries; returns [(name, executable, package directory)] and {example: executable}."""
    command = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics", *cargo_args]
    build = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if build.returncode != 0:
        sys.exit(f"test-binaries: `{' '.join(command)}` failed (exit {build.returncode})")
    binaries, examples = [], {}
    for line in build.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if message["target"]["kind"] == ["example"]:
            examples[message["target"]["name"]] = message["executable"]
        if not message["profile"]["test"]:
            continue
        package_dir = Path(message["manifest_path"]).parent
        # `path+file:///dir#name@0.1.0`, or `path+file:///dir/name#0.1.0` when the name is the dir's.
        spec = message["package_id"].rsplit("#", 1)[-1]
        package = spec.split("@")[0] if "@" in spec else package_dir.name
        target = message["target"]
        if target["kind"] == ["test"]:
            kind = "tests"
        else:
            kind = "bin unittests" if "bin" in target["kind"] else "unittests"
        binaries.append((f"{package} {kind} {target['name']}", message["executable"], package_dir))
    return binaries, examples


def durations_file():
    # The build dir when one is set apart (it is the cache kept between runs), else the target dir.
    target = os.environ.get("CARGO_BUILD_BUILD_DIR") or os.environ.get("CARGO_TARGET_DIR", "target")
    return Path(target) / "test-binaries-durations.json"


def load_durations():
    try:
        return json.loads(durations_file().read_text())
    except (OSError, ValueError):
        return {}


class Printer:
    """Prints each job's output whole, one job at a time."""

    def __init__(self):
        self.lock = threading.Lock()

    def report(self, name, seconds, cpu, returncode, output):
        verdict = "ok" if returncode == 0 else f"FAILED (exit {returncode})"
        with self.lock:
            print(f"==> {name}: {verdict} in {seconds:.0f}s, CPU {cpu:.0f}s", flush=True)
            sys.stdout.write(output)
            if output and not output.endswith("\n"):
                sys.stdout.write("\n")
            sys.stdout.flush()


def run(name, command, cwd, env, printer):
    """Runs one job; returns its name, seconds, CPU seconds and exit code. The CPU time is the job's own
    and that of the processes it waited for (the control planes it started and stopped), whatever else
    the machine runs meanwhile."""
    started = time.monotonic()
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace") as job:
        output = job.stdout.read()
        _, status, usage = os.wait4(job.pid, 0)
        job.returncode = os.waitstatus_to_exitcode(status)
    seconds, cpu = time.monotonic() - started, usage.ru_utime + usage.ru_stime
    printer.report(name, seconds, cpu, job.returncode, output)
    return name, seconds, cpu, job.returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("STEP_JOBS", "2")),
                        help="binaries run at once at most (default: STEP_JOBS, else 2)")
    parser.add_argument("--doc", action="store_true", help="also run the doc tests, as one job")
    parser.add_argument("--example-env", action="append", default=[], metavar="VAR=NAME",
                        help="set VAR to the path of the example NAME built with the tests")
    args, rest = parser.parse_known_args()
    if "--" in rest:
        split = rest.index("--")
        cargo_args, binary_args = rest[:split], rest[split + 1:]
    else:
        cargo_args, binary_args = rest, []

    binaries, examples = built_binaries(cargo_args)
    if not binaries:
        sys.exit("test-binaries: cargo built no test binary")
    example_env = {}
    for pair in args.example_env:
        var, _, example = pair.partition("=")
        if example in examples:
            example_env[var] = examples[example]
        else:  # e.g. a run filtered with `--test`: the tests build the example themselves
            print(f"test-binaries: the build made no example {example!r}; {var} is not set", file=sys.stderr)
    jobs = []
    for name, executable, package_dir in binaries:
        # Not cargo's CARGO_MANIFEST_DIR: no test reads it when it runs, and a cargo the test starts for a
        # generated project would hand it to the build scripts that watch it (ring's), which would then
        # rebuild ring, rustls and kube over the builds of the projects no test started.
        env = dict(job_environment(os.environ), **example_env)
        jobs.append((name, [executable, *binary_args], package_dir, env))
    if args.doc:
        doc = ["cargo", "test", "--doc", *cargo_args, "--", *binary_args]
        jobs.append(("doc tests", doc, Path.cwd(), job_environment(os.environ)))

    previous = load_durations()
    jobs.sort(key=lambda job: -previous.get(job[0], 0.0))
    printer = Printer()
    started = time.monotonic()
    results = run_jobs(jobs, lambda job: run(*job, printer), args.jobs)

    durations = dict(previous)
    durations.update({name: round(seconds, 1) for name, seconds, _, _ in results})
    try:
        durations_file().parent.mkdir(parents=True, exist_ok=True)
        durations_file().write_text(json.dumps(durations, indent=1, sort_keys=True) + "\n")
    except OSError as error:
        print(f"test-binaries: could not record the durations: {error}", file=sys.stderr)

    # `make test` ends with the slowest binaries of all its steps: each step appends its own.
    times_log = os.environ.get("TEST_TIMES_LOG")
    if times_log:
        Path(times_log).parent.mkdir(parents=True, exist_ok=True)
        with open(times_log, "a") as log:
            log.writelines(f"{seconds:.0f} {name} (CPU {cpu:.0f}s)\n" for name, seconds, cpu, _ in results)

    failed = [name for name, _, _, code in results if code != 0]
    total, cpu = time.monotonic() - started, sum(cpu for _, _, cpu, _ in results)
    print(f"==> {len(results)} test binaries: {total:.0f}s, CPU {cpu:.0f}s; "
          f"{len(failed)} failed", flush=True)
    for name in failed:
        print(f"FAILED: {name}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
