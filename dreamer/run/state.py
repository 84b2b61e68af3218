"""What a checkpoint holds beside the networks, in plain types (tensors, lists, numbers: a weights-only
load builds them): every RNG's state, and the replay: its streams as nested dicts of tensors (in
RAM), or where its files are (on disk: replay/disk.py; data-parallel, every rank's)."""
from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from replay import disk as replay_disk

log = logging.getLogger(__name__)


def plain_stream(stream: TensorDictBase | None) -> dict | None:
    """A replay stream as nested dicts of tensors (a checkpoint holds only plain types). Cloned: a
    slice of the ring is a view, and torch.save writes a view's whole storage (the full capacity)."""
    return None if stream is None else {"data": stream.clone().to_dict(), "length": stream.shape[0]}


def rng_state() -> dict:
    """Every RNG's state in plain types (tensors, lists, numbers) for a weights-only checkpoint."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos,
                                                        has_gauss, cached],
             "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def replay_state(replay, checkpoint_cfg, world, run_dir: Path, together: bool = True) -> dict | None:
    """The checkpoint's replay entries (`replay`: streams in RAM; `replay_disk`: this process's files;
    `replay_disk_ranks`: every rank's files). Data-parallel, every rank calls this together and
    ranks other than 0 get None; `together=False` (another rank may be gone): rank 0 alone, no replay."""
    on_disk = replay.directory is not None
    keep = checkpoint_cfg.replay and (on_disk or _fits(replay, checkpoint_cfg.replay_max_gb, world.size))
    state = {"replay": None, "replay_disk": None, "replay_disk_ranks": None}
    if world.size == 1:
        if keep and on_disk:
            state["replay_disk"] = replay_disk.checkpoint_state(replay, replay.directory, run_dir)
        elif keep:
            state["replay"] = [plain_stream(replay.stream(e)) for e in range(replay.num_envs)]
        return state
    own = replay_disk.checkpoint_state(replay, replay.directory, run_dir) if keep and on_disk else None
    located = world.gather_object(own) if together else [own] + [None] * (world.size - 1)
    if not world.is_main:
        return None
    if keep and on_disk and all(loc is not None for loc in located):
        state["replay_disk_ranks"] = located
    elif checkpoint_cfg.replay:
        log.info("data-parallel run: checkpoint holds no replay (%s)",
                 "another rank may be gone" if on_disk else "each rank's replay in RAM is its own")
    return state


def _fits(replay, max_gb: float, world_size: int) -> bool:
    """A replay in RAM goes into a single process's checkpoint up to checkpoint.replay_max_gb."""
    if world_size > 1:
        return False
    gib = replay_bytes(replay) / 2**30
    if gib > max_gb:
        log.warning("replay (%.1f GiB) exceeds checkpoint.replay_max_gb; checkpoint holds no replay "
                    "(replay.storage=disk keeps a replay of any size: its checkpoints locate the files)", gib)
    return gib <= max_gb


def restore_replay(replay, state: dict) -> int:
    """The checkpoint's replay back into `replay` (empty): its streams, or its files reopened (see
    dreamer/run/app.py's load_resume_state). Returns how many records on disk were written after the
    checkpoint (ignored)."""
    if state.get("replay_dir") is not None:
        return sum(replay_disk.reopen(replay, state["replay_disk"], Path(state["replay_dir"])))
    for env, stream in enumerate(state["replay"] or []):
        if stream is not None:
            replay.member(env).extend(TensorDict(stream["data"], batch_size=[stream["length"]]))
    return 0


def replay_bytes(replay) -> int:
    total = 0
    for env in range(replay.num_envs):
        member = replay.member(env)
        if len(member):
            total += member.storage[:1].bytes() * len(member)
    return total
