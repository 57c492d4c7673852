"""Job slots shared with make: how many jobs the test scripts run at once, over all of `make test`.

`make test` runs its steps under one `make -j` (TEST_JOBS in the Makefile). A step that runs several
jobs itself (test binaries, tutorials) takes its extra slots from make's jobserver, so the whole run
keeps to TEST_JOBS jobs however its steps overlap: when the CLI's tests and the golden projects run at
once they share the slots instead of each running two. A step still runs no more than its own limit
(STEP_JOBS) at once. Outside make, or in a recipe make did not hand its jobserver to (a line without
`+`), a script runs up to that limit at a time.

The jobs' own environment has no MAKEFLAGS: a `make` they run (a generated project's `make lint test`)
runs its recipes one at a time, as a user's would, and no cargo in them looks for a jobserver it was
not given.
"""

import os
import re
import select
import threading
import time

# How long a free token must stay unread by make before a script takes it.
MAKE_FIRST = 1.0
JOBSERVER = re.compile(r"--jobserver-(?:auth|fds)=(?:fifo:(\S+)|(\d+),(\d+))")


class Slots:
    """Hands out job slots: the one make gave the script's own process first, then tokens read from
    make's jobserver (given back when the job ends); without a jobserver, a slot to whoever asks."""

    def __init__(self):
        self.lock = threading.Lock()
        self.own_free = True
        self.read_fd = self.write_fd = None
        match = JOBSERVER.search(os.environ.get("MAKEFLAGS", ""))
        if match:
            try:
                if match.group(1):
                    self.read_fd = os.open(match.group(1), os.O_RDONLY | os.O_NONBLOCK)
                    self.write_fd = os.open(match.group(1), os.O_WRONLY)
                else:
                    read_fd, write_fd = int(match.group(2)), int(match.group(3))
                    os.fstat(read_fd), os.fstat(write_fd)  # closed when the recipe line is not `+`
                    self.read_fd, self.write_fd = read_fd, write_fd
            except OSError:
                self.read_fd = self.write_fd = None

    def acquire(self):
        """Blocks until a slot is free; returns what `release` needs to give it back."""
        if self.read_fd is None:
            return "free"
        while True:
            with self.lock:
                if self.own_free:
                    self.own_free = False
                    return "own"
            # A token, or, within half a second, the own slot back.
            readable, _, _ = select.select([self.read_fd], [], [], 0.5)
            if readable:
                # make takes a free token at once when it has a step ready to start; one still free a
                # moment later is one it has no use for. So make's ready steps (long ones: a golden
                # project, the tutorials, the drills) start first, and a script's extra jobs (short
                # test binaries) fill the slots they leave: the run does not end on a long step
                # that waited for a slot.
                time.sleep(MAKE_FIRST)
                try:
                    token = os.read(self.read_fd, 1)
                except BlockingIOError:  # another of make's clients took it first
                    continue
                if token:
                    return token

    def release(self, slot):
        if slot == "own":
            with self.lock:
                self.own_free = True
        elif slot != "free":
            os.write(self.write_fd, slot)


def job_environment(env):
    """`env` without make's flags, for the jobs' processes (see the module's text)."""
    return {name: value for name, value in env.items()
            if name not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "CARGO_MAKEFLAGS")}


def run_jobs(jobs, run, limit):
    """Runs `run(job)` for each job, in the order given, at most `limit` at once and each in a slot of
    its own (see `Slots`); returns the results in the same order."""
    slots, queue, lock = Slots(), list(enumerate(jobs)), threading.Lock()
    results = [None] * len(jobs)

    def worker():
        while True:
            slot = slots.acquire()
            try:
                with lock:
                    if not queue:
                        return
                    index, job = queue.pop(0)
                results[index] = run(job)
            finally:
                slots.release(slot)

    # `limit` threads; each waits for a slot before it takes the next job.
    threads = [threading.Thread(target=worker) for _ in range(max(1, min(len(jobs), limit)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
