"""The agent at parity with the official DreamerV3: REINFORCE actor, reset rows, final
observations, replay context, official defaults and size presets."""
import pytest
import torch
from tensordict import TensorDict
from torchrl.modules import RSSMStateEstimatorV3
from torchrl.modules.models import model_based

from dreamer.agent.learner import Learner, to_loss_batch
from dreamer.agent.model import build_agent, build_nets, count_parameters
from dreamer.agent.obs import ObsSpec
from dreamer.config import LearnerConfig
from replay.records import CONTEXT, ContextSpec, ReplayRecords
from tests.helpers import TINY, preset

PROPRIO = ObsSpec(pixels=None, vector_dim=5)
WORLD_MODEL_PARTS = ("encoder", "prior", "posterior", "vector_decoder", "reward", "cont")


def tiny(actor_grad="reinforce", discrete=False, **learner):
    """Continuous (1 action in [-1, 1]) or discrete (3 one-hot actions) tiny agent."""
    torch.manual_seed(0)
    cfg = LearnerConfig(actor_grad=actor_grad, lr_warmup_steps=0, **learner)
    return build_agent(TINY, cfg, PROPRIO, 3 if discrete else 1, discrete=discrete), cfg


def with_random_heads(agent):
    """Reward and value heads start at zero output (outscale 0): give them weights, so imagined
    returns, values and advantages are not all zero."""
    with torch.no_grad():
        for head in (agent.nets.reward, agent.nets.value):
            for p in head.parameters():
                p.normal_(0, 0.3)
    return agent


def start_states(agent, n=32, seed=1):
    g = torch.Generator().manual_seed(seed)
    s = agent.nets.sizes
    state = torch.nn.functional.one_hot(torch.randint(0, s.classes, (n, s.stoch), generator=g), s.classes)
    return TensorDict({"state": state.flatten(-2).float(), "belief": torch.rand(n, s.deter, generator=g) * 2 - 1}, [n])


# -- the actor ------------------------------------------------------------------------------
@pytest.mark.parametrize("discrete", [False, True], ids=["continuous", "discrete"])
def test_reinforce_actor_loss_is_the_official_formula_recomputed_from_its_imagined_data(discrete):
    """loss = -mean(w * logpi(sg(a)) * sg((R_lambda - v) / max(1, S))) - 3e-4 * mean(w * H), with S
    the EMA (rate 0.01, no debias) of the 5th-95th percentile range of the lambda-returns."""
    agent, cfg = tiny(discrete=discrete)
    with_random_heads(agent)
    loss_module = agent.actor_loss
    low0, high0 = loss_module.return_low.clone(), loss_module.return_high.clone()
    out, imagined = loss_module(start_states(agent))
    gamma, lmbda = cfg.gamma, cfg.lmbda
    with torch.no_grad():
        # lambda-returns from the imagined rewards, continuations and next-state values
        next_value = agent.critic(imagined["next"].select("state", "belief").clone())["state_value"]
        reward, cont = imagined["next", "reward"], imagined["next", "continuation"]
        returns, ret = [], next_value[:, -1]
        for t in reversed(range(reward.shape[1])):
            ret = reward[:, t] + gamma * cont[:, t] * ((1 - lmbda) * next_value[:, t] + lmbda * ret)
            returns.append(ret)
        lambda_return = torch.stack(returns[::-1], 1)
        assert torch.allclose(lambda_return, imagined["lambda_target"], atol=1e-5)
        # return scale: percentiles of this batch blended in at rate 0.01 (no debiasing)
        q_low, q_high = torch.quantile(lambda_return.reshape(-1), torch.tensor([0.05, 0.95]))
        low, high = low0 + 0.01 * (q_low - low0), high0 + 0.01 * (q_high - high0)
        assert torch.allclose(loss_module.return_low, low) and torch.allclose(loss_module.return_high, high)
        scale = torch.clamp(high - low, min=1.0)
        assert torch.allclose(out["return_scale"], scale)
        value = agent.critic(imagined.select("state", "belief").clone())["state_value"]
        advantage = (lambda_return - value) / scale
        dist = agent.actor.get_dist(imagined.select("state", "belief"))
        log_prob = dist.log_prob(imagined["action"]).unsqueeze(-1)
        entropy = dist.entropy().unsqueeze(-1)
        if discrete:  # one-hot imagined actions; log-probs and entropy of the unimix categorical
            assert ((imagined["action"] == 0) | (imagined["action"] == 1)).all()
            assert (imagined["action"].sum(-1) == 1).all()
            probs = dist.probs
            assert torch.allclose(log_prob.squeeze(-1), (probs * imagined["action"]).sum(-1).log(), atol=1e-5)
            assert torch.allclose(entropy.squeeze(-1), -(probs * probs.log()).sum(-1), atol=1e-5)
        weight = imagined["discount_weight"]
        expected = -(weight * log_prob * advantage).mean() - 3e-4 * (weight * entropy).mean()
    assert advantage.abs().mean() > 0.05 and scale > 1  # a non-trivial case
    assert torch.allclose(out["loss_actor"], expected, atol=1e-6), (out["loss_actor"], expected)


