"""Small Gymnasium envs the tests register, as a user registers their own: `env.id=tests.gym_envs:<id>`
imports this module first (Gymnasium's module:id syntax)."""
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
    """CartPole-like probe that turns bad at step `at`: `fault` is nan_obs, inf_obs or nan_reward."""

    observation_space = gymnasium.spaces.Box(-1, 1, (4,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, fault: str = "nan_obs", at: int = 60):
        self.fault, self.at, self.steps = fault, at, 0

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
        return obs, reward, False, self.steps % 50 == 0, {}


for fault in ("nan_obs", "inf_obs", "nan_reward"):
    env_id = f"DreamerTest/Faulty-{fault}-v0"
    if env_id not in gymnasium.registry:
        gymnasium.register(env_id, entry_point=FaultyEnv, kwargs={"fault": fault})
