"""Learner: torchrl's DreamerV3OptimizationStepper plus our replay-batch conversion and flag resolution.

Replay records (replay/records.py, sampled [B, T + 1]): obs o_t, action a_t, `is_init` (o_t
starts an episode), `is_last` (a final-observation record), ("next", reward/done/terminated) of
the step out of o_t, and optionally the stored latent after o_t (`replay_context`).

Loss row t (of T) is the step into record t + 1, the official DreamerV3's step layout: it reads
action a_t and trains on observation o_{t+1} with that step's reward and end flags. torchrl's
RSSMRolloutV3 at row t advances the carried latent with a_t and encodes ("next", obs)[t], and on
a row flagged `is_init` it zeroes the carry and a_t first. Flagging row t when record t + 1 starts
an episode therefore gives the official reset: the first observation of an episode is encoded
from a zero state and a zero previous action (what torchrl's acting RSSMStateEstimatorV3 does),
with reward 0 and no end as its targets. (Flagging row t by record t's own is_init, torchrl's
collector layout, would skip o_0 and zero the action taken from it: acting and learning would
disagree after every reset; tests/test_parity.py shows both.)

Record 0 is context only: its stored latent starts the rollout (official replay_context 1), or
zeros without one. After each update the refreshed posteriors, which torchrl's stepper writes
into the loss batch under `replay_context` (row t: the latent after o_{t+1}), go back into replay
(records 1..T), as the official learner does.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.trainers.algorithms import DreamerV3OptimizationStepper

from dreamer.agent.model import DreamerAgent
from patches.regional import REGIONAL_MIN_UPDATES, compile_regions
from replay.records import CONTEXT, ContextSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepperFlags:
    compile: bool  # the whole step (torchrl's stepper)
    cudagraph: bool
    bf16: bool
    regional: bool = False  # only the hot regions (patches/regional.py)

    def describe(self) -> str:
        name = "compiled" if self.compile else ("regionally compiled" if self.regional else "eager")
        return name + (" + CUDA graph" if self.cudagraph else "") + (" bf16" if self.bf16 else " fp32")


def resolve_flags(learner_cfg: Any, device: torch.device, expected_updates: float | None = None) -> StepperFlags:
    """'auto' -> on for CUDA (compile + CUDA graph + bf16). On a CPU, what measured fastest for the
    run's length, compile time included: the regional compile for runs of at least
    REGIONAL_MIN_UPDATES updates, else eager (whole-step compiling takes minutes there). Pixels
    too since MKL runs its AVX-512 kernels on AMD (patches/mkl_amd.py): `s` pixels, one process,
    interleaved, medians of 6: 6.87 s eager, 6.21 s regional (before, 0.98-1.10x: left eager)."""
    cuda = device.type == "cuda"

    def pick(name: str) -> bool:
        value = getattr(learner_cfg, name)
        return cuda if value == "auto" else bool(value)

    mode = learner_cfg.compile
    long_cpu_run = (not cuda and expected_updates is not None
                    and expected_updates >= REGIONAL_MIN_UPDATES)
    regional = mode == "regional" or (mode == "auto" and long_cpu_run)
    flags = StepperFlags(False if mode == "regional" else pick("compile"), pick("cudagraph"), pick("bf16"), regional)
    if flags.cudagraph and not cuda:
        raise ValueError(f"learner.cudagraph=true needs a CUDA learner device (got {device}); "
                         "use auto or false here")
    if flags.bf16 and not cuda:
        log.warning("learner.bf16=true on %s: torchrl's autocast is CUDA-only, training runs in fp32", device)
        flags = StepperFlags(flags.compile, flags.cudagraph, False, flags.regional)
    return flags


def to_loss_batch(batch: TensorDictBase, agent: DreamerAgent, context: ContextSpec | None = None) -> TensorDictBase:
    """Replay [B, T + 1] records -> the [B, T] keys DreamerV3Loss reads (see module docstring)."""
    B, T = batch.shape[0], batch.shape[1] - 1
    starts = batch["is_init"].reshape(B, T + 1, 1)[:, 1:]  # o_{t+1} starts an episode
    nxt = {k: batch[k][:, 1:] for k in agent.obs.keys}
    for k in ("reward", "done", "terminated"):
        value = batch["next", k].reshape(B, T + 1, 1)[:, :T]
        nxt[k] = torch.where(starts, torch.zeros_like(value), value)  # an episode's first obs: no reward, no end
    state = torch.zeros(B, T, agent.state_dim, device=batch.device)
    belief = torch.zeros(B, T, agent.belief_dim, device=batch.device)
    if context is not None:  # the rollout reads the carry at row 0 only
        state[:, 0], belief[:, 0] = context.decode(batch[CONTEXT][:, 0])
    return TensorDict({
        "action": batch["action"][:, :T].float(),
        "is_init": starts,
        "state": state,
        "belief": belief,
        "next": TensorDict(nxt, [B, T]),
    }, [B, T], device=batch.device)


class MetricWindow:
    """Sums of per-update metrics kept on their device; `reduce()` turns the window's means into
    floats with one device-to-host copy (instead of one sync per metric per update). Non-finite
    values are left out of a mean (a skipped update's NaN loss must not poison the window)."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, torch.Tensor] = {}

    def add(self, metrics: dict[str, torch.Tensor | float]) -> None:
        for k, v in metrics.items():
            v = torch.as_tensor(v, dtype=torch.float32)
            finite = torch.isfinite(v)
            self.sums[k] = self.sums.get(k, 0) + torch.where(finite, v, torch.zeros_like(v))
            self.counts[k] = self.counts.get(k, 0) + finite.float()

    def reduce(self) -> dict[str, float]:
        """The means since the last call (keys with no finite value are left out); starts anew."""
        if not self.sums:
            return {}
        keys = list(self.sums)
        device = next(v.device for v in self.sums.values())
        values = torch.stack([self.sums[k].to(device) for k in keys] + [self.counts[k].to(device) for k in keys])
        flat = values.tolist()  # the one sync
        sums, counts = flat[:len(keys)], flat[len(keys):]
        self.sums, self.counts = {}, {}
        return {k: s / c for k, s, c in zip(keys, sums, counts) if c > 0}


class Learner:
    """One DreamerV3 update per `step(batch)`; returns the losses and metrics as 0-dim tensors on
    the learner's device (no host sync: the loop reduces them once per log window, MetricWindow)."""

    def __init__(self, agent: DreamerAgent, learner_cfg: Any, context: ContextSpec | None = None,
                 expected_updates: float | None = None):
        self.agent, self.context = agent, context
        self.flags = resolve_flags(learner_cfg, agent.device, expected_updates)
        if self.flags.regional:  # compiled at the first update, from the on-disk cache when warm
            compile_regions(agent)
        self.stepper = DreamerV3OptimizationStepper(
            agent.loss, agent.optimizer, agent.target_updater,
            compile_train_step=self.flags.compile, cudagraph=self.flags.cudagraph,
            mixed_precision=self.flags.bf16)
        self.needs_warmup = self.flags.compile or self.flags.cudagraph
        self.updates = 0
        self.loss_batch: TensorDictBase | None = None  # of the last step

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        return to_loss_batch(batch.to(self.agent.device), self.agent, self.context)

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
        self.loss_batch = loss_batch
        self.updates += 1
        return {k: v.detach().reshape(()) for k, v in metrics.items() if isinstance(v, torch.Tensor) and v.numel() == 1}

    def refreshed_context(self) -> TensorDict | None:
        """The last step's posteriors [B, T] as stored context for records 1..T (on the CPU), or
        None without a context or if they are not all finite (a skipped update)."""
        if self.context is None or self.loss_batch is None or CONTEXT not in self.loss_batch.keys():
            return None
        latent = self.loss_batch[CONTEXT]
        finite = torch.isfinite(latent["belief"]).all() & torch.isfinite(latent["state"]).all()
        # encoded on the device (uint8 class indices, fp16 belief), then one copy with the flag
        out = TensorDict({"stored": self.context.encode(latent["state"], latent["belief"]),
                          "finite": finite}, []).to("cpu")
        return out["stored"] if bool(out["finite"]) else None
