"""The actor heads (torchrl ships no DreamerV3 actor): a bounded normal over [-1, 1] actions and a
categorical over one-hot actions with unimix, and the distribution each one parametrises.
"""
from __future__ import annotations

import torch
from torch import nn
from torchrl.modules import DreamerV3MLP
from torchrl.modules.distributions.continuous import IndependentNormal

from patches.distributions import OneHotActions


class ContinuousActorNet(nn.Module):
    """Our continuous head (torchrl has none): tanh mean, std in [0.1, 1] (JAX repo's bounded normal).

    outscale 0.01 on the last layer keeps initial actions near 0 with std ~0.89.
    """

    def __init__(self, in_features: int, action_dim: int, layers: int, units: int,
                 min_std: float = 0.1, max_std: float = 1.0):
        super().__init__()
        self.backbone = DreamerV3MLP(in_features, None, depth=layers, num_cells=units)
        self.head = DreamerV3MLP(units, 2 * action_dim, depth=0, outscale=0.01)
        self.min_std, self.max_std = min_std, max_std

    def forward(self, state: torch.Tensor, belief: torch.Tensor):
        # (belief, state) order: every head must concatenate the same way.
        mean, std = self.head(self.backbone(belief, state)).chunk(2, -1)
        std = (self.max_std - self.min_std) * torch.sigmoid(std + 2.0) + self.min_std
        return mean.tanh().float(), std.float()  # float: heads may run under bf16 autocast


class DiscreteActorNet(nn.Module):
    """Categorical policy logits over `action_dim` one-hot actions, mixed with 1% uniform (official
    `policy.unimix`: every action keeps some probability, which bounds the REINFORCE gradient)."""

    def __init__(self, in_features: int, action_dim: int, layers: int, units: int, unimix: float):
        super().__init__()
        self.backbone = DreamerV3MLP(in_features, None, depth=layers, num_cells=units)
        self.head = DreamerV3MLP(units, action_dim, depth=0, outscale=0.01)
        self.unimix = unimix

    def forward(self, state: torch.Tensor, belief: torch.Tensor) -> torch.Tensor:
        probs = self.head(self.backbone(belief, state)).float().softmax(-1)
        probs = (1.0 - self.unimix) * probs + self.unimix / probs.shape[-1]
        return probs.log()


def policy_distribution(discrete: bool) -> tuple[list[str], type]:
    """(the actor net's output keys, the distribution class they parametrise)."""
    return (["logits"], OneHotActions) if discrete else (["loc", "scale"], IndependentNormal)
