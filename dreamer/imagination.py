"""The actor loss's imagination env: torchrl's DreamerEnv with a lean rollout.

torchrl's `DreamerV3ActorLoss` imagines `imagination_horizon` steps with `EnvBase.rollout`, which
per step clones, selects, validates and moves tensordicts around the two small networks it runs
(policy, then prior + reward head): on a CPU with the tiny model that bookkeeping cost about as
much as the networks (rollout 123 ms vs 54 ms in the modules, 15 steps x 1,024 states). For the
actor loss's call (a given start tensordict, no auto-reset, no early stop) `ImaginationEnv.rollout`
runs the same modules in the same order, so it draws the same random numbers, and stacks plain
tensors into the tensordict torchrl's rollout returns (same keys, same values: tests/test_imagination.py).
Any other call goes to torchrl's rollout.

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
from tensordict.nn import TensorDictModule, TensorDictSequential
from torchrl.data import Bounded, Composite, OneHot, Unbounded
from torchrl.envs.model_based.dreamer import DreamerEnv
from torchrl.modules import SymExpTwoHot, WorldModelWrapper

LATENT_KEYS = ("state", "belief")
DONE_KEYS = ("done", "terminated")


class ImaginationEnv(DreamerEnv):
    no_grad = False
    lean = True  # False: torchrl's EnvBase.rollout (kept for the equality test)

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
        roots, nexts = [], []
        for _ in range(steps):
            root = policy(TensorDict({**latent, **done}, batch_size=batch))
            stepped = self.world_model(TensorDict({**latent, "action": root.get("action")}, batch_size=batch))
            latent = {k: stepped.get(k) for k in LATENT_KEYS}
            roots.append(root)
            nexts.append({**latent, "reward": stepped.get("reward"), **done})
        dim = len(batch)
        out = {k: torch.stack([r.get(k) for r in roots], dim) for k in roots[0].keys()}
        out["next"] = {k: torch.stack([n[k] for n in nexts], dim) for k in nexts[0]}
        return TensorDict(out, batch_size=(*batch, steps), device=self.device)


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
