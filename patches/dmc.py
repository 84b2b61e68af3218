"""torchrl's DMControlWrapper around a wrapped dm_control env (torchrl 0.14.1: patches/__init__.py).

Its keyword check insists on an env from dm_control's suite; ours is the ActionRepeat wrapper of
collectors/envs/dmc.py around one.
"""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def dreamer_dmc_env() -> type:
    """torchrl's DMControlWrapper, accepting our ActionRepeat wrapper as the inner env (built on first
    use: this module's top level stays torch-free for start-up checks)."""
    from torchrl.envs.libs.dm_control import DMControlWrapper

    class DreamerDMCEnv(DMControlWrapper):
        def _check_kwargs(self, kwargs: dict):
            if "env" not in kwargs:
                raise TypeError("Could not find environment key 'env' in kwargs.")

    return DreamerDMCEnv
