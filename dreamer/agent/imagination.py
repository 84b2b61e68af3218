"""The actor loss's imagination env: torchrl's DreamerEnv with a lean rollout.

torchrl's `DreamerV3ActorLoss` imagines `imagination_horizon` steps with `EnvBase.rollout`, which
per step clones, selects, validates and moves tensordicts around the two small networks it runs
(policy, then prior + reward head): on a CPU with the tiny model that bookkeeping cost about as
much as the networks (rollout 123 ms vs 54 ms in the modules, 15 steps x 1,024 states). For the
actor loss's call (a given start tensordict, no auto-reset, no early stop) `ImaginationEnv.rollout`
runs the same modules in the same order, so it draws the same random numbers, and stacks plain
tensors into the tensordict torchrl's rollout returns (same keys, same values: tests/test_imagination.py).
Any other call goes to torchrl's rollout.

The lean rollout keeps the start latent and the H imagined ones as one [..., H + 1] trajectory
(`ImaginationEnv.trajectory`) whose windows are the rollout's root latents (0..H-1) and next
latents (1..H). torchrl's actor loss runs the critic on the next latents (the lambda return's
bootstrap) and, under REINFORCE, again on the root latents (the baseline): H - 1 of those states
twice. `TrajectoryCritic` sees that both inputs are windows of one trajectory and runs the critic
once over its H + 1 states (measured ~14 ms of a ~290 ms tiny T64 update).

`no_grad`: under REINFORCE no loss term differentiates through the imagined trajectory (the
actor's score function and entropy are taken on detached states and actions, the advantages are
detached, the critic trains on detached states), yet torchrl's actor loss rolls out with gradients
on: every step then saves activations and the compiled prior runs its training graph. With
`no_grad` the update is the same and cheaper.
"""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torchrl.data import Bounded, Composite, OneHot, Unbounded
from torchrl.envs.model_based.dreamer import DreamerEnv
from torchrl.modules import SymExpTwoHot, WorldModelWrapper

LATENT_KEYS = ("state", "belief")
DONE_KEYS = ("done", "terminated")


class Trajectory:
    """A lean rollout's latents, start included: [*batch, steps + 1, ...] each."""

    def __init__(self, latents: dict, dim: int, steps: int):
        self.latents, self.dim, self.steps = latents, dim, steps

    def window(self, key: str, offset: int) -> torch.Tensor:
        return self.latents[key].narrow(self.dim, offset, self.steps)

    def offset_of(self, tensordict) -> int | None:
        """0 if `tensordict` holds the root latents (views of this trajectory), 1 if the next ones."""
        for offset in (0, 1):
            if all(_same_view(tensordict.get(k, None), self.window(k, offset)) for k in LATENT_KEYS):
                return offset
        return None


def _same_view(a, b: torch.Tensor) -> bool:
    return (isinstance(a, torch.Tensor) and a.data_ptr() == b.data_ptr() and a.shape == b.shape
            and a.stride() == b.stride() and a.dtype == b.dtype)


