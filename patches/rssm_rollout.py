"""torchrl's observed-sequence RSSM rollout without its discarded prior draw, and with the
posterior's draw inside the compiled step.

`RSSMRolloutV3._loop` (torchrl 0.14) samples a straight-through one-hot from the prior logits at
every step and throws it away, to keep the random stream of its TensorDict path. Its uniforms
come from one `torch.rand` before the loop, so that draw consumes no random numbers: per step it
is ~10 eager ops and an autograd graph for nothing (64 per T64 update; a compiled whole step
drops it as dead code, eager and `learner.compile=regional` run it). This loop skips it and is
otherwise torchrl's: the same uniforms tensor, the same step, the same outputs
(tests/test_imagination.py: equal values, gradients and random stream).
Measured, tiny T64 update, one learner switching loops between rounds (medians): eager 520 -> 470
ms, regional 326 -> 305 ms.

torchrl's `compile_rollout("step")` compiles the deterministic step only and leaves the
posterior's straight-through draw (softmax, unimix, cumsum, scatter and their backward: ~20 small
eager ops per step) outside. `compile_fused_step()` compiles step and draw as one region; the
uniform is an input, so eager and compiled draw from the same random numbers.
"""
from __future__ import annotations

import torch
from torchrl.modules.models import model_based
from torchrl.modules.models.model_based import RSSMRolloutV3

STACK_DIMS = (-2, -2, -2, -3, -3, -2, -2)  # torchrl's output order: inputs, logits, next latents


class RSSMRollout(RSSMRolloutV3):
    _fused_fn = None

    def compile_fused_step(self, **compile_kwargs) -> None:
        """torch.compile one step together with the posterior's draw (learner.compile=regional)."""
        compile_kwargs.setdefault("dynamic", False)
        self._fused_fn = torch.compile(self._step_and_draw, **compile_kwargs)

    def _step_and_draw(self, state, belief, action_t, embedding_t, reset_t, uniform):
        """torchrl's step, then the next state drawn from the posterior logits (straight-through)."""
        posterior = self.rssm_posterior.module
        state_in, belief_in, action_t, prior_logits, belief, posterior_logits = (self._step_fn or self._step)(
            state, belief, action_t, embedding_t, reset_t)
        state = model_based._straight_through_categorical(posterior_logits, posterior.unimix, uniform).flatten(-2)
        return state_in, belief_in, action_t, prior_logits, posterior_logits, state, belief

    def _loop(self, state, belief, action, embedding, reset):
        step = self._fused_fn or self._step_and_draw
        # torchrl's draw, shape and all (two per step; the prior's is never used)
        uniforms = torch.rand(action.shape[-2], 2, *action.shape[:-2], self.rssm_prior.module.num_categoricals,
                              device=action.device)
        rows = []
        for t in range(action.shape[-2]):
            row = step(state, belief, action[..., t, :], embedding[..., t, :], reset[..., t, :], uniforms[t, 1])
            state, belief = row[-2], row[-1]
            rows.append(row)
        return tuple(torch.stack(column, dim) for column, dim in zip(zip(*rows), STACK_DIMS))

    def __getstate__(self) -> dict:
        state = super().__getstate__()  # a compiled callable does not pickle: the copy starts eager
        state.pop("_fused_fn", None)
        return state
