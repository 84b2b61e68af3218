"""Ctrl-C and SIGTERM stop train.py and every worker it started, after a final checkpoint. (About
10 s on an idle machine; the tests allow STOP_S, which only bounds a hang: a busy machine is slower.)"""
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from dreamer.io import checkpoint
from dreamer.io.metrics import read_metrics
from tests.conftest import ROOT
from tests.helpers import processes_tagged

STOP_S = 60
# a stop during start-up is honoured at its next safe point, after imports and builds that a busy
# machine slows several-fold (30 s was once too short beside three training runs)
STARTUP_STOP_S = 180


def start_long_run(tag: str, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, DREAMER_TEST_TAG=tag, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "train.py", "env=dmc_cartpole_balance", "world_model=tiny", "collector.num_envs=2",
         "collector.total_frames=10000000", "learner.prefill_frames=200", "replay.batch_size=4",
         "replay.batch_length=16", "eval.every=0", "logger=none", "logger.every=50",
         f"hydra.run.dir={run_dir(tag)}",
         # eager unless a test says otherwise (auto compiles regions for a run this long)
         *([] if any(e.startswith("learner.compile=") for e in extra) else ["learner.compile=false"]), *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)  # its own process group, as a shell job in a terminal


@contextlib.contextmanager
def long_run(*extra: str):
    """(tag, process) of a long train.py run; whatever is left of its process tree is killed after."""
    tag = uuid.uuid4().hex
    proc = start_long_run(tag, *extra)
    try:
        yield tag, proc
    finally:
        for leftover in processes_tagged(tag):
            leftover.kill()
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(run_dir(tag), ignore_errors=True)


def run_dir(tag: str) -> Path:
    return Path(f"/tmp/dreamer-test-{tag}")


def wait_for_learning(proc: subprocess.Popen, tag: str, timeout: float = 180) -> None:
    """Until workers, server and learner are all busy (the metrics file shows updates)."""
    deadline = time.monotonic() + timeout
    metrics = run_dir(tag) / "metrics.jsonl"
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        if len(processes_tagged(tag)) >= 4 and metrics.exists() and '"train/updates": ' in metrics.read_text() \
                and any(row.get("train/updates", 0) > 0 for row in read_metrics(metrics)):
            return
        time.sleep(0.5)
    pytest.fail("learning did not start")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_the_whole_process_tree(sig):
    with long_run() as (tag, proc):
        wait_for_learning(proc, tag)
        children = [p.pid for p in processes_tagged(tag) if p.pid != proc.pid]
        assert children and all(ignores_sigint(pid) for pid in children), "a child would die of Ctrl-C"
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # a terminal's Ctrl-C reaches the whole foreground group
        else:
            proc.send_signal(sig)  # a scheduler's or `kill`'s SIGTERM: the main process only
        start = time.monotonic()
        proc.wait(timeout=STOP_S)
        while processes_tagged(tag) and time.monotonic() - start < STOP_S:
            time.sleep(0.2)
        assert processes_tagged(tag) == [], f"processes left {time.monotonic() - start:.1f}s after {sig.name}"
        assert proc.returncode == 130
        assert checkpoint.latest(run_dir(tag) / "checkpoints") is not None, "no final checkpoint"
        assert checkpoint.load(run_dir(tag) / "checkpoints")["updates"] > 0


def wait_gone(proc: subprocess.Popen, tag: str, seconds: float) -> float:
    """Waits for the main process and every tagged process to end; returns the time it took."""
    start = time.monotonic()
    proc.wait(timeout=seconds)
    while processes_tagged(tag) and time.monotonic() - start < seconds:
        time.sleep(0.2)
    assert processes_tagged(tag) == [], f"processes left {time.monotonic() - start:.1f}s later"
    return time.monotonic() - start


@pytest.mark.slow
def test_sigint_at_start_up_leaves_nothing():
    with long_run() as (tag, proc):
        deadline = time.monotonic() + 120
        while not catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:  # train.py's first step
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.01)
        assert [p.pid for p in processes_tagged(tag)] == [proc.pid], "workers already started: not start-up"
        os.killpg(proc.pid, signal.SIGINT)  # Hydra composing, torch and the simulators importing
        wait_gone(proc, tag, STARTUP_STOP_S)
        assert proc.returncode == 130, proc.stdout.read()[-2000:]


@pytest.mark.slow
def test_sigint_while_workers_start_stops_the_run():
    """Ctrl-C while the collector's processes are being spawned: it used to be discarded (SIGINT was
    ignored there so that children inherit the ignore) and the run went on training."""
    with long_run() as (tag, proc):
        deadline = time.monotonic() + 120
        while len(processes_tagged(tag)) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.05)  # until the first child appears
        os.killpg(proc.pid, signal.SIGINT)
        wait_gone(proc, tag, STARTUP_STOP_S)
        assert proc.returncode == 130, proc.stdout.read()[-2000:]


def signal_mask(pid: int, field: str) -> int:
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith(field))
    return int(line.split()[1], 16)


def ignores_sigint(pid: int, sig: int = signal.SIGINT) -> bool:
    return bool(signal_mask(pid, "SigIgn:") & (1 << (sig - 1)))


