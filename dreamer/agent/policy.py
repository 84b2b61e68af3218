"""Acting policy for the collector's inference server, its env primer, and a key-safety guard.

Per env step the policy reads only env outputs: the observation(s), `is_init`, and the recurrent
carry `state`, `belief`, `previous_action` that a TensorDictPrimer keeps in the env's tensordict
(the inference server batches slots with no env identity, so no state may live in the policy).
It writes `action` and the next carry under ("next", ...), the way torchrl's recurrent modules do:
env.step keeps policy-written "next" entries, and step_mdp moves them to the root for the next
call. Writing the carry back over its root inputs instead would trip `check_policy_keys`.
"""
from __future__ import annotations

import functools
import multiprocessing
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
)
from torch import nn
from torchrl.data import Unbounded
from torchrl.envs import TensorDictPrimer
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import RSSMStateEstimatorV3

from dreamer.agent.actors import policy_distribution
from dreamer.agent.model import build_nets, config_dict
from dreamer.agent.obs import ObsSpec, sizes

CARRY_KEYS = ("state", "belief", "previous_action")
NEXT_CARRY_KEYS = tuple(("next", k) for k in CARRY_KEYS)


def make_primer(wm_cfg: Any, action_dim: int) -> TensorDictPrimer:
    """Zero-initialised carry in the env tensordict (reset to zeros on every env reset)."""
    s = sizes(wm_cfg)
    return TensorDictPrimer(state=Unbounded((s.S,)), belief=Unbounded((s.deter,)),
                            previous_action=Unbounded((action_dim,)), default_value=0.0)


def primer_factory(wm_cfg: Any, action_dim: int) -> functools.partial:
    """Picklable zero-argument primer factory, for env factories built in worker processes."""
    return functools.partial(make_primer, config_dict(wm_cfg), action_dim)


class ClipAndCarry(nn.Module):
    """Clip to the [-1, 1] action box; the clipped action is both the env action and the next carry.

    Normal samples are unbounded (|a| up to ~1.6 seen). Replay stores what the env executed.
    With the `random_actions` buffer set (replay prefill) actions are uniform instead; it is a
    buffer so that the learner's weight push switches it off in the server, no rebuild needed.
    Discrete actions are float one-hot vectors: nothing to clip; uniform = a random one-hot.
    """

    def __init__(self, random_actions: bool = False, discrete: bool = False):
        super().__init__()
        self.discrete = discrete
        self.register_buffer("random_actions", torch.tensor(random_actions))

    def forward(self, action: torch.Tensor):
        action = action.float()
        if self.discrete:
            index = torch.randint(action.shape[-1], action.shape[:-1], device=action.device)
            uniform = nn.functional.one_hot(index, action.shape[-1]).float()
        else:
            uniform, action = torch.rand_like(action) * 2 - 1, action.clamp(-1.0, 1.0)
        action = torch.where(self.random_actions, uniform, action)
        return action, action.clone()


class DreamerActingPolicy(TensorDictModuleBase):
    """encoder -> RSSMStateEstimatorV3 -> actor, in sample (explore) or mode mode.

    Note: even in mode, the posterior latent z is sampled (torchrl's estimator always samples).
    """

    def __init__(self, nets, explore: bool = True, random_actions: bool = False):
        super().__init__()
        self.explore = explore
        obs_keys = list(nets.obs.keys)
        params, distribution = policy_distribution(nets.discrete)
        self.body = TensorDictSequential(
            TensorDictModule(nets.encoder, obs_keys, ["encoded_latents"]),
            # reads the root carry (zeroed where is_init), writes the new latent under "next"
            RSSMStateEstimatorV3(nets.prior, nets.posterior,
                                 in_keys=["state", "belief", "previous_action", "encoded_latents", "is_init"],
                                 out_keys=[("next", "state"), ("next", "belief")]),
            TensorDictModule(nets.actor, [("next", "state"), ("next", "belief")], params),
            ProbabilisticTensorDictModule(params, ["action"], distribution_class=distribution,
                                          default_interaction_type=InteractionType.RANDOM),
            TensorDictModule(ClipAndCarry(random_actions, nets.discrete), ["action"],
                             ["action", ("next", "previous_action")]),
        )
        self.in_keys = obs_keys + ["is_init", *CARRY_KEYS]
        self.out_keys = ["action", *NEXT_CARRY_KEYS]

    @torch.no_grad()
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        mode = ExplorationType.RANDOM if self.explore else ExplorationType.DETERMINISTIC
        with set_exploration_type(mode):  # explicit: do not depend on the caller's context
            out = self.body(tensordict.select(*self.in_keys))
        return tensordict.update(out.select(*self.out_keys))  # intermediates stay out of replay


def build_acting_policy(nets, explore: bool = True, random_actions: bool = False) -> DreamerActingPolicy:
    """Acting policy sharing `nets` (e.g. `agent.nets`); its state_dict matches the factory's."""
    policy = DreamerActingPolicy(nets, explore, random_actions)
    check_policy_keys(policy)
    return policy


class DreamerPolicyFactory:
    """Picklable zero-arg factory for the inference server. Holds sizes and optional weights only."""

    def __init__(self, wm_cfg: Any, obs: ObsSpec, action_dim: int, *, discrete: bool = False,
                 explore: bool = True, device: str = "cpu", state_dict: dict | None = None,
                 random_actions: bool = False):
        self.wm_cfg = config_dict(wm_cfg)
        self.random_actions = random_actions  # prefill: uniform actions until the first weight push
        self.obs, self.action_dim, self.explore, self.device = obs, action_dim, explore, device
        self.discrete = discrete
        self.state_dict = state_dict  # CPU tensors, e.g. build_acting_policy(agent.nets).state_dict()

    def __call__(self) -> DreamerActingPolicy:
        if multiprocessing.parent_process() is not None and torch.device(self.device).type == "cpu":
            # In the server process: one intra-op thread. Its idle OpenMP threads would otherwise
            # spin on the cores the learner needs (measured: learner 3x slower on 2 cores).
            torch.set_num_threads(1)
        with torch.device(self.device):
            policy = build_acting_policy(build_nets(self.wm_cfg, self.obs, self.action_dim, self.discrete), self.explore,
                                         self.random_actions)
        if self.state_dict is not None:
            policy.load_state_dict(self.state_dict)
        return policy.eval()


def _key(key) -> tuple:
    return (key,) if isinstance(key, str) else tuple(key)


def check_policy_keys(policy: TensorDictModuleBase) -> None:
    """Raise if the policy (or any of its submodules) writes one of its own root input keys.

    The collector captures the policy's inputs for CUDA graphs; a policy that overwrites an
    input in place collapses the captured input and output buffers (torchrl issue #4310).
    """
    inputs = {_key(k) for k in policy.in_keys if _key(k)[0] != "next"}
    written = {_key(k) for k in policy.out_keys}
    for module in policy.modules():
        if isinstance(module, TensorDictModuleBase):
            written |= {_key(k) for k in getattr(module, "out_keys", ())}
    clash = sorted(inputs & written)
    if clash:
        names = ", ".join(k[0] if len(k) == 1 else str(k) for k in clash)
        raise ValueError(
            f"policy writes its own input key(s) {names} at the root; captured CUDA-graph inputs would "
            "be overwritten (torchrl #4310). Write the next carry under ('next', key) or a new name.")
