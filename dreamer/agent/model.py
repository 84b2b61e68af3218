"""DreamerV3 agent assembled from torchrl 0.14.1's maintained parts.

Only the small actor heads are ours (torchrl ships no DreamerV3 actor): a bounded normal for
continuous actions, a categorical over one-hot actions with unimix for discrete ones.
Sizes (dreamer/config/groups.py WorldModelConfig): deter -> GRU units, hidden -> RSSM hidden units,
stoch x classes -> latent, cnn_depth x cnn_mults -> conv stages, mlp_units -> every MLP's width,
mlp_layers / head_layers / policy_layers -> depth of the vector encoder and decoder / reward and
continue heads / actor and critic. Loss scales and the optimizer come from LearnerConfig.

Where torchrl's defaults deviate from the official DreamerV3 and what we pass instead:
  * KL: default kl_mode="balanced" clamps each categorical at 1 nat (32 free nats in effect)
    -> kl_mode="separate" (sum over latents, then free nats), with learner.loss_dyn / loss_rep.
  * unimix: 0.0 by default in prior, posterior and model loss -> wm_cfg.unimix (0.01) in all three.
  * recurrent model: default "gru" is the legacy cell -> "block_gru" with wm_cfg.blocks.
  * posterior: default use_rms_norm=False is legacy -> True.
  * pixel loss: default reco_symlog=True symlogs raw uint8 targets (loss ~1e5 at init)
    -> False for pixels (MSE on x/255), True for vectors (symlog MSE).
  * continue loss: off by default (lambda_continue=0) -> 1.0, and the actor imagines
    termination only when given a continuation model -> we pass one. (Without it torchrl's
    actor target is also a one-step TD target instead of the lambda-return: the value estimator
    reads the trailing size-1 dim as time.)
  * slow critic: exists only with slow_critic_regularization>0 and a SoftUpdate -> 1.0, tau 0.02.
  * actor: use_reinforce=False (dynamics backprop) by default -> learner.actor_grad, "reinforce"
    as the official code does for every action space.
  * optimizer: torchrl's LaProp + AGC (official), with per-part learning rates as parameter
    groups (all learner.lr unless overridden).
Speed only (same results, tested against torchrl's path): the actor loss imagines through
dreamer/agent/imagination.py (a lean rollout, no autograd graph under REINFORCE) and the prior's block
GRU runs factored (patches/block_gru.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
)
from torch import nn
from torchrl.modules import (
    DreamerV3ImageDecoder,
    DreamerV3MLP,
    RSSMPosteriorV3,
    RSSMPriorV3,
    SymExpTwoHot,
)
from torchrl.objectives import (
    DreamerV3ActorLoss,
    DreamerV3Loss,
    DreamerV3ModelLoss,
    DreamerV3ValueLoss,
    SoftUpdate,
    symexp,
)
from torchrl.objectives.utils import ValueEstimators

from dreamer.agent.actors import ContinuousActorNet, DiscreteActorNet, policy_distribution
from dreamer.agent.imagination import TrajectoryCritic, imagination_env
from dreamer.agent.obs import KERNEL, ObsEncoder, ObsSpec, sizes
from dreamer.agent.optimizer import GuardedDreamerV3Optimizer
from patches.block_gru import factor_block_gru
from patches.rssm_rollout import RSSMRollout

NBINS = 255  # two-hot bins of reward and value heads (paper)
def build_nets(wm_cfg: Any, obs: ObsSpec, action_dim: int, discrete: bool = False) -> SimpleNamespace:
    """The raw networks. Shared by the learner's modules and the acting policy."""
    s = sizes(wm_cfg)
    encoder = ObsEncoder(obs, s)
    prior = RSSMPriorV3(
        action_shape=(action_dim,), action_dim=action_dim, hidden_dim=s.hidden, rnn_hidden_dim=s.deter,
        num_categoricals=s.stoch, num_classes=s.classes,
        recurrent_model="block_gru", num_blocks=s.blocks,  # default "gru" is the legacy cell
        num_layers=1, prior_num_layers=2, unimix=s.unimix)  # default unimix is 0.0
    factor_block_gru(prior)  # same weights and math, no per-block copies of the input (block_gru.py)
    posterior = RSSMPosteriorV3(
        hidden_dim=s.hidden, num_categoricals=s.stoch, num_classes=s.classes, rnn_hidden_dim=s.deter,
        obs_embed_dim=encoder.out_features, use_rms_norm=True,  # default False is legacy
        num_layers=1, unimix=s.unimix)
    U = s.mlp_units
    return SimpleNamespace(
        sizes=s, obs=obs, action_dim=action_dim, discrete=discrete, encoder=encoder, prior=prior, posterior=posterior,
        pixel_decoder=(DreamerV3ImageDecoder(s.feat, obs.pixels, depth=s.cnn_depth, mults=s.cnn_mults,
                                             kernel_size=KERNEL, num_blocks=s.blocks)
                       if obs.pixels else None),
        vector_decoder=(DreamerV3MLP(s.feat, obs.vector_dim, depth=s.mlp_layers, num_cells=U)
                        if obs.vector_dim else None),
        reward=DreamerV3MLP(s.feat, NBINS, depth=s.head_layers, num_cells=U, outscale=0.0),  # zero init: predicts 0
        cont=DreamerV3MLP(s.feat, 1, depth=s.head_layers, num_cells=U),
        actor=(DiscreteActorNet(s.feat, action_dim, s.policy_layers, U, s.unimix) if discrete
               else ContinuousActorNet(s.feat, action_dim, s.policy_layers, U)),
        value=DreamerV3MLP(s.feat, NBINS, depth=s.policy_layers, num_cells=U, outscale=0.0),
    )


