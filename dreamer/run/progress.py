"""The progress bar, and the windowed rates, means and memory figures the loop logs."""
from __future__ import annotations

import contextlib
import resource
import time

import numpy as np
import psutil
from tqdm import tqdm

from dreamer.agent.learner import MetricWindow


class Progress:
    """Progress bar plus the windowed rates and averages the logger needs."""

    def __init__(self, total: int, initial: int, updates: int, show: bool = True):
        self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True,
                        smoothing=0.1, mininterval=1.0, disable=not show)
        self.shown = initial
        self.window_start = (time.monotonic(), initial, updates)
        self.losses = MetricWindow()  # device tensors, reduced once per window
        self.episodes: list[tuple[float, int]] = []
        self.last_return: float | None = None

    def add_losses(self, metrics: dict) -> None:
        self.losses.add(metrics)

    def add_episodes(self, episodes: list[tuple[float, int]]) -> None:
        self.episodes += episodes
        if episodes:
            self.last_return = episodes[-1][0]

    def show(self, frames: int, updates: int) -> None:
        self.bar.update(frames - self.shown)
        self.shown = frames
        elapsed = max(time.monotonic() - self.window_start[0], 1e-9)
        post = {"upd": updates, "upd/s": f"{(updates - self.window_start[2]) / elapsed:.2f}"}
        if self.last_return is not None:
            post["return"] = f"{self.last_return:.1f}"
        self.bar.set_postfix(post, refresh=False)

    def window(self, frames: int, updates: int) -> dict[str, float]:
        """Rates and means since the last call; starts a new window."""
        now = time.monotonic()
        t0, f0, u0 = self.window_start
        elapsed = max(now - t0, 1e-9)
        out = {"collect/env_steps_per_s": (frames - f0) / elapsed, "train/updates_per_s": (updates - u0) / elapsed}
        out.update({f"train/{k}": v for k, v in self.losses.reduce().items()})
        if self.episodes:
            out["episode/return"] = float(np.mean([r for r, _ in self.episodes]))
            out["episode/length"] = float(np.mean([n for _, n in self.episodes]))
            out["episode/count"] = len(self.episodes)
        self.window_start, self.episodes = (now, frames, updates), []
        return out

    def close(self) -> None:
        self.bar.close()


def memory_mb() -> dict[str, float]:
    """Resident memory: this process's peak, and the whole process tree now (driver, env workers,
    inference server, wandb's service)."""
    driver = psutil.Process()
    tree = [driver] + driver.children(recursive=True)
    rss = 0
    for proc in tree:
        with contextlib.suppress(psutil.Error):  # a child may exit between listing and reading
            rss += proc.memory_info().rss
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux
    return {"system/driver_peak_rss_mb": peak_kb / 1024, "system/tree_rss_mb": rss / 2**20}
