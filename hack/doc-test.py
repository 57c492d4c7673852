#!/usr/bin/env python3
"""Keeps the tutorials honest: checks their code snippets against testdata/ and runs their shell commands.

Markers are HTML comments, invisible when the Markdown is rendered:

  <!-- snippet: testdata/project/src/controller/memcached.rs -->   the next code block must appear verbatim
                                                                   in that file
  <!-- run -->                        the next code block runs (bash, one shell for the whole document, so
                                       `cd` and `export` carry over)
  <!-- run: background until=PATH --> starts the block in the background and waits until PATH exists; it is
                                       stopped (SIGINT, then SIGTERM) when the document ends
  <!-- expect -->                     every line of the next code block must appear in the output of the
                                       previous `run` block; `<...>` matches anything (ages, counts)
  <!-- write: DEST from SRC -->        no code block: the reader writes the whole file DEST (relative to the
                                       shell's directory) as the tutorial's file SRC (relative to the
                                       repository, linked from the text); the run copies SRC there
  <!-- continues: OTHER.md -->         no code block: the document starts where OTHER.md ends; it runs in
                                       OTHER.md's shell, after it (OTHER.md runs first even if not named)
  <!-- same-as: DIR [except F...] -->  no code block: the shell's directory now holds DIR's project (a golden
                                       project of testdata/): each file git tracks in DIR, but the F named
                                       (F/: the files under it), is there with the same text, and src/, tests/
                                       and config/ hold no other
  <!-- run: tested-as DIR [except F...] -->
                                       the next code block runs a golden project's own tests (`make lint test`):
                                       it is skipped when the shell's directory holds DIR's project (as `same-as`
                                       checks), whose tests `make test-testdata` runs; otherwise it runs

Usage: doc-test.py [--snippets-only] FILE.md...
Documents whose commands, files written and expected outputs are exactly earlier ones' (a translation) run once.
Each chain of documents (one shell) runs in a fresh temporary directory with rustbuilder on PATH; chains run
STEP_JOBS at a time (default 2; under `make test`, in its job slots: see jobslots.py), each one's output
printed whole when it ends. Needs KUBEBUILDER_ASSETS.
"""

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib

from jobslots import job_environment, run_jobs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!--\s*(snippet|run|expect|write|continues|same-as)\s*(?::\s*(.*?))?\s*-->\s*$")
WRITE = re.compile(r"^(\S+)\s+from\s+(\S+)$")
FENCE = re.compile(r"^(\s*)(```+)\s*([\w-]*)\s*$")