def _world_model(n: SimpleNamespace) -> TensorDictSequential:
    """Observed-sequence model. The rollout keys are EXACTLY torchrl's fast-path keys (scan/compile)."""
    obs_in = [("next", k) for k in n.obs.keys]
    rollout = RSSMRollout(  # torchrl's, minus a discarded draw per step (patches/rssm_rollout.py)
        TensorDictModule(n.prior, ["state", "belief", "action"],
                         [("next", "prior_logits"), ("next", "state"), ("next", "belief")]),
        TensorDictModule(n.posterior, [("next", "belief"), ("next", "encoded_latents")],
                         [("next", "posterior_logits"), ("next", "state")]),
        reset_key="is_init")
    assert rollout._fast_path, "rollout fell off torchrl's tensor fast path (key wiring changed?)"
    feat = [("next", "state"), ("next", "belief")]
    parts = [TensorDictModule(n.encoder, obs_in, [("next", "encoded_latents")]), rollout]
    if n.pixel_decoder is not None:
        parts.append(TensorDictModule(n.pixel_decoder, feat, [("next", "reco_pixels")]))
    if n.vector_decoder is not None:  # predicts symlog(obs); symexp back so the loss sees raw space
        parts += [TensorDictModule(n.vector_decoder, feat, [("next", "reco_symlog")]),
                  TensorDictModule(symexp, [("next", "reco_symlog")], [("next", "reco_observation")])]
    head_in = [("next", "belief"), ("next", "state")]  # same order as the imagination wrappers
    parts += [TensorDictModule(n.reward, head_in, [("next", "reward_logits")]),
              TensorDictModule(SymExpTwoHot(NBINS), [("next", "reward_logits")], [("next", "reward")]),
              TensorDictModule(n.cont, head_in, [("next", "continue_pred")])]
    return TensorDictSequential(*parts)


def _actor(n: SimpleNamespace) -> ProbabilisticTensorDictSequential:
    params, distribution = policy_distribution(n.discrete)
    return ProbabilisticTensorDictSequential(
        TensorDictModule(n.actor, ["state", "belief"], params),
        ProbabilisticTensorDictModule(
            params, ["action"], distribution_class=distribution,
            default_interaction_type=InteractionType.RANDOM, return_log_prob=True,
            log_prob_key="action_log_prob"))


def _critic(n: SimpleNamespace) -> TensorDictSequential:
    return TensorDictSequential(
        TensorDictModule(n.value, ["belief", "state"], ["state_value_logits"]),
        TensorDictModule(SymExpTwoHot(NBINS), ["state_value_logits"], ["state_value"]))


@dataclass
class DreamerAgent:
    nets: SimpleNamespace
    world_model: TensorDictSequential
    actor: ProbabilisticTensorDictSequential
    critic: TensorDictSequential
    model_loss: DreamerV3ModelLoss
    actor_loss: DreamerV3ActorLoss
    value_loss: DreamerV3ValueLoss
    loss: DreamerV3Loss
    optimizer: GuardedDreamerV3Optimizer
    target_updater: SoftUpdate
    device: torch.device

    @property
    def obs(self) -> ObsSpec:
        return self.nets.obs

    @property
    def action_dim(self) -> int:
        return self.nets.action_dim

    @property
    def discrete(self) -> bool:
        return self.nets.discrete

    @property
    def state_dim(self) -> int:
        return self.nets.sizes.S

    @property
    def belief_dim(self) -> int:
        return self.nets.sizes.deter


def actor_gradient(actor_grad: str, discrete: bool) -> str:
    """learner.actor_grad with "auto" resolved for the action space."""
    if actor_grad == "auto":
        return "reinforce" if discrete else "dynamics"
    return actor_grad


