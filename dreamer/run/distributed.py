"""Data-parallel training over torch.distributed ranks (`torchrun --nproc_per_node=N train.py ...`).

Each rank runs its own collector (collector.num_envs / N envs, its own env seeds) into its own
replay and samples replay.batch_size / N sequences per update; the gradients are averaged over
the ranks (one bucketed all-reduce per update, between the backward and the optimizer step: the
optimizer's step, so it also sits outside torchrl's compiled / CUDA-graph forward-backward), and
the loss module's buffers (return-normalisation statistics) are averaged after the step, so every
rank holds the same weights and statistics (the slow critic follows the critic on every rank).
Each loop iteration the ranks agree on the global env-step count and on whether any rank was
asked to stop: the train ratio counts all ranks' steps and an update, an evaluation or a stop
happens on every rank at the same iteration. Rank 0 alone logs, evaluates and writes checkpoints.

A single-process run (no WORLD_SIZE > 1 in the environment) uses `SingleProcess`: nothing
distributed is initialised.
"""
from __future__ import annotations

import datetime
import hashlib
import os
from typing import Iterable

import torch


def world_size_from_env() -> int:
    """The world size torchrun / SLURM launched us with (1 without a launcher); no torch needed."""
    return int(os.environ.get("WORLD_SIZE", "1"))


class RankLostError(RuntimeError):
    """Another rank ended (killed, crashed): collectives with it fail."""


class SingleProcess:
    rank, size, local_rank = 0, 1, 0
    is_main = True

    def agree(self, frames: int, stop: bool, ready: bool) -> tuple[int, bool, bool]:
        return frames, stop, ready

    def average_gradients(self, params: Iterable[torch.Tensor]) -> None:
        pass

    def average_buffers(self, module: torch.nn.Module) -> None:
        pass

    def broadcast_module(self, module: torch.nn.Module) -> None:
        pass

    def barrier(self) -> None:
        pass

    def broadcast_object(self, value):
        return value

    def gather_object(self, value) -> list | None:
        return [value]

    def in_sync(self, module: torch.nn.Module) -> bool:
        return True

    def close(self) -> None:
        pass


class Ranks(SingleProcess):
    """This process's rank in a process group set up from torchrun's environment (MASTER_ADDR,
    MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK): NCCL when the learner is on CUDA, else gloo."""

    def __init__(self, cuda: bool, timeout_s: float = 1800):
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.is_main = self.rank == 0
        if cuda:
            torch.cuda.set_device(self.local_rank)
        self.device = torch.device(f"cuda:{self.local_rank}" if cuda else "cpu")
        dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=timeout_s))
        # The loop's small agreement runs on gloo over the host even when gradients go over NCCL.
        self.cpu_group = dist.new_group(backend="gloo") if cuda else None

    def _collective(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as err:  # gloo: "Connection closed by peer", NCCL: a watchdog abort
            raise RankLostError(f"rank {self.rank}: another rank of the {self.size} is gone ({err}); "
                                "torchrun's report names it") from err

    def agree(self, frames: int, stop: bool, ready: bool) -> tuple[int, bool, bool]:
        """(env steps over all ranks, whether any rank was asked to stop, whether every rank is
        ready: its replay can sample). A decision taken from one rank's state alone could send
        that rank into an update's all-reduce while the others are in this one (gloo aborts on
        the mismatch: seen as a rank's SIGABRT at the first update)."""
        values = torch.tensor([frames, int(stop), int(not ready)], dtype=torch.int64)
        self._collective(self.dist.all_reduce, values, group=self.cpu_group)
        return int(values[0]), bool(values[1]), not bool(values[2])

    def average_gradients(self, params: Iterable[torch.Tensor]) -> None:
        """Mean of each gradient over the ranks, in one all-reduce of one flat buffer."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        self._collective(self.dist.all_reduce, flat)
        flat /= self.size
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def average_buffers(self, module: torch.nn.Module) -> None:
        """Floating-point buffers (running statistics) averaged over the ranks."""
        buffers = [b for b in module.buffers() if b.is_floating_point()]
        if not buffers:
            return
        flat = torch.cat([b.detach().reshape(-1).float() for b in buffers])
        self._collective(self.dist.all_reduce, flat)
        flat /= self.size
        offset = 0
        with torch.no_grad():
            for b in buffers:
                b.copy_(flat[offset:offset + b.numel()].view_as(b))
                offset += b.numel()

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers on every rank (the same start)."""
        with torch.no_grad():
            for tensor in list(module.parameters()) + list(module.buffers()):
                self._collective(self.dist.broadcast, tensor.data, src=0)

    def barrier(self) -> None:
        """Waits for every rank; a rank already gone is not waited for (this is an exit path)."""
        try:
            self.dist.barrier(group=self.cpu_group)
        except RuntimeError:
            pass

    def broadcast_object(self, value):
        box = [value]
        self._collective(self.dist.broadcast_object_list, box, src=0, group=self.cpu_group)
        return box[0]

    def gather_object(self, value) -> list | None:
        """Every rank's `value` in rank order on rank 0; None on the others."""
        values = [None] * self.size if self.is_main else None
        self._collective(self.dist.gather_object, value, values, dst=0, group=self.cpu_group)
        return values

    def in_sync(self, module: torch.nn.Module) -> bool:
        """True when every rank holds bitwise the same parameters and buffers (digests compared)."""
        digests = [None] * self.size
        self._collective(self.dist.all_gather_object, digests, digest(module), group=self.cpu_group)
        return len(set(digests)) == 1

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


def digest(module: torch.nn.Module) -> str:
    """SHA-256 of a module's parameters and buffers, byte for byte."""
    h = hashlib.sha256()
    for tensor in list(module.parameters()) + list(module.buffers()):
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def connect(cuda: bool) -> SingleProcess:
    """Ranks when launched by torchrun with more than one process, else SingleProcess."""
    return Ranks(cuda) if world_size_from_env() > 1 else SingleProcess()


def rank_share(config: "Config", world: int) -> "Config":
    """One rank's part of a data-parallel run: its envs, collector batch, replay batch and replay
    capacity (the config's values are totals over the ranks; validated to divide)."""
    if world == 1:
        return config
    import copy

    share = copy.deepcopy(config)
    col, rep = share.collector, share.replay
    col.num_envs //= world
    col.frames_per_batch //= world
    if col.inference_static_batch_size is not None:
        col.inference_static_batch_size = max(1, min(col.num_envs, col.inference_static_batch_size // world))
    rep.batch_size //= world
    rep.capacity = max(rep.capacity // world, (rep.batch_length + 1) * col.num_envs)
    return share
