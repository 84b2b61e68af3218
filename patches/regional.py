"""`learner.compile=regional`: torch.compile only the learner's hot regions, for a CPU.

Compiling the whole DreamerV3 step on a 2-core CPU takes minutes (measured, tiny T64 proprio:
216 s cold, 140 s with a warm cache: Dynamo re-traces the unrolled step each run) for 376 -> 237
ms/update. Compiling small regions costs seconds and is cached on disk:
  * the RSSM step inside the observed-sequence rollout, with the posterior's straight-through draw
    (`RSSMRollout.compile_fused_step`: its uniforms are drawn outside, so eager and compiled
    consume the same random numbers),
  * the prior network (the imagination rollout's transition, 15 steps per update),
  * the two-hot decoders (reward and value: softmax over 255 bins and its expectation),
  * the value loss (critic and slow critic over all imagined states, two-hot cross-entropy).
The replay value loss (official repval) stays eager: its lambda return over the T replayed steps
unrolls into a graph of ~1,200 ops, ~16 s of a 61 s cold first update, for no measured gain (one
process, updates interleaved: median 287 ms/update compiled vs 273 eager, tiny T64). Earlier
learn_cpu runs with it eager lost an env worker at the first update; the cause was torchrl's
storage length under torch's process-wide compile flag (patches/storage.py, CompileSafeStorage).
Figures (ms/update, cold and warm first update): README, CPU learner paths. Compiled heads
(MLPs) measured slower than eager here and are left out; the model loss (it holds the 64-step
rollout) compiles in minutes and is left out too. Larger regions were measured and left out for
their compile time: k RSSM steps per compiled call (tiny T64, one process, medians) k=4 171 -> 157
ms/update, k=8 195 -> 163 (another round), but inductor builds C++ kernels per step of the unrolled
graph (46 -> 83 g++ compiles at k=4: the cold first update about doubles, past 60 s); torchrl's
`compile_rollout("scan")` ran no faster than the step (171-186 vs 172-187); the imagination step
(actor, prior and reward head in one graph, no_grad) 2.2 -> 1.7 ms per step, ~7 ms of an update.
The parameters and state-dict keys stay as they are (nn.Module.compile), so a checkpoint loads in
either mode.

One graph per region where possible: each graph variant costs its own inductor compile (C++ for
every fused kernel, ~1 s of g++ each on this machine; ~50 kernels were most of the 68 s cold first
update). Two variants were avoidable: the RSSM step's first call got a carry without gradients and
every later call one with (two graphs of the largest region), and the two-hot decoders ran in
grad mode on logits without gradients (the actor loss's critic under hold_out_net) besides
under no_grad (a third graph). `_carry_with_grad` and `_decode` below route those to the graph
already compiled; values and gradients are unchanged (tests/test_regional.py).

Inductor's on-disk caches (FX graph, AOTAutograd) live under `compile_cache_dir()`:
$TORCHINDUCTOR_CACHE_DIR if set, else ~/.cache/dreamer-app/inductor (torch's default is under /tmp).
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
from torchrl.modules.models.model_based import SymExpTwoHot

from patches.rssm_rollout import RSSMRollout

# Learner updates from which `auto` on a CPU compiles the regions: the first update's ~55 s cold
# compile against ~100 ms saved per update on tiny T32 (break-even ~550 updates), with a margin
# for noise: learn_cpu (1,813 updates) compiles, make train's learn_cartpole (688) stays eager.
REGIONAL_MIN_UPDATES = 1000


def compile_cache_dir() -> Path:
    """Where inductor keeps compiled regions between runs: $TORCHINDUCTOR_CACHE_DIR, whose default
    dreamer.runtime.setup() sets (torch's own default lies under /tmp)."""
    path = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path


def compile_regions(agent) -> list[str]:
    """Compile the hot regions of `agent`'s loss in place; returns what was compiled."""
    compile_cache_dir()
    done = []
    for module in agent.loss.modules():
        if isinstance(module, RSSMRollout) and module._fast_path and module._fused_fn is None:
            module.compile_fused_step()  # the step with the posterior's straight-through draw
            module._fused_fn = _carry_with_grad(module._fused_fn)
            done.append("rssm step")
    agent.nets.prior.compile(dynamic=False)
    done.append("prior")
    # the critic's decoder is not a submodule of the loss (torchrl's losses keep the critic they
    # share in __dict__): missed, it decoded 2 x 16k values per update eagerly (~30 ms)
    decoders = [m for root in (agent.loss, agent.critic) for m in root.modules() if isinstance(m, SymExpTwoHot)]
    for module in {id(m): m for m in decoders}.values():
        module.forward = _decode(module)
    done.append(f"{len({id(m) for m in decoders})} two-hot decoders")
    agent.loss.value_loss.compile(dynamic=False)  # critic on imagined states + slow critic + two-hot CE
    done.append("value loss")
    return done


def _carry_with_grad(step):
    """The RSSM step with a carry that requires grad in grad mode. The rollout's first carry comes
    from the batch (zeros or the stored replay context) and has none, every later one has: without
    this the first step compiles a graph of its own. The extra leaf only receives a gradient."""
    def step_fn(state, belief, *inputs):
        if torch.is_grad_enabled():
            state = state if state.requires_grad else state.detach().requires_grad_()
            belief = belief if belief.requires_grad else belief.detach().requires_grad_()
        return step(state, belief, *inputs)
    return step_fn


def _decode(decoder):
    """A compiled two-hot decoder with two graphs (with and without gradients) for every batch
    shape: logits without gradients run under no_grad, and all are flattened to rows of bins with
    a dynamic row count (imagined rewards are [N, bins], values [N, H, bins])."""
    compiled = torch.compile(decoder.forward)

    def forward(logits):
        rows = logits.reshape(-1, logits.shape[-1])
        if not torch.compiler.is_compiling():  # inside a compiled region (the value loss) it is inlined
            torch._dynamo.mark_dynamic(rows, 0)
        if torch.is_grad_enabled() and logits.requires_grad:
            return compiled(rows).reshape(*logits.shape[:-1], 1)
        with torch.no_grad():
            return compiled(rows.detach()).reshape(*logits.shape[:-1], 1)
    return forward
