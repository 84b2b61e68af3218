"""Process watchdog: turns a collector process that dies (SIGKILL, the OOM killer) into a clear error.

Why torchrl's own liveness checks are not enough: a worker killed while it holds one of the
collector's shared multiprocessing locks (an Event's condition lock) leaves that lock taken forever,
and the next `pause()`, weight push or `shutdown()` in the driver blocks on it with no timeout.
The watchdog polls the processes from a thread; on a death it kills the remaining ones, and if the
main thread is inside a collector call (`guard()`), interrupts it with SIGUSR1 so that the call
raises CollectorFault instead of waiting forever. Elsewhere the main loop's `check()` raises it.
"""
from __future__ import annotations

import contextlib
import signal
import threading

import psutil


class CollectorFault(RuntimeError):
    """A collector process died; the collector cannot be stopped the normal way."""


class ProcessWatchdog:
    def __init__(self, pids: list[int], poll_s: float = 0.5):
        self.procs = [psutil.Process(pid) for pid in pids]
        self.poll_s = poll_s
        self.fault: str | None = None
        self.interruptible = False  # the main thread is inside a collector call
        self._stop = threading.Event()
        self._declaring = threading.Lock()
        self._main = threading.main_thread().ident
        self._previous_handler = None
        self._thread = threading.Thread(target=self._watch, name="collector-watchdog", daemon=True)

    def start(self) -> "ProcessWatchdog":
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGUSR1, self._on_signal)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (before a normal shutdown, which ends the processes on purpose)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2 * self.poll_s + 1)
        if self._previous_handler is not None:
            signal.signal(signal.SIGUSR1, self._previous_handler)
            self._previous_handler = None

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
            # kill_all ended the server): name the process that died, not the symptom
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
            if dead is None:
                continue
            self._declare(dead)
            if self.interruptible:
                signal.pthread_kill(self._main, signal.SIGUSR1)
            return

    def _find_dead(self) -> psutil.Process | None:
        return next((p for p in self.procs if not _alive(p)), None)

    def _declare(self, dead: psutil.Process) -> None:
        with self._declaring:
            if self.fault is not None:
                return
            self.fault = (f"a collector process (pid {dead.pid}: an env worker or the inference server) "
                          "died (killed, e.g. SIGKILL or the OOM killer, or crashed); collection cannot continue")
        self.kill_all()  # the rest are useless now, and may wait on the dead one

    def _on_signal(self, signum, frame) -> None:
        if self.fault is not None and self.interruptible:
            raise CollectorFault(self.fault)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
