"""Chunked asynchronous collection into sequence replay.

torchrl's AsyncBatchedCollector with one environment per worker process. With
`transport=process_slot`, workers and a policy-server process exchange observations and actions
through shared-memory slots, and each worker ships `chunk_size` consecutive transitions at a time
to the driver, which writes them into replay; the driver never touches the action path.
`transport=thread` serves the policy from a thread of the driver (debugging; one transition per
message).

The policy arrives as a factory: a picklable zero-argument callable returning a TensorDictModule
(with in_keys/out_keys) that the server process builds for itself. Recurrent state lives in the
env's tensordict (primers), not in the policy, because the server sees batches of ready slots with
no env identity.
"""
from __future__ import annotations

import logging

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import AsyncBatchedCollector
from torchrl.modules.inference_server import InferenceDeviceConfig, InferenceServerConfig

log = logging.getLogger(__name__)


class CollectorSetupError(RuntimeError):
    pass


def build_collector(
    env_fns: list,
    policy_factory,
    *,
    frames_per_batch: int,
    total_frames: int,
    chunk_size: int,
    transport: str = "process_slot",
    static_batch_size: int | None = None,
    policy_device: str = "cpu",
    replay=None,
    records=None,
    on_write=None,
) -> AsyncBatchedCollector:
    """An AsyncBatchedCollector writing chunks into `replay` (a SequenceReplay), or yielding batches.

    `records(td)` turns each batch into what replay stores (replay/records.py ReplayRecords);
    without it transitions are stored as collected. `on_write(td)` sees every batch before it is
    stored, after `records`, on the writer thread (an EpisodeTracker).
    """
    num_envs = len(env_fns)
    if static_batch_size is not None and torch.device(policy_device).type != "cuda":
        # torchrl raises the same later, inside the server; say it with our key names first.
        raise CollectorSetupError(
            "collector.inference_static_batch_size needs a CUDA inference device "
            f"(collector.device resolved to {policy_device!r}); use null on CPU")
    server_config = InferenceServerConfig(
        max_batch_size=static_batch_size or num_envs,
        static_batch_size=static_batch_size,
        min_batch_size=1,
        # The server's idle wake-up period (requests wake it at once with min_batch_size=1) and
        # how soon it applies pushed weights. 1 ms kept an idle server at ~20% of a core.
        timeout=0.01,
    )
    if transport == "process_slot":
        transport_arg, chunk = "auto", chunk_size
    elif transport == "thread":
        server_config.service_backend = "thread"
        transport_arg, chunk = "driver", 1
    else:
        raise CollectorSetupError(f"collector.transport: unknown transport {transport!r}")
    collector = AsyncBatchedCollector(
        list(env_fns),
        policy_factory=policy_factory,
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        env_backend="multiprocessing",
        transport=transport_arg,
        transition_chunk_size=chunk,
        server_config=server_config,
        device_config=InferenceDeviceConfig(
            policy_device=policy_device, output_device="cpu", env_device="cpu", storing_device="cpu"),
        replay_buffer=replay.buffer if replay is not None else None,
        postproc=records,
        post_collect_hook=on_write,
    )
    if transport == "process_slot" and collector.server_backend != "process":
        # "auto" falls back to a thread server with only an INFO log line; we promised processes.
        collector.shutdown(raise_on_error=False)
        raise CollectorSetupError(
            "collector.transport=process_slot: torchrl could not build the process-slot server for "
            "this policy/env (its in_keys must all be env outputs); use collector.transport=thread")
    return collector


class UniformRandomActor(nn.Module):
    """Uniform actions in [-1, 1], or uniform one-hot actions: a stand-in policy."""

    def __init__(self, action_dim: int, discrete: bool = False):
        super().__init__()
        self.action_dim, self.discrete = action_dim, discrete

    def forward(self, is_init: torch.Tensor) -> torch.Tensor:
        batch = is_init.shape[:-1]
        if self.discrete:
            return nn.functional.one_hot(torch.randint(self.action_dim, batch), self.action_dim).float()
        return torch.rand(*batch, self.action_dim) * 2 - 1


class RandomPolicyFactory:
    """Picklable factory of a random TensorDictModule policy for the inference server."""

    def __init__(self, action_dim: int, discrete: bool = False):
        self.action_dim, self.discrete = action_dim, discrete

    def __call__(self) -> TensorDictModule:
        return TensorDictModule(UniformRandomActor(self.action_dim, self.discrete), in_keys=["is_init"],
                                out_keys=["action"])

