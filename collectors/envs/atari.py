"""Atari through ale-py (suites `atari` and `atari100k`), with the official DreamerV3's settings.

From the official configs.yaml (danijar/dreamerv3): Atari 100k (`atari100k`) = 64x64 RGB, action
repeat 4, no sticky actions, the game's minimal action set, up to 30 no-op starts; full Atari
(`atari`) = 96x96 gray, sticky actions (p = 0.25), all 18 actions, 30 no-ops. Both: the last two
frames of a repeat max-pooled, bilinear resize, episodes cut at 108,000 frames (`truncated`); game
over is `terminated`; losing a life is not an episode end. The ROMs ship with ale-py.
"""
from __future__ import annotations

import math
import threading

import gymnasium
import numpy as np

from collectors.envs.common import gymnasium_suite, resize

LENGTH_FRAMES = 108_000  # official `length`: 30 minutes of play at 60 frames/s
GRAY_WEIGHTS = np.array([0.299, 0.587, 0.114])  # luminance (an equal average would merge colours)
POOLED_FRAMES = 2
_LOAD_LOCK = threading.Lock()  # ALE's ROM loading is not thread-safe


def games() -> list[str]:
    from ale_py import roms

    return sorted(roms.get_all_rom_ids())


class Atari(gymnasium.Env):
    metadata = {"render_modes": ["rgb_array"]}
    render_mode = "rgb_array"

    def __init__(self, game: str, size: int = 64, gray: bool = False, repeat: int = 4, sticky: bool = False,
                 actions: str = "minimal", noops: int = 30, seed: int | None = None):
        import ale_py
        from ale_py import roms

        self.repeat, self.size, self.gray, self.noops = repeat, size, gray, noops
        self.rng = np.random.default_rng(seed)
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # before construction: no banner
        self.ale = ale_py.ALEInterface()
        self.ale.setInt("random_seed", int(self.rng.integers(0, 2**31)))
        self.ale.setFloat("repeat_action_probability", 0.25 if sticky else 0.0)
        with _LOAD_LOCK:
            self.ale.loadROM(roms.get_rom_path(game))
        self.action_set = (self.ale.getMinimalActionSet() if actions == "minimal" else self.ale.getLegalActionSet())
        height, width = self.ale.getScreenDims()
        self.frames = [np.zeros((height, width, 3), np.uint8) for _ in range(POOLED_FRAMES)]
        self.observation_space = gymnasium.spaces.Dict(
            {"pixels": gymnasium.spaces.Box(0, 255, (size, size, 1 if gray else 3), np.uint8)})
        self.action_space = gymnasium.spaces.Discrete(len(self.action_set))
        self.max_steps = math.ceil(LENGTH_FRAMES / repeat)
        self.duration = 0
        self._noop = ale_py.Action.NOOP

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.ale.reset_game()
        for _ in range(self.rng.integers(self.noops + 1)):  # random no-op start (official)
            self.ale.act(self._noop)
            if self.ale.game_over():
                self.ale.reset_game()
        self.duration = 0
        self._grab(0)
        self.frames[1][:] = self.frames[0]
        return self._observation(), {}

    def step(self, action):
        reward, terminated = 0.0, False
        act = self.action_set[int(action)]
        for i in range(self.repeat):
            reward += self.ale.act(act)
            self.duration += 1
            if i >= self.repeat - POOLED_FRAMES:
                self._grab(i - (self.repeat - POOLED_FRAMES))
            terminated = self.ale.game_over()
            if terminated or self.duration >= LENGTH_FRAMES:
                if i < self.repeat - POOLED_FRAMES:  # ended before the pooled frames: show the last one
                    self._grab(0)
                    self.frames[1][:] = self.frames[0]
                break
        truncated = not terminated and self.duration >= LENGTH_FRAMES
        return self._observation(), reward, terminated, truncated, {}

    def _grab(self, slot: int) -> None:
        self.ale.getScreenRGB(self.frames[slot])

    def _observation(self) -> dict:
        image = resize(np.maximum(self.frames[0], self.frames[1]), self.size)
        if self.gray:
            image = (image @ GRAY_WEIGHTS).astype(np.uint8)[..., None]
        return {"pixels": image}

    def render(self):
        return np.maximum(self.frames[0], self.frames[1])


def make_gymnasium(cfg: dict, seed: int | None = None) -> Atari:
    return Atari(cfg["task"], size=cfg["image_size"], gray=cfg.get("gray", False), repeat=cfg["action_repeat"],
                 sticky=cfg.get("sticky", False), actions=cfg.get("actions", "minimal"),
                 noops=cfg.get("noops", 30), seed=seed)


def check(cfg: dict) -> None:
    if cfg["task"] not in games():
        raise ValueError(f"env.task: unknown Atari game {cfg['task']!r}; ale-py ships: {', '.join(games())}")


SUITE_NAMES = ("atari", "atari100k")  # env.suite values this module serves
SUITE = gymnasium_suite(make_gymnasium, ("pixels",), check=check)
