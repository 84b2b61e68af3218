"""What a checkpoint holds beside the networks, in plain types (tensors, lists, numbers: a weights-only
load builds them): every RNG's state, and replay streams as nested dicts of tensors."""
from __future__ import annotations

import random

import numpy as np
import torch
from tensordict import TensorDictBase


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
