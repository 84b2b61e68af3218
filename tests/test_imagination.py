"""The learner's CPU speed-ups that must not change what it learns: the lean imagination rollout
(dreamer/agent/imagination.py), the gradient-free rollout under REINFORCE, the factored block GRU
(patches/block_gru.py) and the observed-sequence rollout (patches/rssm_rollout.py). Each is
compared with torchrl's own path on the same seed."""
import copy

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules.models import model_based
from torchrl.modules.models.model_based import RSSMRolloutV3, _DreamerV3BlockGRU

from dreamer.agent.learner import Learner
from dreamer.agent.model import build_agent, build_nets
from dreamer.config import LearnerConfig
from patches.block_gru import FactoredBlockGRU
from patches.rssm_rollout import RSSMRollout
from tests.helpers import PROPRIO, TINY, XS, replay_batch


def _start(agent, n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    state = torch.nn.functional.one_hot(torch.randint(0, 8, (n, 8), generator=g), 8).float().flatten(-2)
    return TensorDict({"state": state, "belief": torch.randn(n, agent.belief_dim, generator=g)}, [n])


def _imagine(agent, lean: bool, seed=1):
    env = agent.actor_loss.model_based_env
    env.lean = lean
    start = env.reset(_start(agent))
    torch.manual_seed(seed)
    with set_exploration_type(ExplorationType.RANDOM):
        return env.rollout(max_steps=5, policy=agent.actor, auto_reset=False, tensordict=start,
                           break_when_any_done=False)


@pytest.mark.parametrize("discrete", [False, True])
def test_the_lean_rollout_returns_torchrls_rollout(discrete):
    torch.manual_seed(0)
    agent = build_agent(TINY, LearnerConfig(), PROPRIO, 3, "cpu", discrete=discrete)
    lean, reference = _imagine(agent, True), _imagine(agent, False)
    assert lean.batch_size == reference.batch_size == torch.Size([6, 5])
    assert lean.device == reference.device == agent.device
    keys = set(reference.keys(include_nested=True, leaves_only=True))
    assert set(lean.keys(include_nested=True, leaves_only=True)) == keys
    assert ("next", "reward") in keys and "action_log_prob" in keys
    for key in keys:
        assert lean.get(key).dtype == reference.get(key).dtype, key
        torch.testing.assert_close(lean.get(key), reference.get(key), rtol=0, atol=0, msg=str(key))
    # each step starts from the previous step's next latent, as step_mdp would carry it
    torch.testing.assert_close(lean["state"][:, 1:], lean["next", "state"][:, :-1], rtol=0, atol=0)


@pytest.mark.parametrize("actor_grad", ["reinforce", "dynamics"])
def test_an_update_is_the_same_with_the_lean_gradient_free_rollout(actor_grad):
    """A whole learner update (losses and every gradient) with torchrl's rollout recording a graph
    vs ours: equal to float rounding (the same ops in the same order; no_grad under REINFORCE; the
    critic's shared pass, TrajectoryCritic)."""
    batch = replay_batch(2, 9, PROPRIO, 1, seed=3)
    results = []
    for lean in (False, True):
        torch.manual_seed(0)
        cfg = LearnerConfig(compile=False, lr_warmup_steps=0, imagination_horizon=4, actor_grad=actor_grad)
        agent = build_agent(TINY, cfg, PROPRIO, 1, "cpu")
        env = agent.actor_loss.model_based_env
        assert env.no_grad == (actor_grad == "reinforce")
        env.lean, env.no_grad = lean, env.no_grad and lean
        learner = Learner(agent, cfg)
        critic_rows = []
        agent.nets.value.register_forward_hook(lambda m, args, out: critic_rows.append(out.shape[:-1].numel()))
        torch.manual_seed(1)
        metrics = learner.step(batch)
        grads = [p.grad.clone() for p in agent.loss.parameters() if p.grad is not None]
        results.append((metrics, grads, [p.detach().clone() for p in agent.loss.parameters()], sum(critic_rows)))
    (m0, g0, p0, rows0), (m1, g1, p1, rows1) = results
    # the critic's passes: under REINFORCE the bootstrap and the baseline share one pass over the
    # H + 1 imagined states (TrajectoryCritic), 2 H - (H + 1) = H - 1 states fewer per start
    starts, horizon = 2 * 8, 4
    assert rows0 - rows1 == (starts * (horizon - 1) if actor_grad == "reinforce" else 0)
    for key in ("loss_actor", "loss_value", "loss_model_dynamic", "loss_replay_value"):
        assert float(m1[key]) == pytest.approx(float(m0[key]), rel=1e-6, abs=1e-7), key
    assert len(g0) == len(g1)
    for a, b in zip(g0 + p0, g1 + p1):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("size", [TINY, XS])
def test_the_factored_block_gru_is_torchrls(size):
    """Same parameters, same belief and gradients as torchrl's block GRU (float rounding apart)."""
    torch.manual_seed(0)
    nets = build_nets(size, PROPRIO, 2)
    ours = nets.prior.rnn
    assert type(ours) is FactoredBlockGRU
    theirs = copy.deepcopy(ours)
    theirs.__class__ = _DreamerV3BlockGRU
    assert list(ours.state_dict()) == list(theirs.state_dict())
    g = torch.Generator().manual_seed(1)
    state = torch.randn(7, 3, nets.sizes.S, generator=g)
    belief = torch.randn(7, 3, nets.sizes.deter, generator=g)
    action = torch.randn(7, 3, 2, generator=g) * 2
    a, b = theirs(state, belief, action), ours(state, belief, action)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    grads_a = torch.autograd.grad(a.square().sum(), list(theirs.parameters()))
    grads_b = torch.autograd.grad(b.square().sum(), list(ours.parameters()))
    for ga, gb in zip(grads_a, grads_b):
        torch.testing.assert_close(gb, ga, rtol=1e-4, atol=1e-5 * float(ga.abs().max()))


def test_the_factored_block_gru_keeps_torchrls_dtypes_under_bf16_autocast():
    """The CUDA learner runs under bf16 autocast: the same dtypes as torchrl's GRU, values within
    bf16 rounding (checked with CPU autocast here)."""
    torch.manual_seed(0)
    ours = build_nets(TINY, PROPRIO, 1).prior.rnn
    theirs = copy.deepcopy(ours)
    theirs.__class__ = _DreamerV3BlockGRU
    g = torch.Generator().manual_seed(2)
    args = (torch.randn(5, 64, generator=g), torch.randn(5, 64, generator=g), torch.rand(5, 1, generator=g))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a, b = theirs(*args), ours(*args)
    assert b.dtype == a.dtype == torch.float32
    torch.testing.assert_close(b, a, rtol=0, atol=0.05)


def test_the_rollout_without_the_discarded_prior_draw_is_torchrls(monkeypatch):
    """patches/rssm_rollout.py: the same outputs, gradients and random stream as torchrl's loop,
    with one straight-through draw per step instead of two."""
    torch.manual_seed(0)
    agent = build_agent(TINY, LearnerConfig(compile=False), PROPRIO, 1, "cpu")
    rollout = next(m for m in agent.loss.modules() if isinstance(m, RSSMRolloutV3))
    assert type(rollout) is RSSMRollout
    g = torch.Generator().manual_seed(2)
    B, T, S, D = 3, 7, agent.nets.sizes.S, agent.belief_dim
    embedding = agent.nets.encoder(torch.randn(B, T, PROPRIO.vector_dim, generator=g)).detach()
    is_init = torch.zeros(B, T, 1, dtype=torch.bool)
    is_init[:, 0], is_init[1, 4] = True, True
    data = TensorDict({"state": torch.zeros(B, T, S), "belief": torch.zeros(B, T, D),
                       "action": torch.randn(B, T, 1, generator=g), "is_init": is_init,
                       "next": {"encoded_latents": embedding}}, [B, T])
    draws = []
    draw = model_based._straight_through_categorical
    monkeypatch.setattr(model_based, "_straight_through_categorical", lambda *a: draws.append(1) or draw(*a))
    params = [p for p in rollout.parameters()]
    results = []
    for cls in (RSSMRolloutV3, RSSMRollout):
        rollout.__class__ = cls
        draws.clear()
        torch.manual_seed(1)
        out = rollout(data.clone())
        loss = sum(out.get(k).square().sum() for k in (("next", "prior_logits"), ("next", "posterior_logits"),
                                                        ("next", "state"), ("next", "belief")))
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        results.append((out, grads, torch.rand(4), len(draws)))
    (theirs, g0, rand0, draws0), (ours, g1, rand1, draws1) = results
    assert (draws0, draws1) == (2 * T, T)
    assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
    for key in theirs.keys(True, True):
        torch.testing.assert_close(ours.get(key), theirs.get(key), rtol=0, atol=0, msg=str(key))
    for a, b in zip(g0, g1):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(b, a, rtol=0, atol=0)
    assert torch.equal(rand0, rand1)  # the same random numbers consumed
