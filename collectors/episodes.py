"""Counts transitions and finished episodes as the collector writes them (its post-collect hook).

The hook runs on the collector's writer thread; the training loop reads from the main thread,
hence the lock. Chunks of one env arrive in order, so a running sum per env gives each return.
"""
from __future__ import annotations

import threading
import time

from tensordict import TensorDictBase

from replay.records import transitions_in
from replay.buffer import ENV_INDEX


class EpisodeTracker:
    def __init__(self, stats: tuple[str, ...] = ()):
        self.stats = stats  # per-step uint8 vectors under ("next", key): their values at each episode's end
        self._new_stats: list[dict[str, list[int]]] = []
        self._lock = threading.Lock()
        self._running: dict[int, list[float]] = {}  # env -> [return, length]
        self._new: list[tuple[float, int]] = []
        self.frames = 0  # transitions written since this tracker was made
        self.episodes = 0
        self.writer_cpu = 0.0  # CPU seconds of the writer thread (the collection driver) so far

    def __call__(self, td: TensorDictBase) -> None:
        td = td.reshape(-1)
        steps = transitions_in(td)
        if not steps.all():
            td = td[steps]  # an episode's final-observation record is not an env step
        envs = td[ENV_INDEX].reshape(-1).tolist()
        rewards = td["next", "reward"].reshape(-1).tolist()
        done = td["next", "done"].reshape(-1)
        dones = done.tolist()
        ends = {k: td["next", k][done].tolist() for k in self.stats}
        with self._lock:
            self._new_stats += [{k: ends[k][i] for k in self.stats} for i in range(sum(dones))] if self.stats else []
            self.writer_cpu = time.thread_time()
            self.frames += len(envs)
            for env, reward, done in zip(envs, rewards, dones):
                ret = self._running.setdefault(env, [0.0, 0])
                ret[0] += reward
                ret[1] += 1
                if done:
                    self._new.append((ret[0], ret[1]))
                    self.episodes += 1
                    self._running[env] = [0.0, 0]

    def pop_finished(self) -> list[tuple[float, int]]:
        """Episodes (return, length) finished since the last call."""
        with self._lock:
            new, self._new = self._new, []
        return new

    def pop_stats(self) -> list[dict[str, list[int]]]:
        """The stats' final values of each episode finished since the last call (same order)."""
        with self._lock:
            new, self._new_stats = self._new_stats, []
        return new


class SuccessRates:
    """Per-achievement success rates over all training episodes so far (the Crafter benchmark's
    definition: the share of episodes in which it was unlocked at least once), in percent."""

    def __init__(self, names: list[str]):
        self.names, self.episodes = list(names), 0
        self.unlocked = [0] * len(self.names)

    def add(self, vectors: list[list[int]]) -> None:
        for vector in vectors:
            self.episodes += 1
            self.unlocked = [u + bool(v) for u, v in zip(self.unlocked, vector)]

    def rates(self) -> dict[str, float]:
        return {n: 100.0 * u / max(self.episodes, 1) for n, u in zip(self.names, self.unlocked)}