def blocks(path):
    """Yields (marker, argument, code, line number) for every marked code block of a Markdown file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        match = MARKER.match(lines[i].strip())
        if not match:
            i += 1
            continue
        kind, argument, start = match.group(1), match.group(2) or "", i + 1
        if kind in ("write", "continues", "same-as"):
            if kind == "write" and not WRITE.match(argument):
                raise SystemExit(f"{path}:{start}: `write` needs `DEST from SRC`, got {argument!r}")
            yield kind, argument, "", start
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = FENCE.match(lines[j]) if j < len(lines) else None
        if not fence:
            raise SystemExit(f"{path}:{start}: `{kind}` marker not followed by a code block")
        indent, ticks = fence.group(1), fence.group(2)
        body = []
        j += 1
        while j < len(lines) and lines[j].strip() != ticks:
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        yield kind, argument, "\n".join(body), start
        i = j + 1


def check_snippets(path):
    failures = []
    for kind, argument, code, line in blocks(path):
        if kind == "write":
            source = WRITE.match(argument).group(2)
            if not os.path.isfile(os.path.join(ROOT, source)):
                failures.append(f"{path}:{line}: {source} does not exist")
            continue
        if kind in ("continues", "same-as"):
            if not os.path.exists(os.path.join(ROOT, argument.split()[0])):
                failures.append(f"{path}:{line}: {argument} does not exist")
            continue
        if kind != "snippet":
            continue
        source = os.path.join(ROOT, argument)
        if not os.path.exists(source):
            failures.append(f"{path}:{line}: {argument} does not exist")
        elif code not in open(source, encoding="utf-8").read():
            failures.append(f"{path}:{line}: this snippet is no longer in {argument}; copy the current code")
    return failures


def matches(expected, output):
    """Every non-empty expected line appears in the output; whitespace runs are equal, `<...>` is a wildcard."""
    missing = []
    for line in expected.splitlines():
        if not line.strip():
            continue
        parts = re.split(r"<[^>]*>", line.strip())
        pattern = ".*".join(r"\s+".join(map(re.escape, part.split())) for part in parts)
        if not re.search(pattern, output):
            missing.append(line)
    return missing


class Shell:
    """One bash process for the whole document; each block's output is delimited by a sentinel."""

    def __init__(self, workdir, env, log):
        self.log = log
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], cwd=workdir, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.background = []
        self.count = 0
        self.cpu = 0.0

    def run(self, code, timeout=1800, logged=True):
        self.count += 1
        sentinel = f"__doc_test_{self.count}__"
        self.proc.stdin.write(f"set -eo pipefail\n{code}\necho \"{sentinel} $?\"\n")
        self.proc.stdin.flush()
        output, deadline = [], time.time() + timeout
        while True:
            line = self.proc.stdout.readline()
            if not line:
                return 1, "".join(output) + "\n(the shell exited: a command failed)"
            if line.startswith(sentinel):
                return int(line.split()[1]), "".join(output)
            output.append(line)
            if logged:
                self.log.append("    " + line)
            if time.time() > deadline:
                return 1, "".join(output) + "\n(timed out)"

    def cwd(self):
        """The shell's current directory."""
        return self.run("pwd", logged=False)[1].strip()

    def start_background(self, code, until, workdir, env):
        log = open(os.path.join(workdir, f"background-{len(self.background)}.log"), "w")
        cwd = self.cwd()
        proc = subprocess.Popen(["bash", "-c", code], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.background.append(proc)
        target = os.path.join(cwd, until)
        deadline = time.time() + 1800
        while not os.path.exists(target):
            if proc.poll() is not None or time.time() > deadline:
                log.close()
                return False, open(log.name).read()[-3000:]
            time.sleep(1)
        return True, ""

    def close(self):
        for proc in reversed(self.background):
            for sig, wait in ((signal.SIGINT, 30), (signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                if proc.poll() is not None:
                    break
                os.killpg(proc.pid, sig)
                try:
                    proc.wait(wait)
                except subprocess.TimeoutExpired:
                    pass
        # Jobs the document started with `&` share the shell's process group: stop them too.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(2)
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        # The CPU time of the commands run in the shell (not of those started in the background).
        self.cpu = usage.ru_utime + usage.ru_stime


def project_name(chain):
    """The directory the chain's first `mkdir` makes (its project's name), or the chain's first file."""
    for path in chain:
        for kind, _, code, _ in blocks(path):
            match = re.search(r"\bmkdir\s+(?:-p\s+)?([\w.-]+)", code) if kind == "run" else None
            if match:
                return match.group(1)
    return chain[0]


def continued(path):
    """The document `path` continues (its `continues` marker), or None."""
    other = next((argument for kind, argument, _, _ in blocks(path) if kind == "continues"), None)
    return other and os.path.relpath(os.path.join(ROOT, other))


def chains(files):
    """The documents to run, grouped by shell: each with those it continues and those continuing it."""
    result, seen = [], set()
    for path in files:
        if path in seen:
            continue
        chain = [path]
        while continued(chain[0]) and continued(chain[0]) not in chain:
            chain.insert(0, continued(chain[0]))
        while True:
            following = [f for f in files if continued(f) == chain[-1] and f not in chain]
            if not following:
                break
            chain.append(following[0])
        seen.update(chain)
        result.append(chain)
    return result


def golden_packages():
    """The package names of the golden projects (testdata/*/Cargo.toml)."""
    names = set()
    for manifest in glob.glob(os.path.join(ROOT, "testdata", "*", "Cargo.toml")):
        with open(manifest, "rb") as file:
            names.add(tomllib.load(file)["package"]["name"])
    return names


def build_apart(workdir, package):
    """Gives the builds of `package`, a tutorial's project named like a golden one, artifacts of their own
    in the shared build dir, so that the tutorial and the golden project's tests can build at once.

    cargo names the artifacts of a project built alone by its package's name, version and profile, not by
    where it lies: the two `project`s would share theirs, and a build of one, newer than the other's
    sources, would pass for the other's. A profile setting of the package alone, in a cargo config beside
    the tutorial's directory, names its artifacts apart: `codegen-units = 16`, which rustc uses anyway
    when incremental compilation is off (as in CI). The dependencies' builds stay shared."""
    os.makedirs(os.path.join(workdir, ".cargo"))
    with open(os.path.join(workdir, ".cargo", "config.toml"), "w", encoding="utf-8") as file:
        file.write(f'[profile.dev.package.{package}]\ncodegen-units = 16\n')


def run_documents(chain, env, log):
    """Runs the documents of `chain` one after the other in one shell; stops at the first failure.
    What it did and printed goes to the list `log`; returns the failures and the shell's CPU seconds."""
    workdir = tempfile.mkdtemp(prefix="doc-test-")
    if project_name(chain) in golden_packages():
        build_apart(workdir, project_name(chain))
    shell = Shell(workdir, env, log)
    failures = []
    try:
        for path in chain:
            failures += run_blocks(path, shell, workdir, env)
            if failures:
                break
    finally:
        shell.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return failures, shell.cpu


PRINTING = threading.Lock()


def run_chain(chain, env):
    """Runs a chain (run_documents) and prints its log whole, under a header with its verdict and time."""
    started, log, cpu = time.time(), [], 0.0
    try:
        failures, cpu = run_documents(chain, env, log)
    except Exception as error:  # a broken chain must not hide the others' results
        failures = [f"{chain[0]}: doc-test failed: {error!r}"]
    verdict = "ok" if not failures else "FAILED"
    with PRINTING:
        print(f"==> {' + '.join(chain)}: {verdict} in {time.time() - started:.0f}s, CPU {cpu:.0f}s in its shell",
              flush=True)
        sys.stdout.write("".join(log))
        sys.stdout.flush()
    return failures


def golden_and_ignored(argument):
    """`DIR [except F...]` as (DIR, [F...])."""
    golden, *rest = argument.split()
    return golden, rest[1:] if rest[:1] == ["except"] else rest


def differences(project, golden, ignored):
    """How the directory `project` differs from the golden project `golden` (a directory of the repository)."""
    tracked = subprocess.run(["git", "ls-files", "-z", "--", golden], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split("\0")
    ignored_here = lambda name: any(name == f or f.endswith("/") and name.startswith(f) for f in ignored)
    expected = {name for name in (os.path.relpath(f, golden) for f in tracked if f) if not ignored_here(name)}
    found = []
    for name in sorted(expected):
        mine = os.path.join(project, name)
        if not os.path.isfile(mine):
            found.append(f"{name}: missing")
        elif open(mine, "rb").read() != open(os.path.join(ROOT, golden, name), "rb").read():
            found.append(f"{name}: differs")
    for top in ("src", "tests", "config"):
        for directory, _, names in os.walk(os.path.join(project, top)):
            for name in names:
                relative = os.path.relpath(os.path.join(directory, name), project)
                if relative not in expected:
                    found.append(f"{relative}: not in {golden}")
    return found


def run_blocks(path, shell, workdir, env):
    last_output, failures = None, []
    for kind, argument, code, line in blocks(path):
        if kind == "run" and argument.startswith("tested-as"):
            golden, ignored = golden_and_ignored(argument.split(None, 1)[1])
            found = differences(shell.cwd(), golden, ignored)
            if not found:
                shell.log.append(f"{path}:{line}: $ {code.strip()}\n    (not run: the project is {golden}, "
                                 "and `make test-testdata` runs its `make lint test test-e2e`)\n")
                continue
            shell.log.append(f"{path}:{line}: runs: the project is not {golden}: {', '.join(found)}\n")
        if kind == "run" and argument.startswith("background"):
            until = dict(a.split("=", 1) for a in argument.split()[1:]).get("until")
            shell.log.append(f"{path}:{line}: background: {code.strip()}\n")
            ok, log = shell.start_background(code, until, workdir, env)
            if not ok:
                failures.append(f"{path}:{line}: the background command never produced {until}:\n{log}")
                break
        elif kind == "run":  # plain, or `tested-as` a golden project it is not (yet)
            shell.log.append(f"{path}:{line}: $ {code.strip()}\n")
            started = time.time()
            status, last_output = shell.run(code)
            shell.log.append(f"    ({time.time() - started:.0f}s)\n")
            if status != 0:
                failures.append(f"{path}:{line}: exited with {status}:\n{last_output[-3000:]}")
                break
            # A project the block made keeps the runtime cargo built for the others (see the script), and
            # starts from its golden project's Cargo.lock, the versions CI tests, as the Kubebuilder scripts
            # of tests/ do: resolved afresh, a tutorial would rebuild what a newer release of a dependency
            # changes on the day it is published.
            here = shell.cwd()
            if os.path.isdir(os.path.join(here, "rustbuilder", "runtime")):
                subprocess.run([os.path.join(ROOT, "hack", "vendored-runtime-times.sh"), here], check=True)
            # A project without a golden project of its own name (the multi-cluster tutorial's) takes
            # the Getting Started one's: `init` gives every project the same dependencies, and cargo
            # only renames the root package.
            golden_lock = os.path.join(ROOT, "testdata", os.path.basename(here), "Cargo.lock")
            if not os.path.isdir(os.path.dirname(golden_lock)):
                golden_lock = os.path.join(ROOT, "testdata", "project", "Cargo.lock")
            if os.path.isfile(os.path.join(here, "Cargo.toml")) and not os.path.exists(os.path.join(here, "Cargo.lock")) \
                    and os.path.isfile(golden_lock):
                shutil.copyfile(golden_lock, os.path.join(here, "Cargo.lock"))
        elif kind == "write":
            dest, source = WRITE.match(argument).groups()
            target = os.path.join(shell.cwd(), dest)
            shell.log.append(f"{path}:{line}: write {dest} (from {source})\n")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(ROOT, source), target)
        elif kind == "same-as":
            golden, ignored = golden_and_ignored(argument)
            found = differences(shell.cwd(), golden, ignored)
            shell.log.append(f"{path}:{line}: the project is {golden}" + (f", but: {found}" if found else "") + "\n")
            if found:
                failures.append(f"{path}:{line}: the project differs from {golden}:\n" + "\n".join(found))
                break
        elif kind == "expect":
            if last_output is None:
                failures.append(f"{path}:{line}: `expect` before any `run` block")
                continue
            missing = matches(code, last_output)
            if missing:
                failures.append(f"{path}:{line}: the output lacks {missing}:\n{last_output[-3000:]}")
    return failures


def main(argv):
    snippets_only = "--snippets-only" in argv
    files = [os.path.relpath(a) for a in argv if not a.startswith("--")]
    if not files:
        raise SystemExit(__doc__)
    failures = [f for path in files for f in check_snippets(path)]
    if not snippets_only and not failures:
        env = job_environment(os.environ)
        if not env.get("KUBEBUILDER_ASSETS"):
            raise SystemExit("KUBEBUILDER_ASSETS is not set: run `make envtest` (or rustbuilder envtest use -p path)")
        # The assets' kubectl first: the tutorials need a kubectl as recent as the cluster.
        env["PATH"] = os.pathsep.join([env["KUBEBUILDER_ASSETS"], env.get("PATH", "")])
        # A translation runs the same commands as its original: running them again would prove nothing
        # new, so documents whose commands, files written and expected outputs equal earlier ones' run once
        # (a chain of documents as a whole).
        ran, to_run = {}, []
        for chain in chains(files):
            commands = [(k, a, c) for path in chain for k, a, c, _ in blocks(path)
                        if k in ("run", "expect", "write", "same-as")]
            key = repr(commands)
            if commands and key in ran:
                print(f"{' + '.join(chain)}: the same commands as {ran[key]}, which run them")
                continue
            ran[key] = " + ".join(chain)
            to_run.append(chain)
        # Two chains that make a project of the same name build the same cargo package in the shared build
        # dir (cargo tells a standalone package's builds apart by its name, not where it lies, and reuses
        # a build newer than the sources), so they must not run at once: such chains form a group that
        # runs one chain after the other.
        groups = {}
        for chain in to_run:
            groups.setdefault(project_name(chain), []).append(chain)
        # The longest group first, as it is likely to finish last.
        ordered = sorted(groups.values(), key=lambda group: -sum(os.path.getsize(p) for c in group for p in c))
        jobs = max(1, int(os.environ.get("STEP_JOBS", "2")))
        run_group = lambda group: [f for chain in group for f in run_chain(chain, env)]
        for group_failures in run_jobs(ordered, run_group, jobs):
            failures += group_failures
    for failure in failures:
        print(f"FAIL {failure}", file=sys.stderr)
    print(f"{len(files)} document(s): {'ok' if not failures else f'{len(failures)} failure(s)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