class ImaginationEnv(DreamerEnv):
    no_grad = False
    lean = True  # False: torchrl's EnvBase.rollout (kept for the equality test)
    trajectory: Trajectory | None = None  # of the last lean rollout

    def rollout(self, max_steps, policy=None, callback=None, *, auto_reset=True, tensordict=None,
                break_when_any_done=None, **kwargs):
        with torch.no_grad() if self.no_grad else contextlib.nullcontext():
            if (self.lean and policy is not None and callback is None and not auto_reset and tensordict is not None
                    and break_when_any_done is False and not kwargs):
                return self._imagine(max_steps, policy, tensordict)
            return super().rollout(max_steps, policy, callback, auto_reset=auto_reset, tensordict=tensordict,
                                   break_when_any_done=break_when_any_done, **kwargs)

    def _imagine(self, steps: int, policy, start: TensorDict) -> TensorDict:
        """torchrl's rollout for a never-ending latent env: policy, then world model, `steps` times."""
        batch = start.batch_size
        latent = {k: start.get(k) for k in LATENT_KEYS}
        done = {k: start.get(k) for k in DONE_KEYS}  # DreamerEnv never ends: carried as reset set them
        path = {k: [latent[k]] for k in LATENT_KEYS}
        roots, nexts = [], []
        for _ in range(steps):
            root = policy(TensorDict({**latent, **done}, batch_size=batch))
            stepped = self.world_model(TensorDict({**latent, "action": root.get("action")}, batch_size=batch))
            latent = {k: stepped.get(k) for k in LATENT_KEYS}
            for k in LATENT_KEYS:
                path[k].append(latent[k])
            roots.append(root)
            nexts.append({"reward": stepped.get("reward"), **done})
        dim = len(batch)
        trajectory = Trajectory({k: torch.stack(v, dim) for k, v in path.items()}, dim, steps)
        out = {k: torch.stack([r.get(k) for r in roots], dim) for k in roots[0].keys() if k not in LATENT_KEYS}
        out.update({k: trajectory.window(k, 0) for k in LATENT_KEYS})
        out["next"] = {k: torch.stack([n[k] for n in nexts], dim) for k in nexts[0]}
        out["next"].update({k: trajectory.window(k, 1) for k in LATENT_KEYS})
        self.trajectory = trajectory
        return TensorDict(out, batch_size=(*batch, steps), device=self.device)


class TrajectoryCritic(TensorDictModuleBase):
    """The critic as the actor loss calls it (module docstring): inputs that are windows of the
    env's last trajectory get their window of one critic pass over the whole trajectory; any other
    input, and every input when the rollout records gradients (the dynamics actor: no baseline
    call to share with), goes to the critic."""

    def __init__(self, critic: TensorDictModuleBase, env: ImaginationEnv):
        super().__init__()
        self.critic = critic
        self.in_keys, self.out_keys = list(critic.in_keys), list(critic.out_keys)
        self.__dict__["env"] = env  # not a submodule: the env holds the world model
        self._last = None  # (trajectory, the critic's outputs over it)

    def forward(self, tensordict):
        trajectory = self.env.trajectory
        offset = trajectory.offset_of(tensordict) if trajectory is not None and self.env.no_grad else None
        if offset is None:
            return self.critic(tensordict)
        if self._last is None or self._last[0] is not trajectory:
            whole = TensorDict(dict(trajectory.latents), batch_size=trajectory.latents["state"].shape[:trajectory.dim + 1])
            self._last = (trajectory, self.critic(whole))
        for key in self.out_keys:
            tensordict.set(key, self._last[1].get(key).narrow(trajectory.dim, offset, trajectory.steps))
        if offset == 0:  # the baseline, the actor loss's last call: hold nothing until the next update
            self._last = self.env.trajectory = None
        return tensordict


def imagination_env(n: SimpleNamespace, device, no_grad: bool, nbins: int) -> ImaginationEnv:
    """Latent-only env for the actor loss (prior + reward head; no real env involved)."""
    s = n.sizes
    dynamics = WorldModelWrapper(
        TensorDictModule(n.prior, ["state", "belief", "action"], ["_", "state", "belief"]),
        TensorDictSequential(
            TensorDictModule(n.reward, ["belief", "state"], ["reward_logits"]),
            TensorDictModule(SymExpTwoHot(nbins), ["reward_logits"], ["reward"])))
    # DreamerEnv moves the shared nets to its device: build it on the final device.
    env = ImaginationEnv(dynamics, prior_shape=(s.S,), belief_shape=(s.deter,), device=device)
    env.no_grad = no_grad
    env.observation_spec = Composite(state=Unbounded(s.S), belief=Unbounded(s.deter), device=device)
    env.state_spec = env.observation_spec.clone()
    env.action_spec = (OneHot(n.action_dim, device=device) if n.discrete
                       else Bounded(-1, 1, (n.action_dim,), device=device))
    env.reward_spec = Unbounded((1,), device=device)
    return env
