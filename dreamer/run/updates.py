"""One learner update from replay: the batch (prefetched on a thread, or sampled here), the learner's
step (dreamer/agent/learner.py), the return statistics averaged over data-parallel ranks, the posterior
latents written back into replay, the non-finite guard's count, and the update's host timings.
The Trainer (dreamer/run/trainer.py) owns one."""
from __future__ import annotations

import contextlib
import time

from tensordict import TensorDict, TensorDictBase

from replay.prefetch import Prefetcher
from replay.records import CONTEXT


class NonFiniteLossError(RuntimeError):
    pass


class UpdateStep:
    def __init__(self, agent, learner, replay, world, prefetch: int | str, max_nonfinite_updates: int):
        self.agent, self.learner, self.replay, self.world = agent, learner, replay, world
        self.depth = (1 if agent.device.type == "cuda" else 0) if prefetch == "auto" else prefetch
        self.max_nonfinite = max_nonfinite_updates
        self.nonfinite_in_row = 0
        self.prefetcher = None  # started at the first update (replay can sample by then)

    def __call__(self) -> dict:
        """One update. Non-finite gradients: the optimizer skips the step (weights stay as they
        were), the update still counts toward the train ratio, and after
        learner.max_nonfinite_updates of them in a row the run stops (a checkpoint is written)."""
        start = time.perf_counter()
        batch, meta = self.next_batch()
        sampled = time.perf_counter()
        metrics = self.learner.step(batch)
        if self.world.size > 1:  # return-normalisation statistics: the same on every rank
            self.world.average_buffers(self.agent.loss.actor_loss.retnorm)
        refreshed = self.learner.refreshed_context()
        if refreshed is not None:  # the learner's posteriors replace the stored latents (official)
            self.replay.write_back(meta["index"][:, 1:], TensorDict({CONTEXT: refreshed}, refreshed.shape),
                                   meta["step_count"][:, 1:])
        # The guard's one host check per update (a non-finite loss gives non-finite gradients): it
        # keeps its promise exactly, no weight moves on such a step. Metrics stay on the device.
        skipped = self.agent.optimizer.last_step_skipped
        self.nonfinite_in_row = self.nonfinite_in_row + 1 if skipped else 0
        metrics["skipped_updates"] = float(self.agent.optimizer.skipped)
        # Host wall time per update: waiting for the batch (the whole sample without prefetch) and
        # the rest (the guard's check above waits for the device: the update's full time).
        metrics["sample_wait_ms"] = 1000 * (sampled - start)
        metrics["update_ms"] = 1000 * (time.perf_counter() - sampled)
        if self.nonfinite_in_row >= self.max_nonfinite:
            raise NonFiniteLossError(f"{self.max_nonfinite} updates in a row had non-finite losses or gradients "
                                     "(learner.max_nonfinite_updates); the weights are those before them")
        return metrics

    def next_batch(self) -> tuple[TensorDictBase, TensorDictBase]:
        """(a replay batch, its index and step_count on the host): from the prefetcher, or sampled
        here. With prefetch a batch may predate the previous update's latent write-back (its
        context is one update older, as in any asynchronous sampler)."""
        if self.prefetcher is None and self.depth > 0:
            self.prefetcher = Prefetcher(self.replay.sample, self.agent.device, self.depth)
        if self.prefetcher is not None:
            return self.prefetcher.get()
        batch = self.replay.sample()
        return batch, batch

    def sampling_paused(self):
        """No sample moves the RNG or reads replay inside (a checkpoint's state is being taken)."""
        return self.prefetcher.paused() if self.prefetcher is not None else contextlib.nullcontext()

    def close(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.close()
            self.prefetcher = None
