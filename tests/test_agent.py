"""DreamerV3 agent, acting policy and learner on tiny sizes (CPU, eager)."""
import math
import pickle

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.modules import RSSMStateEstimatorV3

from dreamer.agent.learner import Learner, resolve_flags, to_loss_batch
from dreamer.agent.model import build_agent, build_nets, count_parameters
from dreamer.agent.obs import ObsSpec
from dreamer.agent.policy import (
    DreamerPolicyFactory,
    build_acting_policy,
    check_policy_keys,
    make_primer,
)
from dreamer.config import LearnerConfig, WorldModelConfig
from tests.helpers import PIXELS, PROPRIO, TINY, XS, replay_batch

S = WorldModelConfig()  # the "s" defaults
WM_LOSSES = ("loss_model_reco", "loss_model_reward", "loss_model_dynamic",
             "loss_model_representation", "loss_model_continue")

# Documented parameter counts (64x64 pixels, 6-dim action unless noted); the README quotes these.
PARAM_COUNTS = {
    "tiny": {"world_model": 296_851, "actor": 9_100, "critic": 24_895, "total": 330_846},
    "tiny_proprio5_act1": {"world_model": 90_757, "actor": 8_450, "critic": 24_895, "total": 124_102},
    "xs": {"world_model": 4_503_539, "actor": 331_276, "critic": 393_727, "total": 5_228_542},
    "s": {"world_model": 10_829_891, "actor": 1_056_780, "critic": 1_181_439, "total": 13_068_110},
}


def tiny_agent(obs, action_dim, lr=None):
    torch.manual_seed(0)
    lcfg = LearnerConfig(lr_warmup_steps=0) if lr is None else LearnerConfig(lr=lr, lr_warmup_steps=0)
    agent = build_agent(TINY, lcfg, obs, action_dim, "cpu")
    return agent, Learner(agent, lcfg)


@pytest.mark.parametrize("obs,action_dim", [(PIXELS, 6), (PROPRIO, 1)], ids=["pixels", "proprio"])
def test_one_step_finite_and_updates(obs, action_dim):
    agent, learner = tiny_agent(obs, action_dim)
    assert learner.flags.compile is False and learner.flags.cudagraph is False  # CPU: eager
    params = list(agent.loss.parameters())
    before = [p.detach().clone() for p in params]
    metrics = learner.step(replay_batch(2, 8, obs, action_dim))
    assert set(WM_LOSSES) | {"loss_actor", "loss_value", "loss_replay_value"} <= set(metrics)
    assert all(torch.isfinite(torch.as_tensor(v)) for v in metrics.values()), metrics
    changed = sum(not torch.equal(b, p) for b, p in zip(before, params))
    # outscale-0 reward/value output layers leave their hidden layers without gradient at step 1
    assert changed > len(params) // 2, f"{changed}/{len(params)} tensors changed"


def test_fit_lowers_world_model_loss():
    agent, learner = tiny_agent(PIXELS, 6, lr=1e-3)
    batch = replay_batch(2, 8, PIXELS, 6, smooth=True)
    losses = []
    for _ in range(30):
        metrics = learner.step(batch)
        losses.append(sum(metrics[k] for k in WM_LOSSES))
    assert losses[-1] < 0.5 * losses[0], losses


def test_loss_batch_rows_are_steps_into_the_next_record():
    agent, _ = tiny_agent(PROPRIO, 1)
    batch = replay_batch(2, 6, PROPRIO, 1)
    batch["is_init"][1, 3] = True  # an episode starts at record 3 of row 1
    out = to_loss_batch(batch, agent)
    assert out.shape == (2, 5)  # record 0 is context: T + 1 records, T rows
    obs = batch["observation"]
    assert torch.equal(out["next", "observation"], obs[:, 1:])
    assert torch.equal(out["action"], batch["action"][:, :5])
    # row 2 of env 1 is the step into record 3, the first observation of an episode: the rollout
    # resets there (zero carry and action), and its targets are those of a first observation
    assert out["is_init"][1, 2] and out["is_init"].sum() == 1 + 0 * batch["is_init"][:, 0].sum()
    assert out["next", "reward"][1, 2] == 0 and not out["next", "done"][1, 2]
    assert torch.equal(out["next", "reward"][0], batch["next", "reward"][0, :5])
    assert (out["state"] == 0).all() and (out["belief"] == 0).all()  # no context: zeros


def test_flags():
    cpu = torch.device("cpu")
    assert resolve_flags(LearnerConfig(), cpu) == resolve_flags(LearnerConfig(compile=False), cpu)
    assert not any(vars(resolve_flags(LearnerConfig(), cpu)).values())
    with pytest.raises(ValueError, match="cudagraph=true needs a CUDA"):
        resolve_flags(LearnerConfig(cudagraph=True), cpu)


