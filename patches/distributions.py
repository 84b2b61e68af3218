"""torchrl's one-hot categorical, as the RSSM and evaluation need it (torchrl 0.14.1: patches/__init__.py)."""
from __future__ import annotations

import torch
from torch import nn
from torchrl.modules.distributions.discrete import OneHotCategorical


class OneHotActions(OneHotCategorical):
    """torchrl's OneHotCategorical with float samples (the RSSM's action input) and a one-hot mode
    (torchrl's marks every tied maximum, a multi-hot action)."""

    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:
        return super().sample(sample_shape).float()

    @property
    def mode(self) -> torch.Tensor:
        return nn.functional.one_hot(self.logits.argmax(-1), self.logits.shape[-1]).float()

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode
