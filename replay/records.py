"""Collector batches -> replay records, on the collector's writer thread (torchrl's `postproc`).

A record is one env step: the observation at t, the action taken there, the reward and flags of
the step (under "next"), `is_init` (o_t starts an episode) and `is_last` (o_t ends one). The next
observation is the next record's, so ("next", obs) is not stored, except for an episode's final
observation: after a done step one more record holds it (`is_last`, action zero, reward 0 and
flags false: what an episode's first observation carries), so the learner trains on it too.
Per-step statistics an env emits (EnvSpec.stats, e.g. Crafter's achievements) are kept under
("next", key) for the episode logs (collectors/episodes.py); the learner does not read them.

With a context (official `replay_context: 1`) each record also keeps the acting policy's latent
after observing o_t: the sampled sequence starts from it instead of zeros. Compressed: the
stochastic latent is one-hot, stored as one uint8 class index per categorical; the GRU state
(in [-1, 1]) as float16. Final-observation records get zeros (no policy saw them; a sequence
starting on one is reset on the next record anyway).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase

CONTEXT = "replay_context"  # the key torchrl's DreamerV3Loss writes refreshed latents under
KEPT = ("action", "is_init", "step_count", "env_index", "policy_version")
KEPT_NEXT = ("reward", "done", "terminated", "truncated")


@dataclass(frozen=True)
class ContextSpec:
    """Shape of the stored latent: `stoch` categoricals of `classes`, a GRU state of `deter`."""
    stoch: int
    classes: int
    deter: int

    def encode(self, state: torch.Tensor, belief: torch.Tensor) -> TensorDict:
        """One-hot state [..., stoch * classes] and belief [..., deter] -> stored context."""
        batch = state.shape[:-1]
        index = state.reshape(*batch, self.stoch, self.classes).argmax(-1).to(torch.uint8)
        return TensorDict({"state": index, "belief": belief.to(torch.float16)}, batch)

    def decode(self, context: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """Stored context -> (one-hot float state [..., stoch * classes], float belief [..., deter])."""
        index = context["state"].long()
        state = torch.nn.functional.one_hot(index, self.classes).flatten(-2).float()
        return state, context["belief"].float()


class ReplayRecords:
    """The postproc that turns collector transitions into replay records (module docstring)."""

    def __init__(self, obs_keys: list[str], context: ContextSpec | None = None, stats: tuple[str, ...] = ()):
        self.obs_keys, self.context = list(obs_keys), context
        self.next_keys = (*KEPT_NEXT, *stats)  # stats (Crafter's achievements) ride along for the logs
        self.nonfinite = 0  # values env.nonfinite=zero replaced (collectors/envs/guard.py), all envs

    def count_nonfinite(self, batch: TensorDictBase) -> None:
        if "nonfinite" in batch["next"].keys():
            self.nonfinite += int(batch["next", "nonfinite"].sum())

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        batch = batch.reshape(-1)
        self.count_nonfinite(batch)
        records = self._records(batch)
        done = batch["next", "done"].reshape(-1)
        if not done.any():
            return records
        final = self._final_records(batch[done], records[done])
        # Each final record right after its done step: positions 2i (steps) and 2i + 1 (finals).
        order = torch.cat([2 * torch.arange(len(records)), 2 * done.nonzero().reshape(-1) + 1]).argsort()
        return torch.cat([records, final])[order]

    def _records(self, batch: TensorDictBase) -> TensorDict:
        n = batch.shape[0]
        data = {k: batch[k] for k in (*self.obs_keys, *KEPT) if k in batch.keys()}
        data["is_last"] = torch.zeros(n, 1, dtype=torch.bool)
        data["next"] = TensorDict({k: batch["next", k] for k in self.next_keys}, [n])
        if self.context is not None:
            data[CONTEXT] = self.context.encode(batch["next", "state"], batch["next", "belief"])
        return TensorDict(data, [n])

    def _final_records(self, done_steps: TensorDictBase, done_records: TensorDict) -> TensorDict:
        final = done_records.clone()
        for k in self.obs_keys:
            final[k] = done_steps["next", k]
        final["action"].zero_()
        final["is_init"].zero_()
        final["is_last"].fill_(True)
        if "step_count" in final.keys():
            final["step_count"] = done_steps["next", "step_count"]
        final["next"].apply_(torch.zero_)
        if self.context is not None:
            final[CONTEXT].apply_(torch.zero_)
        return final


def transitions_in(records: TensorDictBase) -> torch.Tensor:
    """Mask of the records that are env steps (not an episode's final-observation record)."""
    if "is_last" not in records.keys():
        return torch.ones(records.shape[0], dtype=torch.bool)
    return ~records["is_last"].reshape(-1)