def _carry(n, agent_like_sizes, action_dim, value=0.0):
    S, D = agent_like_sizes
    return {"state": torch.full((n, S), value), "belief": torch.full((n, D), value),
            "previous_action": torch.full((n, action_dim), value)}


def test_policy_keeps_per_env_state_and_resets():
    policy = pickle.loads(pickle.dumps(DreamerPolicyFactory(TINY, PIXELS, 6, explore=False)))()
    sizes = (64, 64)
    n = 3
    pixels = torch.randint(0, 256, (n, 3, 64, 64), dtype=torch.uint8)

    def act(carry, is_init, seed):
        torch.manual_seed(seed)  # the posterior latent is sampled even in mode
        td = TensorDict({"pixels": pixels, "is_init": is_init, **carry}, [n])
        td = policy(td)
        return td, {k: td["next", k] for k in ("state", "belief", "previous_action")}

    # inputs untouched, next carry written under "next"
    zero = _carry(n, sizes, 6)
    td, carry1 = act(zero, torch.ones(n, 1, dtype=torch.bool), 0)
    assert torch.equal(td["belief"], zero["belief"]) and td["action"].abs().max() <= 1
    assert torch.equal(carry1["previous_action"], td["action"])
    # env 1 resets: garbage carry is ignored there; envs 0 and 2 keep (use) their own carry
    garbage = _carry(n, sizes, 6, value=5.0)
    flags = torch.tensor([[False], [True], [False]])
    _, c_g = act(garbage, flags, 1)
    _, c_z = act(zero, flags, 1)
    assert torch.allclose(c_g["belief"][1], c_z["belief"][1])
    assert not torch.allclose(c_g["belief"][0], c_z["belief"][0])
    assert not torch.allclose(c_g["belief"][2], c_z["belief"][2])
    # batch independence: env 0's result does not depend on env 2's carry
    other = {k: v.clone() for k, v in garbage.items()}
    other["belief"][2] = -3.0
    _, c_o = act(other, flags, 1)
    assert torch.allclose(c_o["belief"][0], c_g["belief"][0])


def test_static_batch_padding_leaves_real_rows_unchanged():
    """torchrl's server pads a ready batch to `static_batch_size` by repeating the last request
    (CUDA only, so on CPU we pad the same way by hand): the real rows' outputs must equal the
    unpadded call's, carry included. The posterior draw is seeded and drawn first, so it matches."""
    policy = DreamerPolicyFactory(TINY, PIXELS, 6, explore=False)()
    n, static = 3, 8
    td = TensorDict({"pixels": torch.randint(0, 256, (n, 3, 64, 64), dtype=torch.uint8),
                     "is_init": torch.tensor([[True], [False], [False]]),
                     **_carry(n, (64, 64), 6, value=0.3)}, [n])
    padded = td[torch.arange(static).clamp_max(n - 1)]
    torch.manual_seed(0)
    plain = policy(td.clone())
    torch.manual_seed(0)
    out = policy(padded)[:n]
    for key in ("action", ("next", "state"), ("next", "belief"), ("next", "previous_action")):
        assert torch.allclose(out[key], plain[key], atol=1e-6), key


def test_policy_explore_samples_and_primer():
    policy = DreamerPolicyFactory(TINY, PROPRIO, 1, explore=True)()
    td = TensorDict({"observation": torch.randn(4, 5), "is_init": torch.ones(4, 1, dtype=torch.bool),
                     **_carry(4, (64, 64), 1)}, [4])
    assert policy(td)["action"].shape == (4, 1)
    primer = make_primer(TINY, 1)
    spec = primer.primers
    assert spec["state"].shape[-1] == 64 and spec["belief"].shape[-1] == 64
    assert spec["previous_action"].shape[-1] == 1


def test_policy_weights_from_agent_load_into_factory():
    agent, _ = tiny_agent(PIXELS, 6)
    weights = build_acting_policy(agent.nets).state_dict()
    policy = DreamerPolicyFactory(TINY, PIXELS, 6, state_dict=weights)()
    assert all(torch.equal(weights[k], v) for k, v in policy.state_dict().items())


def test_key_rewrite_guard():
    check_policy_keys(DreamerPolicyFactory(TINY, PIXELS, 6)())  # ours: carry goes under "next"
    bad = TensorDictModule(nn.Linear(4, 4), in_keys=["state"], out_keys=["state"])
    with pytest.raises(ValueError, match="state"):
        check_policy_keys(bad)
    # torchrl's estimator with default out_keys rewrites state/belief at the root, hidden in a sequence
    nets = build_nets(TINY, PROPRIO, 1)
    hidden = TensorDictSequential(
        TensorDictModule(nets.encoder, ["observation"], ["encoded_latents"]),
        RSSMStateEstimatorV3(nets.prior, nets.posterior),
        TensorDictModule(nets.actor, ["state", "belief"], ["loc", "scale"]),
        selected_out_keys=["loc"])
    with pytest.raises(ValueError, match="belief"):
        check_policy_keys(hidden)


