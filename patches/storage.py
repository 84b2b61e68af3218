"""torchrl's replay storages and writers, where the app needs more than their public API.

* A storage length that holds while torch compiles in another thread (`SharedLength`).
* A writer that journals the write count it is about to reach (`JournaledWriter`, disk replay).
* Named access to the ring's state: its tensors, newest index, writer position, and restoring
  them when disk replay reopens its files (torchrl has no public API for a storage's cursor).
Written for torchrl 0.14.1 (patches/__init__.py); tests/test_replay*.py cover each.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import torch
from tensordict import TensorDict
from torchrl.data import LazyMemmapStorage, LazyTensorStorage, TensorDictRoundRobinWriter


class SharedLength:
    """A torchrl tensor storage whose length does not depend on torch.compiler.is_compiling().

    torchrl keeps a storage's length in a shared mp.Value, except while "compiling", when it
    stores a plain int (Dynamo cannot trace an mp.Value). torch raises that flag for the whole
    process while any thread compiles (torch/_dynamo/convert_frame.py, compile_inner), so a write
    from the collector's writer thread while the learner compiled its regions replaced the shared
    counter by an int: every later write kept the int, and `len()` then failed outside the compile
    ('int' object has no attribute 'value', e.g. in the final checkpoint after a collector fault).
    This storage is never traced, so it always uses the shared counter.
    """

    @property
    def _len(self) -> int:
        return self._shared_len().value

    @_len.setter
    def _len(self, value: int) -> None:
        self._shared_len().value = value

    def _shared_len(self):
        shared = getattr(self, "_len_value", None)
        if not hasattr(shared, "value"):
            shared = self._len_value = mp.Value("i", 0 if shared is None else int(shared))
        return shared


class CompileSafeStorage(SharedLength, LazyTensorStorage):
    """torchrl's LazyTensorStorage with the shared length above (replay.storage=memory)."""


class MemmapStorage(SharedLength, LazyMemmapStorage):
    """torchrl's LazyMemmapStorage with the shared length above (replay.storage=disk)."""


class JournaledWriter(TensorDictRoundRobinWriter):
    """torchrl's round-robin writer that records, before writing, the write count an extend will reach."""

    def __init__(self, journal: Path):
        super().__init__()
        self.journal = journal
        self._fd = None

    def extend(self, data):
        self.mark(self._write_count + len(data))
        return super().extend(data)

    def mark(self, written: int) -> None:
        if self._fd is None:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.journal, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(self._fd, int(written).to_bytes(8, "little"), 0)

    def __getstate__(self):
        state = super().__getstate__()
        state["_fd"] = None  # a file descriptor does not travel
        return state


def members(ensemble) -> list:
    """A ReplayBufferEnsemble's member buffers."""
    return list(ensemble._rbs)


def ring(storage) -> TensorDict:
    """A tensor storage's preallocated tensors (the whole ring, written or not)."""
    return storage._storage


def newest_index(storage) -> int:
    """The ring index of the record written last."""
    return int(torch.as_tensor(storage._last_cursor).reshape(-1)[-1])


def writer_position(buffer) -> tuple[int, int]:
    """(the ring index the next record goes to, records written since the start) of a member buffer."""
    return int(buffer._writer._cursor), int(buffer._writer._write_count)


def restore_ring(buffer, data: TensorDict, length: int, cursor: int, written: int) -> None:
    """Makes a member buffer's (empty) storage hold `data` as its ring: `length` records, the next
    written at `cursor`, `written` in all so far."""
    storage, writer = buffer._storage, buffer._writer
    storage._storage = data
    storage.initialized = True
    storage._len = length
    if length:
        storage._set_last_cursor((cursor - 1) % data.shape[0])  # the ring's newest record
    writer._cursor, writer._write_count = cursor, written


def resample_shape(ensemble, batch: int, length: int) -> None:
    """Makes a filled ensemble sample [batch, length] sequences (a benchmark's other shapes, no copy)."""
    for member in ensemble._rbs:
        member._sampler.slice_len = length
    ensemble.num_buffer_sampled, ensemble._batch_size = batch, batch * length
