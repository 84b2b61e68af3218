"""Task sizes and replay bytes, from dm_control alone (no torch: start-up checks use them)."""
from __future__ import annotations

import functools
import math

import collectors  # noqa: F401  (sets MUJOCO_GL before dm_control loads)

# What one stored record holds besides its observation, action and latent context: is_init, is_last
# and the step's done/terminated/truncated flags (5 bools), its reward (float32), step_count,
# policy_version, env_index and the storage's index (4 int64). tests/test_replay.py checks this
# against real storage.
RECORD_OVERHEAD_BYTES = 5 + 4 + 4 * 8


@functools.lru_cache(maxsize=None)
def task_dims(domain: str, task: str) -> tuple[int, int]:
    """(proprio state vector size, action size) of a DMC task; loads it once per process."""
    from dm_control import suite

    env = suite.load(domain, task)
    obs = sum(math.prod(s.shape) for s in env.observation_spec().values())
    return int(obs), int(env.action_spec().shape[0])


def action_dim(domain: str, task: str) -> int:
    return task_dims(domain, task)[1]


def observation_dim(domain: str, task: str) -> int:
    """Size of the concatenated proprio state vector ("observation")."""
    return task_dims(domain, task)[0]


def context_bytes(stoch: int, deter: int) -> int:
    """The stored latent (collectors/records.py ContextSpec): uint8 class per categorical, float16 GRU state."""
    return stoch + 2 * deter


def bytes_per_transition(pixels: tuple[int, int, int] | None, vector_dim: int | None, action_dim: int,
                         context: int = 0) -> int:
    """Host RAM one stored record takes: uint8 pixels at t only (obs[t+1] is the next record),
    float32 vector observation and action, `context` bytes of stored latent. (An episode's final
    observation takes one more record: +0.2% for 500-step DMC episodes.)"""
    image = pixels[0] * pixels[1] * pixels[2] if pixels else 0
    return image + 4 * (vector_dim or 0) + 4 * action_dim + context + RECORD_OVERHEAD_BYTES
