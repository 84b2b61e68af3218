"""What the agent observes: the observation layout (ObsSpec), the world model's sizes, and the
multi-encoder (pixels through a CNN, a vector through symlog and an MLP)."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn
from torchrl.modules import DreamerV3ImageEncoder, DreamerV3MLP
from torchrl.objectives import symlog

KERNEL = 5  # official; v1 used 4, but torchrl's conv blocks need an odd kernel

@dataclass(frozen=True)
class ObsSpec:
    """What the env emits: pixels [C, H, W] uint8 and/or a proprio vector [D]."""

    pixels: tuple[int, int, int] | None = (3, 64, 64)
    vector_dim: int | None = None

    def __post_init__(self) -> None:
        if self.pixels is None and not self.vector_dim:
            raise ValueError("ObsSpec needs pixels, a vector_dim, or both")

    @property
    def keys(self) -> list[str]:
        """Observation keys in the order the encoder concatenates them."""
        return (["pixels"] if self.pixels else []) + (["observation"] if self.vector_dim else [])

    @classmethod
    def from_spec(cls, spec) -> "ObsSpec":
        """From an env's EnvSpec (collectors/specs.py)."""
        return cls(pixels=spec.pixels, vector_dim=spec.vector_dim)

    @classmethod
    def from_env(cls, obs: str, image_size: int = 64, vector_dim: int | None = None) -> "ObsSpec":
        """From EnvConfig.obs ("pixels" | "proprio" | "both")."""
        pixels = (3, image_size, image_size) if obs in ("pixels", "both") else None
        return cls(pixels=pixels, vector_dim=vector_dim if obs in ("proprio", "both") else None)


def sizes(wm_cfg: Any) -> SimpleNamespace:
    """Plain copy of the world-model sizes (accepts the dataclass, a dict or a DictConfig)."""
    get = wm_cfg.get if isinstance(wm_cfg, dict) else lambda k: getattr(wm_cfg, k)
    names = ("deter", "hidden", "stoch", "classes", "cnn_depth", "mlp_units", "mlp_layers", "head_layers",
             "policy_layers", "blocks", "unimix")
    s = SimpleNamespace(**{n: get(n) for n in names})
    s.cnn_mults = tuple(get("cnn_mults"))
    s.S = s.stoch * s.classes  # flattened one-hot latent
    s.feat = s.S + s.deter  # actor/critic/head input
    return s


class ObsEncoder(nn.Module):
    """Pixels -> CNN, vector -> symlog -> MLP; embeddings concatenated (the paper's multi-encoder)."""

    def __init__(self, obs: ObsSpec, s: SimpleNamespace):
        super().__init__()
        self.cnn = self.mlp = None
        self.out_features = 0
        if obs.pixels:
            self.cnn = DreamerV3ImageEncoder(obs.pixels[0], depth=s.cnn_depth, mults=s.cnn_mults,
                                             kernel_size=KERNEL)
            self.out_features += self.cnn.output_features(obs.pixels)
        if obs.vector_dim:
            self.mlp = DreamerV3MLP(obs.vector_dim, None, depth=s.mlp_layers, num_cells=s.mlp_units)
            self.out_features += s.mlp_units

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        inputs = list(inputs)
        parts = [self.cnn(inputs.pop(0))] if self.cnn is not None else []  # uint8 ok: scales itself
        if self.mlp is not None:
            parts.append(self.mlp(symlog(inputs.pop(0))))
        return parts[0] if len(parts) == 1 else torch.cat(parts, -1)
