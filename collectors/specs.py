"""Task sizes and replay bytes, from dm_control alone (no torch: start-up checks use them)."""
from __future__ import annotations

import functools
import math

import collectors  # noqa: F401  (sets MUJOCO_GL before dm_control loads)

# What one stored transition holds besides its observation and action: done/terminated/truncated/
# is_init flags at t and t+1 (8 bools), reward (float32), step_count at t and t+1, policy_version,
# env_index and the storage's index (5 int64). tests/test_replay.py checks this against real storage.
TRANSITION_OVERHEAD_BYTES = 8 + 4 + 5 * 8


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


def bytes_per_transition(pixels: tuple[int, int, int] | None, vector_dim: int | None, action_dim: int) -> int:
    """Host RAM one stored transition takes: uint8 pixels at t only (obs[t+1] is the next record),
    float32 vector observation and action."""
    image = pixels[0] * pixels[1] * pixels[2] if pixels else 0
    return image + 4 * (vector_dim or 0) + 4 * action_dim + TRANSITION_OVERHEAD_BYTES
