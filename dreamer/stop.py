"""Ctrl-C / SIGTERM as a request the loop honours at its next safe point.

Raising KeyboardInterrupt from a signal handler can land while the main thread holds one of the
collector's multiprocessing locks (it polls shared Events constantly); shutdown then waits on
that lock forever (seen: a SIGTERM'd run hung in AsyncBatchedCollector.shutdown). So the
handler only records the signal; the loop raises KeyboardInterrupt itself between steps.
A second Ctrl-C raises at once, for a loop that is stuck.
"""
from __future__ import annotations

import contextlib
import signal


class StopRequest:
    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._immediate = False

    def install(self) -> "StopRequest":
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C
        self.signal_name = signal.Signals(signum).name
        if self._immediate:
            raise KeyboardInterrupt(self.signal_name)

    @contextlib.contextmanager
    def immediate(self):
        """Inside, a signal raises at once: for long main-thread work that holds no collector lock
        (torch.compile / CUDA-graph warm-up can take minutes)."""
        self.check()
        self._immediate = True
        try:
            yield
        finally:
            self._immediate = False

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def check(self) -> None:
        """Call at safe points: raises KeyboardInterrupt once a stop was requested."""
        if self.requested:
            raise KeyboardInterrupt(self.signal_name)


@contextlib.contextmanager
def children_ignore_ctrl_c():
    """Processes started inside inherit an ignored SIGINT (Python keeps it ignored at start-up),
    so a terminal's Ctrl-C, sent to the whole process group, reaches only this process, which
    then stops them in order."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
