"""torchrl's observed-sequence RSSM rollout without its discarded prior draw.

`RSSMRolloutV3._loop` (torchrl 0.14) samples a straight-through one-hot from the prior logits at
every step and throws it away, to keep the random stream of its TensorDict path. Its uniforms
come from one `torch.rand` before the loop, so that draw consumes no random numbers: per step it
is ~10 eager ops and an autograd graph for nothing (64 per T64 update; a compiled whole step
drops it as dead code, eager and `learner.compile=regional` run it). This loop skips it and is
otherwise torchrl's: the same uniforms tensor, the same step function (compiled or not), the same
outputs (tests/test_imagination.py: equal values, gradients and random stream).
Measured, tiny T64 update, one learner switching loops between rounds (medians): eager 520 -> 470
ms, regional 326 -> 305 ms.
"""
from __future__ import annotations

import torch
from torchrl.modules.models import model_based
from torchrl.modules.models.model_based import RSSMRolloutV3

STACK_DIMS = (-2, -2, -2, -3, -3, -2, -2)  # torchrl's output order: inputs, logits, next latents


class RSSMRollout(RSSMRolloutV3):
    def _loop(self, state, belief, action, embedding, reset):
        posterior = self.rssm_posterior.module
        step = self._step_fn or self._step
        # torchrl's draw, shape and all (two per step; the prior's is never used)
        uniforms = torch.rand(action.shape[-2], 2, *action.shape[:-2], self.rssm_prior.module.num_categoricals,
                              device=action.device)
        rows = []
        for t in range(action.shape[-2]):
            state_in, belief_in, action_t, prior_logits, belief, posterior_logits = step(
                state, belief, action[..., t, :], embedding[..., t, :], reset[..., t, :])
            state = model_based._straight_through_categorical(posterior_logits, posterior.unimix, uniforms[t, 1])
            state = state.flatten(-2)
            rows.append((state_in, belief_in, action_t, prior_logits, posterior_logits, state, belief))
        return tuple(torch.stack(column, dim) for column, dim in zip(zip(*rows), STACK_DIMS))