def catches(pid: int, sig: int) -> bool:
    """Whether the process has a handler for `sig` (Python installs none for SIGTERM: the app's is in)."""
    return bool(signal_mask(pid, "SigCgt:") & (1 << (sig - 1)))


def test_ctrl_c_while_children_start_reaches_the_handler():
    """Unit level: inside the guard a SIGINT reaches this process's handler (it used to be
    discarded), while a process spawned there ignores it."""
    import multiprocessing as mp

    from patches.spawn import children_ignore_stop_signals
    received = []
    previous = signal.signal(signal.SIGINT, lambda *_: received.append("SIGINT"))
    try:
        with children_ignore_stop_signals():
            child = mp.get_context("spawn").Process(target=time.sleep, args=(5,))
            child.start()
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            assert received == ["SIGINT"]
        assert ignores_sigint(child.pid), "a process spawned inside the guard does not ignore SIGINT"
        assert ignores_sigint(child.pid, signal.SIGTERM), "... nor SIGTERM"
        assert not ignores_sigint(os.getpid()) and not ignores_sigint(os.getpid(), signal.SIGTERM)
        child.kill()
        child.join()
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_sigterm_during_prefill_writes_a_loadable_checkpoint():
    with long_run("learner.prefill_frames=1000000") as (tag, proc):  # never leaves prefill
        deadline = time.monotonic() + 120
        metrics = run_dir(tag) / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.5)  # until env steps are logged
        proc.send_signal(signal.SIGTERM)
        wait_gone(proc, tag, STOP_S)
        assert proc.returncode == 130
        state = checkpoint.load(run_dir(tag) / "checkpoints")
        assert state["updates"] == 0 and state["frames"] > 0


@pytest.mark.slow
def test_a_killed_worker_stops_the_run_with_an_error_and_a_checkpoint():
    """SIGKILL to a collector process (as the OOM killer does) must not hang the run: a worker killed
    while holding one of the collector's shared locks used to block the driver forever."""
    with long_run() as (tag, proc):
        wait_for_learning(proc, tag)
        victim = next(p for p in processes_tagged(tag)
                      if p.pid != proc.pid and "spawn_main" in " ".join(p.cmdline()))
        victim.kill()
        wait_gone(proc, tag, STOP_S)
        output = proc.stdout.read()
        assert proc.returncode == 1
        assert f"pid {victim.pid}" in output and "died" in output
        assert checkpoint.load(run_dir(tag) / "checkpoints")["updates"] > 0


def test_an_error_from_a_collector_call_names_the_process_that_died():
    """torchrl can notice a death before the watchdog's next poll (CI: "inference server exited while
    pausing"); the run must still say which process died, not the symptom."""
    from collectors.watchdog import CollectorFault, ProcessWatchdog

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    watchdog = ProcessWatchdog([child.pid], poll_s=60).start()  # its thread will not poll in time
    try:
        child.kill()
        child.wait()
        with pytest.raises(CollectorFault, match=f"pid {child.pid}.*died"):
            with watchdog.guard():
                raise RuntimeError("inference server exited while pausing")
        with pytest.raises(ValueError):  # with every process alive, errors pass through unchanged
            with ProcessWatchdog([os.getpid()], poll_s=60).guard():
                raise ValueError("not a collector death")
    finally:
        watchdog.stop()


def test_a_process_exit_the_collector_explains_is_declared_as_its_cause():
    """torchrl's replay writer, on an env's error, ends the workers itself: the watchdog, seeing them
    gone, must report the env's fault (the cause), not a death (seen on a busy machine)."""
    from collectors.watchdog import CollectorFault, ProcessWatchdog

    cause = "env.nonfinite: nan in observation from env worker 0 (gym_X) at env step 60"
    for known, expected in ((cause, "^env.nonfinite: nan in observation from env worker 0"), (None, "died")):
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        watchdog = ProcessWatchdog([child.pid], poll_s=0.05, cause=lambda: known).start()
        try:
            child.communicate(b"")  # the process ends
            deadline = time.monotonic() + 60  # bounds a hang only
            while watchdog.fault is None and time.monotonic() < deadline:
                time.sleep(0.05)
            with pytest.raises(CollectorFault, match=expected):
                watchdog.check()
        finally:
            watchdog.stop()


@pytest.mark.slow
def test_sigterm_during_compile_warm_up_stops_before_the_compile_ends():
    """torch.compile of the first update takes minutes on CPU; a stop request must not wait for it."""
    with long_run("learner.compile=true") as (tag, proc):
        lines = []  # the run's output, read on a thread: the phase is the line the app prints
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        deadline = time.monotonic() + 300  # bounds a hang only
        while not any("compiling the first update" in line for line in lines) and time.monotonic() < deadline:
            assert proc.poll() is None, "".join(lines)[-4000:]
            time.sleep(0.2)
        metrics = run_dir(tag) / "metrics.jsonl"
        assert not metrics.exists() or not any(r.get("train/updates", 0) > 0 for r in read_metrics(metrics))
        proc.send_signal(signal.SIGTERM)
        wait_gone(proc, tag, STOP_S)
        reader.join(timeout=10)
        assert proc.returncode == 130, "".join(lines)[-4000:]
        assert checkpoint.load(run_dir(tag) / "checkpoints")["updates"] == 0
