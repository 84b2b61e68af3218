"""The worked example of docs/environments.md "Adding a suite": a whole suite in one module.

A corridor of `length` cells (task `short`: 5, `long`: 12); the agent starts at the left end, steps
left or right, and earns 1 on reaching the right end (terminated); 4 x length steps truncate.
"""
from __future__ import annotations

import math

import gymnasium
import numpy as np

from collectors.envs.common import ActionRepeat, gymnasium_suite

LENGTHS = {"short": 5, "long": 12}


class Corridor(gymnasium.Env):
    def __init__(self, length: int):
        self.length, self.max_steps = length, 4 * length
        self.observation_space = gymnasium.spaces.Dict(
            {"observation": gymnasium.spaces.Box(0.0, 1.0, (length,), np.float32)})
        self.action_space = gymnasium.spaces.Discrete(2)

    def _obs(self) -> dict:
        return {"observation": np.eye(self.length, dtype=np.float32)[self.position]}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.steps = 0, 0
        return self._obs(), {}

    def step(self, action):
        self.position = min(max(self.position + (1 if int(action) == 1 else -1), 0), self.length - 1)
        self.steps += 1
        terminated = self.position == self.length - 1
        return self._obs(), float(terminated), terminated, self.steps >= self.max_steps and not terminated, {}


def make_gymnasium(cfg: dict, seed: int | None = None) -> gymnasium.Env:
    env = Corridor(LENGTHS[cfg["task"]])
    if cfg["action_repeat"] > 1:
        env = ActionRepeat(env, cfg["action_repeat"])
        env.max_steps = math.ceil(env.env.max_steps / cfg["action_repeat"])
    return env


def check(cfg: dict) -> None:
    if cfg["task"] not in LENGTHS:
        raise ValueError(f"env.task: allowed values are {', '.join(LENGTHS)} (got {cfg['task']!r})")


SUITE = gymnasium_suite(make_gymnasium, ("proprio",), check=check)
