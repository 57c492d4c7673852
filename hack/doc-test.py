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

Usage: doc-test.py [--snippets-only] FILE.md...
A document whose commands and expected outputs are exactly an earlier one's (a translation) runs once.
Runs in a fresh temporary directory with rustbuilder on PATH; needs KUBEBUILDER_ASSETS for the cluster.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!--\s*(snippet|run|expect|write)\s*(?::\s*(.*?))?\s*-->\s*$")
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
        if kind == "write":
            if not WRITE.match(argument):
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

    def __init__(self, workdir, env):
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], cwd=workdir, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.background = []
        self.count = 0

    def run(self, code, timeout=1800):
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
            sys.stdout.write("    " + line)
            if time.time() > deadline:
                return 1, "".join(output) + "\n(timed out)"

    def start_background(self, code, until, workdir, env):
        log = open(os.path.join(workdir, f"background-{len(self.background)}.log"), "w")
        cwd = self.run("pwd")[1].strip()
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
        self.proc.wait()


def run_document(path, env):
    workdir = tempfile.mkdtemp(prefix="doc-test-")
    shell = Shell(workdir, env)
    last_output, failures = None, []
    try:
        for kind, argument, code, line in blocks(path):
            if kind == "run" and argument.startswith("background"):
                until = dict(a.split("=", 1) for a in argument.split()[1:]).get("until")
                print(f"{path}:{line}: background: {code.strip()}")
                ok, log = shell.start_background(code, until, workdir, env)
                if not ok:
                    failures.append(f"{path}:{line}: the background command never produced {until}:\n{log}")
                    break
            elif kind == "run":
                print(f"{path}:{line}: $ {code.strip()}")
                status, last_output = shell.run(code)
                if status != 0:
                    failures.append(f"{path}:{line}: exited with {status}:\n{last_output[-3000:]}")
                    break
            elif kind == "write":
                dest, source = WRITE.match(argument).groups()
                target = os.path.join(shell.run("pwd")[1].strip(), dest)
                print(f"{path}:{line}: write {dest} (from {source})")
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(os.path.join(ROOT, source), target)
            elif kind == "expect":
                if last_output is None:
                    failures.append(f"{path}:{line}: `expect` before any `run` block")
                    continue
                missing = matches(code, last_output)
                if missing:
                    failures.append(f"{path}:{line}: the output lacks {missing}:\n{last_output[-3000:]}")
    finally:
        shell.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return failures


def main(argv):
    snippets_only = "--snippets-only" in argv
    files = [a for a in argv if not a.startswith("--")]
    if not files:
        raise SystemExit(__doc__)
    failures = [f for path in files for f in check_snippets(path)]
    if not snippets_only and not failures:
        env = dict(os.environ)
        if not env.get("KUBEBUILDER_ASSETS"):
            raise SystemExit("KUBEBUILDER_ASSETS is not set: run `make envtest` (or rustbuilder envtest use -p path)")
        # The assets' kubectl first: the tutorials need a kubectl as recent as the cluster.
        env["PATH"] = os.pathsep.join([env["KUBEBUILDER_ASSETS"], env.get("PATH", "")])
        # A translation runs the same commands as its original: running them again would prove nothing
        # new, so a document whose commands (and expected outputs) equal an earlier one's runs once.
        ran = {}
        for path in files:
            commands = [(k, a, c) for k, a, c, _ in blocks(path) if k in ("run", "expect")]
            key = repr(commands)
            if commands and key in ran:
                print(f"{path}: the same commands as {ran[key]}, which ran them")
                continue
            ran[key] = path
            failures += run_document(path, env)
    for failure in failures:
        print(f"FAIL {failure}", file=sys.stderr)
    print(f"{len(files)} document(s): {'ok' if not failures else f'{len(failures)} failure(s)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