@pytest.mark.parametrize("actor_grad, discrete", [("reinforce", False), ("dynamics", False), ("reinforce", True)])
def test_no_actor_loss_gradient_reaches_the_world_model(actor_grad, discrete):
    agent, _ = tiny(actor_grad, discrete)
    out, _ = agent.actor_loss(start_states(with_random_heads(agent)))
    out["loss_actor"].backward()
    for part in WORLD_MODEL_PARTS:
        for name, p in getattr(agent.nets, part).named_parameters():
            assert p.grad is None or not p.grad.any(), f"{part}.{name} got actor-loss gradient"
    assert any(p.grad is not None and p.grad.any() for p in agent.nets.actor.parameters())


# -- reset rows: acting and learning agree --------------------------------------------------
@pytest.fixture
def argmax_latents(monkeypatch):
    """Deterministic latents (the mode instead of a sample) in both the acting estimator and the
    learner's rollout, so their posteriors can be compared row by row."""
    def mode(logits, unimix=0.0, uniform=None):
        hard = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
        return hard + logits - logits.detach()  # straight-through, as torchrl's sampler
    monkeypatch.setattr(model_based, "_straight_through_categorical", mode)


def recorded_episodes(first_len=6, second_len=5, seed=0):
    """Records of an episode that ends (its final observation as a record), then a new one."""
    g = torch.Generator().manual_seed(seed)
    n = first_len + 1 + second_len
    obs = torch.randn(n, 5, generator=g) * 2
    action = torch.rand(n, 1, generator=g) * 2 - 1
    is_init, is_last, done = (torch.zeros(n, 1, dtype=torch.bool) for _ in range(3))
    is_init[0] = is_init[first_len + 1] = True
    is_last[first_len] = True  # the final observation o_L
    done[first_len - 1] = True
    action[first_len] = 0
    return TensorDict({"observation": obs, "action": action, "is_init": is_init, "is_last": is_last,
                       "next": {"reward": torch.rand(n, 1, generator=g), "done": done, "terminated": done.clone()}},
                      [n])


def act(agent, records):
    """What the acting policy computes: per env step, the posterior logits of o_t and the latent
    after it (the final-observation record is never seen by the policy)."""
    nets = agent.nets
    estimator = RSSMStateEstimatorV3(nets.prior, nets.posterior)
    s = nets.sizes
    carry = TensorDict({"state": torch.zeros(1, s.S), "belief": torch.zeros(1, s.deter),
                        "previous_action": torch.zeros(1, 1)}, [1])
    logits, latents = {}, {}
    with torch.no_grad():
        for t in range(records.shape[0]):
            if records["is_last"][t]:
                continue
            embed = nets.encoder(records["observation"][t:t + 1])
            td = carry.clone().update({"encoded_latents": embed, "is_init": records["is_init"][t:t + 1]})
            estimator(td)
            logits[t] = nets.posterior._logits(td["belief"], embed)
            latents[t] = (td["state"], td["belief"])
            carry = TensorDict({"state": td["state"], "belief": td["belief"],
                                "previous_action": records["action"][t:t + 1]}, [1])
    return logits, latents


def learn(agent, records, latent0, reset_flags=None):
    batch = to_loss_batch(records.unsqueeze(0), agent)
    batch["state"][:, 0], batch["belief"][:, 0] = latent0  # the context: the acting latent of o_0
    if reset_flags is not None:
        batch["is_init"] = reset_flags
    with torch.no_grad():
        return agent.world_model(batch)["next", "posterior_logits"][0]


def test_acting_and_learning_posteriors_agree_row_by_row_across_a_reset(argmax_latents):
    agent, _ = tiny()
    records = recorded_episodes()
    acting, latents = act(agent, records)
    learned = learn(agent, records, latents[0])
    compared = 0
    for t, expected in acting.items():
        if t == 0:
            continue  # record 0 is the context
        assert torch.allclose(learned[t - 1], expected[0], atol=1e-5), f"record {t}"
        compared += 1
    assert compared == len(records) - 2  # every step record but the context


def test_torchrl_reset_layout_would_disagree_after_the_reset(argmax_latents):
    """torchrl's collector layout flags a row by its own record's is_init: the rollout then zeroes
    the action taken from o_0 and never encodes o_0, so the new episode's posteriors differ."""
    agent, _ = tiny()
    records = recorded_episodes()
    acting, latents = act(agent, records)
    torchrl_flags = records["is_init"][:-1].unsqueeze(0)
    learned = learn(agent, records, latents[0], reset_flags=torchrl_flags)
    first_of_second = 6 + 1  # record index of o'_0
    assert not torch.allclose(learned[first_of_second], acting[first_of_second + 1][0], atol=1e-3)


