"""Crafter (suite `crafter`): 64x64 RGB, 17 discrete actions, 10,000-step episodes.

Task `reward` (the benchmark) or `noreward`. Dying is `terminated`; the 10,000-step limit is
`truncated`. Each step also emits `achievements`: uint8 [22], which achievements this episode has
unlocked so far; the training loop turns the final values into success rates and the Crafter
score (`crafter_score`, the benchmark's own definition).
"""
from __future__ import annotations

import math

import gymnasium
import numpy as np

from collectors.envs.common import ActionRepeat, gymnasium_suite

LENGTH = 10_000
ACTIONS = 17


def achievement_names() -> list[str]:
    import crafter

    return list(crafter.constants.achievements)  # 22, sorted


def crafter_score(success_rates_percent: list[float]) -> float:
    """The Crafter score (Hafner 2021): exp(mean(log(1 + s_i))) - 1 over the 22 success rates in %."""
    rates = np.asarray(success_rates_percent, dtype=np.float64)
    return float(np.exp(np.mean(np.log(1.0 + rates))) - 1.0)


class Crafter(gymnasium.Env):
    metadata = {"render_modes": ["rgb_array"]}
    render_mode = "rgb_array"

    def __init__(self, task: str = "reward", size: int = 64, seed: int | None = None):
        import crafter

        if task not in ("reward", "noreward"):
            raise ValueError(f"env.task: Crafter's tasks are reward and noreward (got {task!r})")
        self._env = crafter.Env(size=(size, size), reward=(task == "reward"), length=LENGTH, seed=seed)
        self.names = achievement_names()
        self.observation_space = gymnasium.spaces.Dict({
            "pixels": gymnasium.spaces.Box(0, 255, (size, size, 3), np.uint8),
            "achievements": gymnasium.spaces.Box(0, 1, (len(self.names),), np.uint8)})
        self.action_space = gymnasium.spaces.Discrete(ACTIONS)
        self.max_steps = LENGTH
        self._last = None

    def reset(self, *, seed=None, options=None):
        # Crafter seeds each episode's world from its constructor seed and the episode count.
        self._last = self._env.reset()
        return {"pixels": self._last, "achievements": np.zeros(len(self.names), np.uint8)}, {}

    def step(self, action):
        image, reward, done, info = self._env.step(int(action))
        self._last = image
        unlocked = np.array([info["achievements"][k] > 0 for k in self.names], np.uint8)
        terminated = bool(done and info["discount"] == 0)
        return {"pixels": image, "achievements": unlocked}, float(reward), terminated, bool(done) and not terminated, {}

    def render(self):
        return self._last


def make_gymnasium(cfg: dict, seed: int | None = None) -> gymnasium.Env:
    env = Crafter(cfg["task"], size=cfg["image_size"], seed=seed)
    if cfg["action_repeat"] > 1:
        env = ActionRepeat(env, cfg["action_repeat"])
        env.max_steps = math.ceil(LENGTH / cfg["action_repeat"])
    return env


def check(cfg: dict) -> None:
    if cfg["task"] not in ("reward", "noreward"):
        raise ValueError(f"env.task: allowed values are reward, noreward (got {cfg['task']!r})")


SUITE = gymnasium_suite(make_gymnasium, ("pixels",), check=check)
