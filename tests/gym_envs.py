"""Small Gymnasium envs the tests register, as a user registers their own: `env.id=tests.gym_envs:<id>`
imports this module first (Gymnasium's module:id syntax)."""
import ctypes
import threading

import gymnasium
import numpy as np


class ProbeEnv(gymnasium.Env):
    """Observation and action spaces set per registration; ends (terminated) after `length` steps."""

    def __init__(self, observation_space, action_space, length: int = 20):
        self.observation_space, self.action_space, self.length = observation_space, action_space, length
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), 1.0, self.t >= self.length, False, {}


IMAGE = gymnasium.spaces.Box(0, 255, (32, 48, 3), np.uint8)
VECTOR = gymnasium.spaces.Box(-1, 1, (5,), np.float32)
SPACES = {
    "DreamerTest/DictImageVector-v0": (gymnasium.spaces.Dict({"camera": IMAGE, "joints": VECTOR, "speed": VECTOR}),
                                       gymnasium.spaces.Discrete(3)),
    "DreamerTest/Text-v0": (gymnasium.spaces.Text(8), gymnasium.spaces.Discrete(2)),
    "DreamerTest/DictNested-v0": (gymnasium.spaces.Dict({"joints": VECTOR, "goal": gymnasium.spaces.Discrete(4)}),
                                  gymnasium.spaces.Discrete(2)),
    "DreamerTest/MultiDiscrete-v0": (VECTOR, gymnasium.spaces.MultiDiscrete([3, 3])),
    "DreamerTest/Discrete-v0": (gymnasium.spaces.Discrete(6, start=1), gymnasium.spaces.Discrete(2)),
    "DreamerTest/DictTuple-v0": (gymnasium.spaces.Dict({"joints": VECTOR, "pair": gymnasium.spaces.Tuple(
        (VECTOR, VECTOR))}), gymnasium.spaces.Discrete(2)),
    "DreamerTest/GridMission-v0": (gymnasium.spaces.Dict({  # MiniGrid's layout: a grid of codes, text
        "direction": gymnasium.spaces.Discrete(4), "image": gymnasium.spaces.Box(0, 10, (7, 7, 3), np.uint8),
        "mission": gymnasium.spaces.Text(20)}), gymnasium.spaces.Discrete(3)),
}
for env_id, (obs_space, act_space) in SPACES.items():
    if env_id not in gymnasium.registry:
        gymnasium.register(env_id, entry_point=ProbeEnv, max_episode_steps=100,
                           kwargs={"observation_space": obs_space, "action_space": act_space})


class FaultyEnv(gymnasium.Env):
    """CartPole-like probe that turns bad at step `at`: `fault` is nan_obs, inf_obs, nan_reward, or
    shape / dtype (an observation of 5 values, or an image of float32 instead of uint8), or raise (a
    ValueError from step())."""

    observation_space = gymnasium.spaces.Box(-1, 1, (4,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, fault: str = "nan_obs", at: int = 60):
        self.fault, self.at, self.steps = fault, at, 0
        if fault == "dtype":  # an image, as uint8 until `at`
            self.observation_space = gymnasium.spaces.Box(0, 255, (16, 16, 3), np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        self.steps += 1
        obs, reward = self.observation_space.sample(), 1.0
        if self.steps >= self.at:
            if self.fault == "nan_obs":
                obs[1] = np.nan
            elif self.fault == "inf_obs":
                obs[2] = np.inf
            elif self.fault == "nan_reward":
                reward = float("nan")
            elif self.fault == "shape":
                obs = np.zeros(5, np.float32)
            elif self.fault == "dtype":
                obs = obs.astype(np.float32)
            elif self.fault == "raise":
                raise ValueError("the simulator lost its connection")
        return obs, reward, False, self.steps % 50 == 0, {}


for fault in ("nan_obs", "inf_obs", "nan_reward", "shape", "dtype", "raise"):
    env_id = f"DreamerTest/Faulty-{fault}-v0"
    if env_id not in gymnasium.registry:
        gymnasium.register(env_id, entry_point=FaultyEnv, kwargs={"fault": fault})


class HangingEnv(gymnasium.Env):
    """Steps normally, then blocks forever: in its step number `at` (`hang="step"`), in its first
    reset() after `at` steps (`hang="reset"`), or, as the evaluation env only (seeded from 1,000,000
    on), in its step number 5 (`hang="eval"`: in Python, or in native code with `native=True`)."""

    observation_space = gymnasium.spaces.Box(-1, 1, (4,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, hang: str = "step", at: int = 80, native: bool = False):
        self.hang, self.at, self.steps, self.native = hang, at, 0, native
        if hang == "eval":
            self.hang, self.at = None, 5

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None and seed >= 1_000_000 and self.at == 5:
            self.hang = "step"
        if self.hang == "reset" and self.steps >= self.at:
            threading.Event().wait()  # a deadlock: never returns
        return self.observation_space.sample(), {}

    def step(self, action):
        self.steps += 1
        if self.hang == "step" and self.steps >= self.at:
            if self.native:  # a deadlock in native code, as a simulator's: signals do not end the wait
                libc, mutex = ctypes.CDLL(None), ctypes.create_string_buffer(64)  # zeros: a default mutex
                libc.pthread_mutex_lock(mutex)
                libc.pthread_mutex_lock(mutex)  # its own lock again: waits forever
            threading.Event().wait()
        return self.observation_space.sample(), 1.0, False, self.steps % 50 == 0, {}


for hang, native in (("step", False), ("reset", False), ("eval", False), ("eval", True)):
    env_id = f"DreamerTest/Hang-{hang}{'-native' if native else ''}-v0"
    if env_id not in gymnasium.registry:
        gymnasium.register(env_id, entry_point=HangingEnv, kwargs={"hang": hang, "native": native})
