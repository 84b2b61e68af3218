"""What an environment emits and takes, and replay bytes, without torch (start-up checks use them).

`env_spec(env_cfg)` answers per suite (DMC, Gymnasium, Atari, Crafter) by loading the task once per
process: observation layout, action size and kind (one-hot discrete or a [-1, 1] box), episode
limit and any per-step statistics the env logs (Crafter's achievements).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Optional

# What one stored record holds besides its observation, action and latent context: is_init, is_last
# and the step's done/terminated/truncated flags (5 bools), its reward (float32), step_count,
# policy_version, env_index and the storage's index (4 int64). tests/test_replay.py checks this
# against real storage.
RECORD_OVERHEAD_BYTES = 5 + 4 + 4 * 8


@dataclass(frozen=True)
class EnvSpec:
    pixels: Optional[tuple[int, int, int]]  # uint8 [C, H, W], or None
    vector_dim: Optional[int]  # float32 "observation" [D], or None
    action_dim: int  # one-hot size (discrete) or box size in [-1, 1] (continuous)
    discrete: bool
    max_steps: int  # the episode's time limit in agent steps (evaluation stops there)
    stats: tuple[str, ...] = ()  # per-step uint8 statistics under ("next", key), e.g. achievements
    stats_dim: int = 0
    text_keys: tuple[str, ...] = ()  # string entries of a Dict observation the agent does not read


ENV_FIELDS = ("suite", "domain", "task", "id", "obs", "image_size", "action_repeat", "gray", "sticky",
              "actions", "noops")


def env_key(env_cfg: Any) -> tuple:
    """The fields that decide an env's spec, from a dataclass, DictConfig or dict (old checkpoints
    lack the suite keys: DMC)."""
    get = env_cfg.get if isinstance(env_cfg, dict) else lambda k, d=None: getattr(env_cfg, k, d)
    defaults = {"suite": "dmc", "id": None, "gray": False, "sticky": False, "actions": "minimal", "noops": 0}
    return tuple(get(k, defaults.get(k)) for k in ENV_FIELDS)


def env_spec(env_cfg: Any) -> EnvSpec:
    return _spec(env_key(env_cfg))


@functools.lru_cache(maxsize=None)
def _spec(key: tuple) -> EnvSpec:
    from collectors.envs.suite import suite

    cfg = dict(zip(ENV_FIELDS, key))
    return suite(cfg["suite"]).spec(cfg)


def gymnasium_spec(env) -> EnvSpec:
    """The spec of one of our Gymnasium envs (collectors/envs/common.py `dreamer_gymnasium`)."""
    import gymnasium

    spaces = env.observation_space.spaces
    pixels = spaces.get("pixels")
    stats = tuple(k for k in spaces if k not in ("pixels", "observation"))
    action = env.action_space
    discrete = isinstance(action, gymnasium.spaces.Discrete)
    return EnvSpec(
        pixels=(pixels.shape[2], pixels.shape[0], pixels.shape[1]) if pixels is not None else None,
        vector_dim=spaces["observation"].shape[0] if "observation" in spaces else None,
        action_dim=int(action.n) if discrete else int(action.shape[0]), discrete=discrete,
        max_steps=env.max_steps, stats=stats, stats_dim=sum(math.prod(spaces[k].shape) for k in stats),
        text_keys=getattr(env, "text_keys", ()))


def context_bytes(stoch: int, deter: int) -> int:
    """The stored latent (replay/records.py ContextSpec): uint8 class per categorical, float16 GRU state."""
    return stoch + 2 * deter


def bytes_per_transition(pixels: tuple[int, int, int] | None, vector_dim: int | None, action_dim: int,
                         context: int = 0, stats: int = 0) -> int:
    """Host RAM one stored record takes: uint8 pixels at t only (obs[t+1] is the next record),
    float32 vector observation and action (one-hot for discrete actions), `context` bytes of stored
    latent, `stats` uint8 statistics. (An episode's final observation takes one more record: +0.2%
    for 500-step DMC episodes.)"""
    image = math.prod(pixels) if pixels else 0
    return image + 4 * (vector_dim or 0) + 4 * action_dim + context + stats + RECORD_OVERHEAD_BYTES


def spec_bytes(spec: EnvSpec, context: int = 0) -> int:
    return bytes_per_transition(spec.pixels, spec.vector_dim, spec.action_dim, context, spec.stats_dim)


