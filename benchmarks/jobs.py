"""Runs of a benchmark as jobs, a few at a time: each job a list of commands (train, then evaluate)
with its output in files; Ctrl-C or SIGTERM stops the running ones, each with its checkpoint."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


class Job:
    """One run (a task or preset x a seed): its commands one after another (train, evaluate), stdout
    and stderr to files in its run dir."""

    def __init__(self, name: str, seed: int, commands: list[list[str]], run_dir: Path):
        self.name, self.seed, self.commands, self.run_dir = name, seed, list(commands), run_dir
        self.threads: int | None = None  # intra-op threads when not pinned (run_jobs; None: torch's default)
        self.proc: subprocess.Popen | None = None
        self.start: float | None = None  # when its first command started
        self.cpus: list[int] | None = None  # the cores its commands run on (run_jobs pins them), else any

    def advance(self) -> bool:
        """Starts the next command when the current one is done; True when all are done."""
        if self.proc is not None:
            if self.proc.poll() is None:
                return False
            if self.proc.returncode != 0:
                log = (self.run_dir / "stderr.log").read_text()[-3000:]
                raise RuntimeError(f"{self.name} seed {self.seed} failed ({self.proc.returncode}):\n{log}")
        if not self.commands:
            return True
        command = self.commands.pop(0)
        print("+", " ".join(command[1:]), *([f"(on cores {','.join(map(str, self.cpus))})"] if self.cpus else []),
              flush=True)
        self.start = self.start or time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # files, not pipes: a pipe nobody reads while other runs go on could fill and block the child
        with open(self.run_dir / "stdout.log", "a") as out, open(self.run_dir / "stderr.log", "a") as err:
            pin = (lambda cpus=self.cpus: os.sched_setaffinity(0, cpus)) if self.cpus else None
            self.proc = subprocess.Popen(command, cwd=ROOT, env=self.environment(), stdout=out, stderr=err,
                                         preexec_fn=pin)
        return False

    def environment(self) -> dict[str, str]:
        """os.environ with OMP_NUM_THREADS: as many as the job's own cores when pinned (not the machine's
        CPU count, which a cpuset container's affinity may be narrower than), else `threads`."""
        threads = len(self.cpus) if self.cpus else self.threads
        return dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:  # Ctrl-C: the run checkpoints and stops
            self.proc.terminate()
            self.proc.wait()


def stop_on_sigterm() -> None:
    """SIGTERM (kill, a scheduler) ends the suite as Ctrl-C does: its running jobs are stopped, each
    with a checkpoint a later suite resumes from, instead of training on as orphans."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def core_slots(parallel: int) -> list[list[int]] | None:
    """The cores split into `parallel` disjoint sets, one per running job; None when there are fewer
    cores than jobs. A run's learner, inference server and env workers then share its cores instead
    of migrating between all of them beside the other runs' processes."""
    cores = sorted(os.sched_getaffinity(0))
    return [cores[i::parallel] for i in range(parallel)] if parallel <= len(cores) else None


def run_jobs(jobs: list[Job], parallel: int, done: Callable[[Job], None] = lambda job: None,
             pin: bool = False) -> None:
    """Runs the jobs `parallel` at a time, calling `done` as each finishes; with `pin`, each on its
    own cores (core_slots) where there are enough. On any exit (Ctrl-C, SIGTERM via stop_on_sigterm,
    a failed job) the running ones are stopped."""
    pending, running = list(jobs), []
    free = (core_slots(parallel) if pin else None) or [None] * parallel
    # unpinned runs (no pin, or more runs than cores) share the cores out as intra-op threads
    share = max(1, len(os.sched_getaffinity(0)) // parallel) if parallel > 1 else None
    try:
        while pending or running:
            while pending and len(running) < parallel:
                running.append(pending.pop(0))
                running[-1].cpus, running[-1].threads = free.pop(), share
                running[-1].advance()
            for job in list(running):
                if job.advance():
                    running.remove(job)
                    free.append(job.cpus)
                    done(job)
            time.sleep(1)
    finally:
        for job in running:
            job.stop()
