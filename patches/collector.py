"""torchrl's AsyncBatchedCollector: its replay writer thread, which has no public accessor.

The thread moves the workers' chunks into replay; if it dies, collection stops without a word
unless someone looks. Written for torchrl 0.14.1 (patches/__init__.py).
"""
from __future__ import annotations

import threading


def replay_thread(collector) -> threading.Thread | None:
    """The collector's replay writer thread (None before it starts). Fails loudly if torchrl no
    longer has it: the writer's faults would go unseen."""
    if not hasattr(collector, "_replay_thread"):
        raise RuntimeError("torchrl's AsyncBatchedCollector has no _replay_thread (torchrl 0.14.1 has): the "
                           "writer thread's faults would go unseen; check the pinned torchrl")
    return collector._replay_thread


def replay_error(collector) -> BaseException | None:
    """The error that stopped the collector's replay writer thread (None while it runs or after a
    clean end). torchrl sets its shutdown event right after storing it, so the workers then exit:
    their exits are a consequence, and this is the cause."""
    if not hasattr(collector, "_replay_error"):
        raise RuntimeError("torchrl's AsyncBatchedCollector has no _replay_error (torchrl 0.14.1 has): an env's "
                           "fault would be reported as a process death; check the pinned torchrl")
    return collector._replay_error
