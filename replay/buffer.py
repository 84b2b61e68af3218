"""Sequence replay, one stream per environment.

Each env owns a member buffer (its own ring storage), and the ensemble routes every written
transition by its `env_index` (set by the collector's workers), so a sampled sequence never mixes
two environments. Sequences may cross an episode end; `is_init` marks the first step of the
new episode there, and the world model resets its state on it.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
from tensordict import TensorDictBase
from torchrl.data import ReplayBufferEnsemble, TensorDictReplayBuffer, TensorDictRoundRobinWriter
from torchrl.data.replay_buffers import SliceSampler

from patches.storage import CompileSafeStorage, JournaledWriter, members, newest_index, ring

ENV_INDEX = "env_index"  # the key AsyncBatchedCollector's workers stamp on each transition


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
                storage=self._new_storage(per_env, env),
                # init_key=None: the default ("is_init") marks every slice start as an episode
                # start, which would reset the RSSM at the start of every sampled sequence.
                sampler=SliceSampler(slice_len=batch_length, traj_key=ENV_INDEX, init_key=None,
                                     strict_length=True),
                writer=self._new_writer(env),
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

    def _new_storage(self, capacity: int, env: int):
        if self.directory is None:
            return CompileSafeStorage(capacity)
        from replay import disk as replay_disk

        return replay_disk.make_storage(capacity, replay_disk.stream_dir(self.directory, env))

    def _new_writer(self, env: int):
        if self.directory is None:
            return TensorDictRoundRobinWriter()
        from replay import disk as replay_disk

        return JournaledWriter(replay_disk.stream_dir(self.directory, env) / replay_disk.JOURNAL)

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
        return [len(member) for member in members(self.buffer)]

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
            stored = ring(self.member(env).storage)
            env_rows = rows[mine]
            same = stored["step_count"][env_rows].reshape(-1) == step_count[mine]
            env_rows, env_values = env_rows[same], values[mine][same]
            for key in env_values.keys(True, True):
                stored[key][env_rows] = env_values[key]
            written += int(same.sum())
        return written

    def member(self, env: int) -> TensorDictReplayBuffer:
        return members(self.buffer)[env]

    def stream(self, env: int) -> TensorDictBase | None:
        """Everything stored for one env, oldest first (checkpoints, tests); None if it holds nothing."""
        member = self.member(env)
        if len(member) == 0:  # the lazy storage has no layout before the first write
            return None
        data = member.storage[: len(member)]
        if len(member) == member.storage.max_size:  # the ring wrapped: oldest follows the last write
            last = newest_index(member.storage)
            order = torch.arange(last + 1, last + 1 + len(member)) % len(member)
            data = data[order]
        return data
