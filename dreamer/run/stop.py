"""Ctrl-C / SIGTERM as a request the loop honours at its next safe point.

Raising KeyboardInterrupt from a signal handler can land while the main thread holds one of the
collector's multiprocessing locks (it polls shared Events constantly); shutdown then waits on
that lock forever (seen: a SIGTERM'd run hung in AsyncBatchedCollector.shutdown). So the
handler only records the signal; the loop raises KeyboardInterrupt itself between steps.
A second Ctrl-C raises at once, for a loop that is stuck.
"""
from __future__ import annotations

import signal
import threading
from typing import Callable, TypeVar

T = TypeVar("T")


class StopRequest:
    def __init__(self) -> None:
        self.signal_name: str | None = None

    def install(self) -> "StopRequest":
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C
        self.signal_name = signal.Signals(signum).name

    def wait_for(self, work: Callable[[], T]) -> T:
        """Runs `work` on a helper thread while the main thread waits, honouring a stop request
        within 0.1 s: for long work that holds no collector lock (torch.compile / CUDA-graph
        warm-up of the first update: minutes on a CPU). Raising from the signal handler into the
        compiling main thread instead aborted the process when the exception crossed torch's C++
        frames (std::terminate, exit -6). After a stop the work may still be running: the caller
        writes its checkpoint and exits the process without waiting for it."""
        self.check()
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["value"] = work()
            except BaseException as err:  # re-raised on the main thread
                outcome["error"] = err

        thread = threading.Thread(target=run, name="dreamer-first-update", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
            self.check()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def check(self) -> None:
        """Call at safe points: raises KeyboardInterrupt once a stop was requested."""
        if self.requested:
            raise KeyboardInterrupt(self.signal_name)
