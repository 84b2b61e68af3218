"""Processes spawned by multiprocessing that ignore Ctrl-C and SIGTERM, through an override of
multiprocessing.util.spawnv_passfds (Python 3.11: patches/__init__.py); the run's stop handling
is dreamer/run/stop.py."""
from __future__ import annotations

import contextlib
import multiprocessing.util as mp_util
import signal
import threading


@contextlib.contextmanager
def children_ignore_stop_signals():
    """Processes spawned inside inherit an ignored SIGINT and SIGTERM (Python keeps them ignored at
    start-up), so a terminal's Ctrl-C, sent to the whole process group, or torchrun's SIGTERM to a
    rank's process group, reaches only this process, which then stops them in order (and kills
    what is left: Collection.stop in dreamer/run/collection.py). A worker dying of the signal
    mid-shutdown could leave one of the collector's shared locks taken, and the shutdown waiting
    on it.

    They are ignored here only around each fork/exec (about a millisecond), not for the whole
    block: an ignored signal is discarded, and ignoring it for the seconds the collector takes to
    start lost a Ctrl-C there; the run went on training. (Blocking it instead does not work: any
    other thread, torch's among them, takes a blocked signal and drops it.) Spawns go through
    multiprocessing.util.spawnv_passfds ("spawn" start method, and its resource tracker)."""
    original = mp_util.spawnv_passfds

    def spawn_ignoring_stop_signals(path, args, passfds):
        if threading.current_thread() is not threading.main_thread():
            return original(path, args, passfds)  # only the main thread may set a disposition
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return original(path, args, passfds)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    mp_util.spawnv_passfds = spawn_ignoring_stop_signals
    try:
        yield
    finally:
        mp_util.spawnv_passfds = original
