"""Env heartbeats: how long each env worker has been inside `step()` or `reset()`, for the driver's
watchdog (collectors/watchdog.py), which ends a run whose env hangs (collector.env_timeout_s).

The last transform of a worker's env writes one small record into a file before the env steps or
resets and again once it returns: (pid, phase, since, steps), `since` on CLOCK_MONOTONIC, which all
processes of a machine share. One pwrite each way: microseconds against a step of an env.
"""
from __future__ import annotations

import os
import struct
import time

from torchrl.envs import Transform

RECORD = struct.Struct("<qqdq")  # pid, phase, since (monotonic s), env steps
PHASES = {0: None, 1: "reset()", 2: "step()"}


def read(path: str) -> tuple[int, str | None, float, int] | None:
    """(pid, "step()" / "reset()" / None when idle, since, env steps), or None before the first write."""
    try:
        with open(path, "rb") as f:
            data = f.read(RECORD.size)
    except FileNotFoundError:
        return None
    if len(data) < RECORD.size:
        return None
    pid, phase, since, steps = RECORD.unpack(data)
    return pid, PHASES.get(phase), since, steps


class Heartbeat(Transform):
    def __init__(self, path: str):
        super().__init__(in_keys=[], out_keys=[])
        self.path, self.steps, self._fd = path, 0, None

    def _beat(self, phase: int) -> None:
        if self._fd is None:  # opened in the worker process (the transform is built there)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(self._fd, RECORD.pack(os.getpid(), phase, time.monotonic(), self.steps), 0)

    def _inv_call(self, tensordict):  # before the env steps
        self._beat(2)
        return tensordict

    def _step(self, tensordict, next_tensordict):
        self.steps += 1
        self._beat(0)
        return next_tensordict

    def _reset_env_preprocess(self, tensordict):  # before the env resets
        self._beat(1)
        return tensordict

    def _reset(self, tensordict, tensordict_reset):
        self._beat(0)
        return tensordict_reset
