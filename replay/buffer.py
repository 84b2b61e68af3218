"""Sequence replay, one stream per environment.

Each env owns a member buffer (its own ring storage), and the ensemble routes every written
transition by its `env_index` (set by the collector's workers), so a sampled sequence never mixes
two environments. Sequences may cross an episode end; `is_init` marks the first step of the
new episode there, and the world model resets its state on it.
"""
from __future__ import annotations

import math
import multiprocessing as mp
from pathlib import Path

import torch
from tensordict import TensorDictBase
from torchrl.data import (
    LazyTensorStorage,
    ReplayBufferEnsemble,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)
from torchrl.data.replay_buffers import SliceSampler

ENV_INDEX = "env_index"  # the key AsyncBatchedCollector's workers stamp on each transition


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


class SequenceReplay:
    """Routed per-env replay that samples [batch_size, batch_length] sequences."""

    def __init__(self, num_envs: int, capacity: int, batch_size: int, batch_length: int,
                 directory: str | Path | None = None):
        """`directory`: None keeps the streams in RAM; a path keeps them on disk there, one memory-
        mapped stream per env (replay/disk.py: replay.storage=disk)."""
        self.num_envs, self.batch_size, self.batch_length = num_envs, batch_size, batch_length
        self.directory = None if directory is None else Path(directory)
        # Chunked collection does not balance envs exactly, so every member gets an even share.
        per_env = math.ceil(capacity / num_envs)
        members = [
            TensorDictReplayBuffer(
                storage=self._storage(per_env, env),
                # init_key=None: the default ("is_init") marks every slice start as an episode
                # start, which would reset the RSSM at the start of every sampled sequence.
                sampler=SliceSampler(slice_len=batch_length, traj_key=ENV_INDEX, init_key=None,
                                     strict_length=True),
                writer=self._writer(env),
            )
            for env in range(num_envs)
        ]
        self.buffer = ReplayBufferEnsemble(
            *members,
            routing_key=ENV_INDEX,
            p="sampleable",  # only envs with a full sequence stored are drawn
            num_buffer_sampled=batch_size,
            batch_size=batch_size * batch_length,
        )

    def _storage(self, capacity: int, env: int):
        if self.directory is None:
            return CompileSafeStorage(capacity)
        from replay import disk as replay_disk

        return replay_disk.make_storage(capacity, replay_disk.stream_dir(self.directory, env))

    def _writer(self, env: int):
        if self.directory is None:
            return TensorDictRoundRobinWriter()
        from replay import disk as replay_disk

        return replay_disk.JournaledWriter(replay_disk.stream_dir(self.directory, env) / replay_disk.JOURNAL)

    def extend(self, transitions: TensorDictBase) -> None:
        self.buffer.extend(transitions)

    def sample(self) -> TensorDictBase:
        """A [batch_size, batch_length] batch of consecutive records, one env per row, with their
        storage places under ("index", "index"/"buffer_ids")."""
        batch = self.buffer.sample()
        return batch.reshape(self.batch_size, self.batch_length)

    def __len__(self) -> int:
        # len() of the ensemble counts its members; stats() counts transitions.
        return int(self.buffer.stats()["size"])

    def sizes(self) -> list[int]:
        """Transitions stored per env."""
        return [len(member) for member in self.buffer._rbs]

    def can_sample(self) -> bool:
        return any(size >= self.batch_length for size in self.sizes())

    def write_back(self, index: TensorDictBase, values: TensorDictBase, step_count: torch.Tensor) -> int:
        """Writes `values` (e.g. {"replay_context": ...}) into the stored records at `index` (a
        sample's ("index", "index"/"buffer_ids")). A row whose stored step_count differs from
        `step_count` was overwritten since it was sampled (the ring wrapped) and is left alone.
        Returns the rows written. The collector may write other rows meanwhile: no shared state
        beyond the rows' own tensor slices is touched."""
        ids, rows = index["buffer_ids"].reshape(-1), index["index"].reshape(-1)
        values, step_count = values.reshape(-1), step_count.reshape(-1)
        written = 0
        for env in ids.unique().tolist():
            mine = ids == env
            stored = self.member(env).storage._storage  # the ring's TensorDict of preallocated tensors
            env_rows = rows[mine]
            same = stored["step_count"][env_rows].reshape(-1) == step_count[mine]
            env_rows, env_values = env_rows[same], values[mine][same]
            for key in env_values.keys(True, True):
                stored[key][env_rows] = env_values[key]
            written += int(same.sum())
        return written

    def member(self, env: int) -> TensorDictReplayBuffer:
        return self.buffer._rbs[env]

    def stream(self, env: int) -> TensorDictBase | None:
        """Everything stored for one env, oldest first (checkpoints, tests); None if it holds nothing."""
        member = self.member(env)
        if len(member) == 0:  # the lazy storage has no layout before the first write
            return None
        data = member.storage[: len(member)]
        if len(member) == member.storage.max_size:  # the ring wrapped: oldest follows the last write
            last = int(torch.as_tensor(member.storage._last_cursor).reshape(-1)[-1])
            order = torch.arange(last + 1, last + 1 + len(member)) % len(member)
            data = data[order]
        return data
