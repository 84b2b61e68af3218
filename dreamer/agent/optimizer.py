"""The learner's optimizer: torchrl's DreamerV3 optimizer (LaProp, adaptive gradient clipping,
warm-up; per-part learning rates as parameter groups), guarded against non-finite gradients and
averaging gradients over data-parallel ranks before the step."""
from __future__ import annotations

import torch
from torchrl.trainers.algorithms import DreamerV3Optimizer


class GuardedDreamerV3Optimizer(DreamerV3Optimizer):
    """torchrl's DreamerV3 optimizer that skips a step whose gradients are not all finite.

    One NaN/inf gradient would otherwise poison every weight (and the moment estimates). The
    check is one fused norm over all gradients (a device sync per update on CUDA). `skipped`
    counts skipped steps; `last_step_skipped` tells the loop about the latest one.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.skipped = 0
        self.last_step_skipped = False
        self.grad_sync = None  # data-parallel: averages the gradients over the ranks first

    @torch.no_grad()
    def step(self, closure=None):
        if self.grad_sync is not None:  # every rank then sees the same gradients and skips alike
            self.grad_sync([p for g in self.param_groups for p in g["params"]])
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        finite = bool(torch.stack(torch._foreach_norm(grads)).isfinite().all()) if grads else True
        self.last_step_skipped = not finite
        if not finite:
            self.skipped += 1
            self.zero_grad(set_to_none=False)
            return None
        return super().step(closure)