# -- the final observation, the context --------------------------------------------------------
def collector_transitions(n=8, done_at=4):
    """Collector-format transitions of one env (what ReplayRecords receives)."""
    s = TINY
    S = s.stoch * s.classes
    state = torch.nn.functional.one_hot(torch.randint(0, s.classes, (n, s.stoch)), s.classes).flatten(-2).float()
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[done_at] = True
    steps = torch.arange(n).unsqueeze(-1)
    return TensorDict({
        "observation": torch.arange(n).float().unsqueeze(-1).expand(n, 5).clone(),
        "action": torch.rand(n, 1), "is_init": steps == 0, "step_count": steps,
        "env_index": torch.zeros(n, dtype=torch.long), "state": torch.zeros(n, S), "belief": torch.zeros(n, s.deter),
        "next": {"observation": (torch.arange(n).float() + 100).unsqueeze(-1).expand(n, 5).clone(),
                 "reward": torch.ones(n, 1), "done": done, "terminated": done.clone(),
                 "truncated": torch.zeros(n, 1, dtype=torch.bool), "step_count": steps + 1,
                 "state": state, "belief": torch.rand(n, s.deter) * 2 - 1},
    }, [n])


def test_the_final_observation_is_stored_and_is_a_training_target():
    spec = ContextSpec(TINY.stoch, TINY.classes, TINY.deter)
    transitions = collector_transitions()
    records = ReplayRecords(["observation"], spec)(transitions)
    assert records.shape == (9,) and records["is_last"].reshape(-1).tolist() == [False] * 5 + [True] + [False] * 3
    final = records[5]
    assert torch.equal(final["observation"], transitions["next", "observation"][4])  # o_L
    assert final["step_count"] == 5 and final["next", "reward"] == 0 and not final["next", "done"]
    assert final["action"].abs().sum() == 0 and (final[CONTEXT, "belief"] == 0).all()
    decoded, _ = spec.decode(records[CONTEXT][:5])
    assert torch.equal(decoded, transitions["next", "state"][:5])  # the one-hot latent, losslessly
    assert ("next", "observation") not in records.keys(True)
    # in the learner's batch, the row of the last step targets o_L, reward and end of the episode
    agent, _ = tiny()
    records["is_init"][6] = True  # after o_L the env restarted (step_count restarts too in real data)
    batch = to_loss_batch(records.unsqueeze(0), agent, spec)
    assert torch.equal(batch["next", "observation"][0, 4], transitions["next", "observation"][4])
    assert batch["next", "done"][0, 4] and batch["next", "reward"][0, 4] == 1
    assert batch["is_init"][0, 5] and batch["next", "reward"][0, 5] == 0  # row into o'_0: reset


def test_a_sampled_sequence_starts_from_its_first_records_stored_latent():
    agent, _ = tiny()
    spec = ContextSpec(TINY.stoch, TINY.classes, TINY.deter)
    records = ReplayRecords(["observation"], spec)(collector_transitions(done_at=7)).unsqueeze(0)
    batch = to_loss_batch(records, agent, spec)
    state, belief = spec.decode(records[CONTEXT][:, 0])
    assert torch.equal(batch["state"][:, 0], state) and torch.equal(batch["belief"][:, 0], belief)
    assert belief.abs().sum() > 0
    # ... and the rollout starts from it: the first prior differs from a zero start
    with torch.no_grad():
        with_context = agent.world_model(batch.clone())["next", "prior_logits"]
        zero = batch.clone()
        zero["state"].zero_(), zero["belief"].zero_()
        from_zeros = agent.world_model(zero)["next", "prior_logits"]
    assert not torch.allclose(with_context[:, 0], from_zeros[:, 0])


def test_the_learner_writes_refreshed_latents_back_into_replay(tmp_path):
    from dreamer.config import validate
    from dreamer.run.trainer import Trainer
    from tests.helpers import SMALL, composed, transitions

    trainer = Trainer(validate(composed(*SMALL)), tmp_path)
    trainer.collection.stopped = True
    for env in range(2):
        trainer.replay.member(env).extend(transitions(env, 0, 40))
    before = [trainer.replay.member(env).storage[:40][CONTEXT].clone() for env in range(2)]
    sampled = []
    real_sample = trainer.replay.sample
    trainer.replay.sample = lambda: sampled.append(real_sample()) or sampled[-1]
    trainer.update()
    batch, spec = sampled[0], trainer.context
    refreshed = trainer.learner.loss_batch[CONTEXT]
    encoded = spec.encode(refreshed["state"], refreshed["belief"])
    written = {}  # (env, slot) -> the values the learner computed for it (sequences may overlap)
    for b in range(batch.shape[0]):
        env = int(batch["index", "buffer_ids"][b, 0])
        for t in range(1, batch.shape[1]):
            written.setdefault((env, int(batch["index", "index"][b, t])), []).append(encoded[b, t - 1])
    for env in range(2):
        stored = trainer.replay.member(env).storage[:40][CONTEXT]
        for slot in range(40):
            if (env, slot) in written:
                assert any(torch.equal(stored[slot]["belief"], c["belief"]) and torch.equal(stored[slot]["state"], c["state"])
                           for c in written[(env, slot)]), (env, slot)
            else:  # never a trained row: the acting latent stays
                assert torch.equal(stored[slot]["belief"], before[env][slot]["belief"])
    assert len(written) > 0


