"""Replay sampling off the learner's critical path: the next batches are sampled on a background
thread into a bounded queue, pinned and copied to the learner's device with `non_blocking=True`, so
that per update the learner waits for max(sample, update) instead of their sum.

A sample never sees half of a written chunk: the collector's `extend` and `sample` hold the same
replay lock (torchrl's ReplayBuffer `_replay_lock`). `paused()` lets the in-flight sample finish
and takes no new one (checkpoints: the RNG and replay they save are not moving); `close()` stops
the thread. An error in the thread is raised by the next `get()`.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Callable

import torch
from tensordict import TensorDictBase

META_KEYS = ("index", "step_count")  # what the learner's write-back needs, kept on the host


class Prefetcher:
    def __init__(self, sample: Callable[[], TensorDictBase], device: str | torch.device, depth: int = 1):
        self._sample, self.device = sample, torch.device(device)
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop, self._go = threading.Event(), threading.Event()
        self._go.set()
        self._sampling = threading.Lock()  # held while a sample is taken: paused() waits on it
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="replay-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._sampling:
                    item = self._prepare(self._sample()) if self._go.is_set() and not self._stop.is_set() else None
                if item is None:
                    time.sleep(0.01)
                    continue
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.05)
                        break
                    except queue.Full:
                        continue
        except BaseException as err:  # raised by the next get()
            self._error = err

    def _prepare(self, batch: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        meta = batch.select(*META_KEYS).clone()
        if self.device.type == "cuda":
            batch = batch.pin_memory().to(self.device, non_blocking=True)
        return batch, meta

    def get(self, timeout: float = 600.0) -> tuple[TensorDictBase, TensorDictBase]:
        """(the batch on the learner's device, its index and step_count on the host)."""
        waited = 0.0
        while True:
            if self._stop.is_set():  # closed: batches still queued are not handed out
                raise RuntimeError("replay prefetch thread is stopped")
            if self._error is not None:
                raise RuntimeError("replay prefetch thread failed") from self._error
            try:
                return self._queue.get(timeout=0.05)
            except queue.Empty:
                waited += 0.05
                if not self._thread.is_alive() and self._error is None:
                    raise RuntimeError("replay prefetch thread is stopped")
                if waited >= timeout:
                    raise TimeoutError(f"no replay batch within {timeout:.0f} s")

    @contextlib.contextmanager
    def paused(self):
        """No sampling inside (the in-flight one finishes first); queued batches stay."""
        self._go.clear()
        with self._sampling:  # the in-flight sample, if any, has finished
            pass
        try:
            yield
        finally:
            self._go.set()

    def close(self) -> None:
        self._stop.set()
        self._go.set()
        self._thread.join(timeout=10)
