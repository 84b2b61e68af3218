"""Process watchdog: turns a collector process that dies (SIGKILL, the OOM killer), or an env worker
stuck in one step() or reset() past collector.env_timeout_s (its heartbeat, collectors/envs/
heartbeat.py), into a clear error.

Why torchrl's own liveness checks are not enough: a worker killed while it holds one of the
collector's shared multiprocessing locks (an Event's condition lock) leaves that lock taken forever,
and the next `pause()`, weight push or `shutdown()` in the driver blocks on it with no timeout.
The watchdog polls the processes from a thread; on a death it kills the remaining ones, and if the
main thread is inside a collector call (`guard()`), interrupts it with SIGUSR1 so that the call
raises CollectorFault instead of waiting forever. Elsewhere the main loop's `check()` raises it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Callable

import psutil


class CollectorFault(RuntimeError):
    """A collector process died; the collector cannot be stopped the normal way."""


class ProcessWatchdog:
    def __init__(self, pids: list[int], poll_s: float = 0.5, heartbeats: list[tuple[str, str]] = (),
                 env_timeout_s: float | None = None, unwind_grace_s: float = 30.0,
                 cause: Callable[[], str | None] | None = None):
        """`heartbeats`: (file, name) of each env, e.g. ("/tmp/.../0", "env worker 0 (gym_X)"); an env in
        this process (the evaluation env) is named, not killed. `unwind_grace_s`: how long the main
        thread, interrupted inside guard(), may take to leave it before the process exits from here
        (an env stuck in native code never lets the interrupt's Python handler run). `cause`: a fault
        the collector already knows (an env's error, after which it ends its workers itself); a
        process exit it explains is declared as that fault, not as a death."""
        self.procs = [psutil.Process(pid) for pid in pids]
        self.heartbeats, self.env_timeout_s = list(heartbeats), env_timeout_s
        self.poll_s = poll_s
        self.fault: str | None = None
        self.interruptible = False  # the main thread is inside a collector call
        self.unwind_grace_s = unwind_grace_s
        self.cause = cause
        self._stop = threading.Event()
        self._declaring = threading.Lock()
        self._main = threading.main_thread().ident
        self._thread = threading.Thread(target=self._watch, name="collector-watchdog", daemon=True)

    def start(self) -> "ProcessWatchdog":
        if threading.current_thread() is threading.main_thread():
            _Interrupts.add(self)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (before a normal shutdown, which ends the processes on purpose)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2 * self.poll_s + 1)
        _Interrupts.remove(self)

    def check(self) -> None:
        if self.fault is not None:
            raise CollectorFault(self.fault)

    @contextlib.contextmanager
    def guard(self):
        """Around a collector call that may block on the collector's shared locks."""
        self.interruptible = True
        try:
            self.check()
            yield
        except CollectorFault:
            raise
        except Exception as err:
            # torchrl may notice the death first (e.g. "inference server exited while pausing", after
            # kill_all ended the server): name the process that died, not the symptom. (A stuck env
            # is the watch thread's to name: a pause waits longer than collector.env_timeout_s.)
            dead = self._find_dead() if self.fault is None else None
            if dead is not None:
                self._declare(dead)
            if self.fault is not None:
                raise CollectorFault(self.fault) from err
            raise
        finally:
            self.interruptible = False

    def kill_all(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(self.procs, timeout=5)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            dead = self._find_dead()
            stuck = self._find_stuck(self.env_timeout_s) if dead is None and self.env_timeout_s else None
            if dead is None and stuck is None:
                continue
            if dead is not None:
                self._declare(dead)
            else:
                self._declare_stuck(*stuck)
            if self.interruptible:
                signal.pthread_kill(self._main, signal.SIGUSR1)
                if self._stop.wait(self.unwind_grace_s) or not self.interruptible:
                    return
                _kill_children()  # e.g. the paused collector's, if this watches the evaluation env
                print(f"\nerror: {self.fault}; the main thread did not stop within {self.unwind_grace_s:g} s, so "
                      "no final checkpoint was written: the last one in the run's checkpoints/ resumes it",
                      file=sys.stderr, flush=True)
                os._exit(1)
            return

    def _find_stuck(self, longer_than: float) -> tuple[str, int, str, float, int] | None:
        """(name, pid, "step()"/"reset()", seconds, env steps) of an env inside a call > longer_than s."""
        from collectors.envs import heartbeat

        now = time.monotonic()
        for path, name in self.heartbeats:
            beat = heartbeat.read(path)
            if beat is not None and beat[1] is not None and now - beat[2] > longer_than:
                return name, beat[0], beat[1], now - beat[2], beat[3]
        return None

    def _declare_stuck(self, name: str, pid: int, call: str, seconds: float, steps: int) -> None:
        with self._declaring:
            if self.fault is not None:
                return
            limit = f" (collector.env_timeout_s={self.env_timeout_s:g})" if seconds >= (self.env_timeout_s or 1e18) \
                else ""
            ending = "the run stops" if pid == os.getpid() else "it was killed"
            self.fault = (f"{name} (pid {pid}) has not returned from {call} for {seconds:.0f} s{limit}, "
                          f"after {steps} env steps; {ending}")
        self.kill_all()

    def _find_dead(self) -> psutil.Process | None:
        return next((p for p in self.procs if not _alive(p)), None)

    def _declare(self, dead: psutil.Process) -> None:
        with self._declaring:
            if self.fault is not None:
                return
            self.fault = (self.cause and self.cause()) or (
                f"a collector process (pid {dead.pid}: an env worker or the inference server) "
                "died (killed, e.g. SIGKILL or the OOM killer, or crashed); collection cannot continue")
        self.kill_all()  # the rest are useless now, and may wait on the dead one



class _Interrupts:
    """The one SIGUSR1 handler of the process, shared by the watchdogs running at a time (the
    collector's and the evaluation env's): it raises the fault of the one whose guard() it interrupts."""

    active: list[ProcessWatchdog] = []
    previous = None

    @classmethod
    def add(cls, watchdog: ProcessWatchdog) -> None:
        if not cls.active:
            cls.previous = signal.signal(signal.SIGUSR1, cls._on_signal)
        cls.active.append(watchdog)

    @classmethod
    def remove(cls, watchdog: ProcessWatchdog) -> None:
        if watchdog in cls.active:
            cls.active.remove(watchdog)
            if not cls.active and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGUSR1, cls.previous)

    @classmethod
    def _on_signal(cls, signum, frame) -> None:
        for watchdog in cls.active:
            if watchdog.fault is not None and watchdog.interruptible:
                raise CollectorFault(watchdog.fault)


def _kill_children() -> None:
    """Every process this one started, but multiprocessing's resource tracker: it stays to unlink the
    shared semaphores once this process is gone."""
    children = [p for p in psutil.Process().children(recursive=True)
                if "resource_tracker" not in " ".join(_cmdline(p))]
    for proc in children:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(children, timeout=5)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