@pytest.mark.parametrize("name,cfg,obs,action_dim", [
    ("tiny", TINY, PIXELS, 6), ("tiny_proprio5_act1", TINY, PROPRIO, 1), ("xs", XS, PIXELS, 6), ("s", S, PIXELS, 6)])
def test_parameter_counts(name, cfg, obs, action_dim):
    with torch.device("meta"):  # shapes only: no memory, no init time
        nets = build_nets(cfg, obs, action_dim)
    assert count_parameters(nets) == PARAM_COUNTS[name]


def test_count_parameters_matches_loss_parameters():
    agent, _ = tiny_agent(PIXELS, 6)
    assert count_parameters(agent)["total"] == sum(p.numel() for p in agent.loss.parameters())


def test_carry_flows_through_a_real_env():
    """Primer + policy in a DMC env: step_mdp turns ("next", carry) into the next call's root carry."""
    from collectors.envs.dmc import make_dmc_env

    env = make_dmc_env("cartpole", "balance", obs="proprio", seed=0)
    env.append_transform(make_primer(TINY, 1))
    obs_dim = env.observation_spec["observation"].shape[-1]
    policy = DreamerPolicyFactory(TINY, ObsSpec(pixels=None, vector_dim=obs_dim), 1)()
    assert set(policy.in_keys) <= set(env.fake_tensordict().keys())  # all inputs are env outputs
    rollout = env.rollout(5, policy)
    assert rollout["is_init"][0] and not rollout["is_init"][1:].any()
    assert torch.equal(rollout["state"][0], torch.zeros(64))  # primer starts from zeros
    assert torch.equal(rollout["state"][1:], rollout["next", "state"][:-1])
    assert torch.equal(rollout["belief"][1:], rollout["next", "belief"][:-1])
    assert torch.equal(rollout["previous_action"][1:], rollout["action"][:-1])
    env.close()


@pytest.mark.compile
def test_compiled_learner_step_on_cpu_learns():
    """learner.compile=true on CPU: warm-up compiles without stepping the optimizer; compiled
    updates are finite, change the weights and lower the world-model loss on a fixed batch.
    (Compiled code draws its own random numbers, so losses cannot be compared with eager ones.)
    A very small model: compiling takes minutes on 2 cores whatever the size."""
    wm = WorldModelConfig(size="tiny", deter=16, hidden=16, stoch=4, classes=4, cnn_depth=4,
                          mlp_units=16, mlp_layers=1, head_layers=1, policy_layers=1)
    batch = replay_batch(2, 4, PROPRIO, 1, smooth=True)
    lc = LearnerConfig(compile=True, cudagraph=False, bf16=False, imagination_horizon=2, lr=1e-3,
                       lr_warmup_steps=0)
    learner = Learner(build_agent(wm, lc, PROPRIO, 1), lc)
    assert learner.flags.compile
    before = [p.detach().clone() for p in learner.agent.loss.parameters()]
    learner.warmup(batch)
    assert all(torch.equal(a, b) for a, b in zip(before, learner.agent.loss.parameters()))
    wm_loss = []
    for _ in range(30):
        metrics = learner.step(batch)
        assert all(math.isfinite(v) for v in metrics.values())
        wm_loss.append(sum(metrics[k] for k in WM_LOSSES))
    assert not all(torch.equal(a, b) for a, b in zip(before, learner.agent.loss.parameters()))
    assert sum(wm_loss[-5:]) < 0.9 * sum(wm_loss[:5])  # measured: -17% over 30 steps


def test_prefill_flag_acts_randomly_until_the_first_weight_push():
    td = TensorDict({"observation": torch.randn(64, 5), "is_init": torch.ones(64, 1, dtype=torch.bool),
                     **_carry(64, (64, 64), 1)}, [64])
    served = DreamerPolicyFactory(TINY, PROPRIO, 1, explore=False, random_actions=True)()
    random_actions = served(td.clone())["action"]
    assert random_actions.std() > 0.4  # uniform in [-1, 1]: std 0.58; the untrained mode: ~0
    agent = build_agent(TINY, LearnerConfig(), PROPRIO, 1)
    learner_side = build_acting_policy(agent.nets, explore=False)
    served.load_state_dict(learner_side.state_dict())  # what the collector's weight push carries
    torch.manual_seed(0)
    pushed = served(td.clone())["action"]
    torch.manual_seed(0)
    assert torch.allclose(pushed, learner_side(td.clone())["action"])
    assert pushed.std() < 0.1