def test_write_back_skips_rows_overwritten_since_sampling():
    from replay.buffer import SequenceReplay
    from tests.helpers import transitions

    replay = SequenceReplay(1, 20, 1, 5)
    replay.member(0).extend(transitions(0, 0, 20))
    batch = replay.sample()
    replay.member(0).extend(transitions(0, 20, 20))  # the ring wrapped: every slot holds a newer step
    values = TensorDict({CONTEXT: {"state": torch.zeros(1, 5, 8, dtype=torch.uint8),
                                   "belief": torch.zeros(1, 5, 64, dtype=torch.float16)}}, [1, 5])
    assert replay.write_back(batch["index"], values, batch["step_count"]) == 0
    fresh = replay.sample()
    assert replay.write_back(fresh["index"], values, fresh["step_count"]) == 5


# -- official defaults and sizes -------------------------------------------------------------
def test_default_learner_carries_the_official_values():
    from dreamer.config import validate
    from tests.helpers import composed

    config = validate(composed("env=dmc_cartpole_balance", "world_model=size1m"))
    agent = build_agent(config.world_model, config.learner, PROPRIO, 1)
    groups = agent.optimizer.param_groups
    assert [g["lr"] for g in groups] == [4e-5] * 3
    assert all(g["eps"] == 1e-20 and g["agc"] == 0.3 and g["warmup_steps"] == 1000 for g in groups)
    model = agent.model_loss
    assert (model.kl_mode, model.lambda_dynamic, model.lambda_representation, model.free_bits) == ("separate", 1.0, 0.1, 1.0)
    assert model.unimix == 0.01 and model.lambda_continue == 1.0
    assert agent.loss.replay_value_loss_weight == 0.3
    actor = agent.actor_loss
    assert actor.use_reinforce and actor.entropy_bonus == 3e-4 and actor.imagination_horizon == 15
    assert actor.retnorm.quantiles == (0.05, 0.95) and actor.retnorm.rate == 0.01 and actor.retnorm.min_scale == 1.0
    assert agent.value_loss.slow_critic_regularization == 1.0
    assert config.replay.context is True


def test_v1_learner_preset_keeps_the_paper_values():
    from dreamer.config import validate
    from tests.helpers import composed

    config = validate(composed("env=dmc_cartpole_balance", "world_model=tiny", "learner=v1"))
    agent = build_agent(config.world_model, config.learner, PROPRIO, 1)
    assert [g["lr"] for g in agent.optimizer.param_groups] == [1e-4, 3e-5, 3e-5]
    assert not agent.actor_loss.use_reinforce and agent.model_loss.lambda_dynamic == 0.5


# Official nominal sizes (its configs.yaml names); torchrl's block GRU and strided convolutions make
# ours smaller. 64x64 pixels, 6-dim action (walker); the README lists these.
OFFICIAL_SIZES = {
    "size1m": 641_278, "size12m": 9_771_214, "size25m": 21_864_238, "size50m": 38_762_382,
    "size100m": 86_974_030, "size200m": 154_406_158, "size400m": 346_931_854,
}


@pytest.mark.parametrize("name", sorted(OFFICIAL_SIZES))
def test_official_size_preset_parameter_counts(name):
    cfg = preset(name)
    assert cfg.stoch == 32 and cfg.cnn_mults == [2, 3, 4, 4] and cfg.policy_layers == 3 and cfg.head_layers == 1
    with torch.device("meta"):
        counts = count_parameters(build_nets(cfg, ObsSpec(), 6))
    assert counts["total"] == OFFICIAL_SIZES[name]


def test_official_size1m_trains_a_step():
    cfg = preset("size1m")
    lc = LearnerConfig(lr_warmup_steps=0)
    agent = build_agent(cfg, lc, ObsSpec(), 6)
    from tests.helpers import replay_batch

    metrics = Learner(agent, lc).step(replay_batch(2, 5, ObsSpec(), 6))
    assert all(torch.isfinite(torch.as_tensor(v)) for v in metrics.values())
