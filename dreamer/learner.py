"""Learner: torchrl's DreamerV3OptimizationStepper plus our replay-batch conversion and flag resolution.

Replay format (collectors/replay.py, [B, T]): root obs at t (`pixels` / `observation`), `action`,
`is_init`, and ("next", reward/done/terminated). The loss reads the obs that FOLLOWS the action,
("next", obs). If the collector keeps ("next", "pixels") / ("next", "observation") we use them
(exact). If it drops them, we take obs[t+1] from the next record and train on T-1 steps; where
record t+1 starts a new episode the true final obs was never stored, so we repeat obs[t]
(an approximate target on one transition per episode).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.trainers.algorithms import DreamerV3OptimizationStepper

from dreamer.agent import DreamerAgent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepperFlags:
    compile: bool
    cudagraph: bool
    bf16: bool


def resolve_flags(learner_cfg: Any, device: torch.device) -> StepperFlags:
    """'auto' -> on for CUDA (compile + CUDA graph + bf16), eager fp32 on CPU (measured faster there)."""
    cuda = device.type == "cuda"

    def pick(name: str) -> bool:
        value = getattr(learner_cfg, name)
        return cuda if value == "auto" else bool(value)

    flags = StepperFlags(pick("compile"), pick("cudagraph"), pick("bf16"))
    if flags.cudagraph and not cuda:
        raise ValueError(f"learner.cudagraph=true needs a CUDA learner device (got {device}); "
                         "use auto or false here")
    if flags.bf16 and not cuda:
        log.warning("learner.bf16=true on %s: torchrl's autocast is CUDA-only, training runs in fp32", device)
        flags = StepperFlags(flags.compile, flags.cudagraph, False)
    return flags


def to_loss_batch(batch: TensorDictBase, agent: DreamerAgent) -> TensorDictBase:
    """Replay [B, T] records -> the keys DreamerV3Loss reads (see module docstring)."""
    B, T = batch.shape[:2]
    obs_keys = agent.obs.keys
    have_next = all(("next", k) in batch.keys(True, True) for k in obs_keys)
    n = T if have_next else T - 1
    is_init = batch["is_init"].reshape(B, T, 1)
    nxt = {k: batch["next", k].reshape(B, T, 1)[:, :n] for k in ("reward", "done", "terminated")}
    for k in obs_keys:
        if have_next:
            nxt[k] = batch["next", k]
        else:
            obs = batch[k]
            boundary = is_init[:, 1:].reshape(B, n, *[1] * (obs.dim() - 2))  # t+1 starts an episode
            nxt[k] = torch.where(boundary, obs[:, :-1], obs[:, 1:])
    # Replay context: the loss reads root state/belief at t=0 only. We start from zeros (the RSSM
    # warms up within a few steps); the policy's ("next","state"/"belief") could be used instead.
    return TensorDict({
        "action": batch["action"][:, :n].float(),
        "is_init": is_init[:, :n],
        "state": torch.zeros(B, n, agent.state_dim, device=batch.device),
        "belief": torch.zeros(B, n, agent.belief_dim, device=batch.device),
        "next": TensorDict(nxt, [B, n]),
    }, [B, n], device=batch.device)


class Learner:
    """One DreamerV3 update per `step(batch)`; returns the losses and metrics as floats."""

    def __init__(self, agent: DreamerAgent, learner_cfg: Any):
        self.agent = agent
        self.flags = resolve_flags(learner_cfg, agent.device)
        self.stepper = DreamerV3OptimizationStepper(
            agent.loss, agent.optimizer, agent.target_updater,
            compile_train_step=self.flags.compile, cudagraph=self.flags.cudagraph,
            mixed_precision=self.flags.bf16)
        self.needs_warmup = self.flags.compile or self.flags.cudagraph
        self.updates = 0

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        return to_loss_batch(batch.to(self.agent.device), self.agent)

    def warmup(self, sample: TensorDictBase) -> None:
        """Compile/capture on a sample of the real batch shape. torchrl restores buffers and RNG and
        does not step the optimizer, so warm-up is not an update."""
        if self.needs_warmup:
            self.stepper.warmup(self.prepare(sample))
            self.needs_warmup = False

    def step(self, batch: TensorDictBase) -> dict[str, float]:
        loss_batch = self.prepare(batch)
        if self.needs_warmup:  # first call on a compiled/captured learner
            self.stepper.warmup(loss_batch)
            self.needs_warmup = False
        metrics = self.stepper.step(None, loss_batch)
        self.updates += 1
        return {k: float(v) for k, v in metrics.items() if isinstance(v, torch.Tensor) and v.numel() == 1}