def build_agent(wm_cfg: Any, learner_cfg: Any, obs: ObsSpec, action_dim: int,
                device: str | torch.device = "cpu", discrete: bool = False) -> DreamerAgent:
    """World model, actor, critic, DreamerV3Loss, optimizer and slow-critic updater on `device`.

    learner_cfg.actor_grad: "reinforce" (official, every action space: score-function gradient,
    no gradient through the world model) or "dynamics" (v1 for continuous actions: returns
    backpropagated through the imagined dynamics), or "auto": dynamics for continuous actions,
    REINFORCE for discrete (DreamerV2's rule). `discrete`: one-hot actions, REINFORCE only.
    """
    grad = actor_gradient(learner_cfg.actor_grad, discrete)
    if discrete and grad != "reinforce":
        raise ValueError("learner.actor_grad: discrete actions train with reinforce only")
    device = torch.device(device)
    with torch.device(device):
        n = build_nets(wm_cfg, obs, action_dim, discrete)
    s, lc = n.sizes, learner_cfg
    world_model, actor, critic = _world_model(n), _actor(n), _critic(n)

    model_loss = DreamerV3ModelLoss(
        world_model, kl_mode="separate",  # default "balanced" = per-categorical free bits (wrong)
        lambda_dynamic=lc.loss_dyn, lambda_representation=lc.loss_rep, free_bits=lc.free_nats,
        unimix=s.unimix, lambda_continue=1.0,  # continue loss is off by default
        reco_symlog=[k == "observation" for k in obs.keys],  # pixels: MSE on x/255; vectors: symlog MSE
        detach_output=False)  # DreamerV3Loss's replay-value term needs the posterior outputs
    model_loss.set_keys(pixels=obs.keys, reco_pixels=[f"reco_{k}" for k in obs.keys])
    continuation = TensorDictSequential(  # lets imagination terminate (off unless passed)
        TensorDictModule(n.cont, ["belief", "state"], ["continue_logits"]),
        TensorDictModule(nn.Sigmoid(), ["continue_logits"], ["continuation"]))
    imagination = imagination_env(n, device, no_grad=grad == "reinforce", nbins=NBINS)
    actor_loss = DreamerV3ActorLoss(
        actor, TrajectoryCritic(critic, imagination), imagination, continuation_model=continuation,
        imagination_horizon=lc.imagination_horizon, use_reinforce=(grad == "reinforce"),
        entropy_bonus=lc.entropy_coef)
    actor_loss.make_value_estimator(ValueEstimators.TDLambda, gamma=lc.gamma, lmbda=lc.lmbda)
    value_loss = DreamerV3ValueLoss(critic, value_loss="two_hot", gamma=lc.gamma, actor_loss=actor_loss,
                                    slow_critic_regularization=1.0)  # 0 (default) = no slow critic
    target_updater = SoftUpdate(value_loss, tau=0.02)  # slow critic EMA 0.98 (paper)
    loss = DreamerV3Loss(model_loss, actor_loss, value_loss, replay_value_loss_weight=lc.loss_repval,
                         continuation_horizon=1.0 / (1.0 - lc.gamma), lmbda=lc.lmbda)
    # One optimizer over loss.parameters() (world model + actor + online critic; the slow critic is a
    # buffer), split into groups so the config's per-part learning rates apply.
    wm_params, actor_params = list(world_model.parameters()), list(actor.parameters())
    seen = {id(p) for p in wm_params + actor_params}
    critic_params = [p for p in loss.parameters() if id(p) not in seen]
    optimizer = GuardedDreamerV3Optimizer(
        [{"params": wm_params, "lr": lc.part_lr("model")}, {"params": actor_params, "lr": lc.part_lr("actor")},
         {"params": critic_params, "lr": lc.part_lr("critic")}],
        lr=lc.lr, eps=lc.eps, agc=lc.agc, warmup_steps=lc.lr_warmup_steps)
    return DreamerAgent(n, world_model, actor, critic, model_loss, actor_loss, value_loss, loss,
                        optimizer, target_updater, device)


def _numel(module: nn.Module | None) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def count_parameters(agent: Any) -> dict[str, int]:
    """Trainable parameters of world model, actor and critic (the slow critic is a buffer copy).

    Accepts a DreamerAgent or the `build_nets` namespace (count on the meta device for big sizes).
    """
    n = agent.nets if isinstance(agent, DreamerAgent) else agent
    wm = sum(_numel(getattr(n, k)) for k in ("encoder", "prior", "posterior", "pixel_decoder",
                                              "vector_decoder", "reward", "cont"))
    counts = {"world_model": wm, "actor": _numel(n.actor), "critic": _numel(n.value)}
    counts["total"] = sum(counts.values())
    return counts


def config_dict(cfg: Any) -> dict:
    """A plain, picklable dict of a config dataclass / DictConfig / dict."""
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    return dict(cfg)
