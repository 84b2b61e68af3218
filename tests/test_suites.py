"""Every suite (DMC, Gymnasium, Atari, Crafter): keys, shapes and dtypes, episode ends, the discrete
actor, and bad input at start-up."""
import numpy as np
import pytest
import torch
from torchrl.data import OneHot

import tests.gym_envs  # noqa: F401  (registers the DreamerTest/* envs)
from collectors.envs import make_env
from collectors.specs import env_key, env_spec
from dreamer.agent.actors import DiscreteActorNet
from dreamer.config import ConfigError, EnvConfig, check_task
from patches.distributions import OneHotActions
from tests.conftest import ROOT


def env_cfg(**fields) -> dict:
    import dataclasses

    return {**dataclasses.asdict(EnvConfig()), **fields}


CARTPOLE = env_cfg(suite="gym", id="CartPole-v1", obs="proprio", action_repeat=1)
PENDULUM = env_cfg(suite="gym", id="Pendulum-v1", obs="proprio", action_repeat=1)
PONG = env_cfg(suite="atari100k", task="pong", obs="pixels", action_repeat=4, noops=30)
FULL_ATARI = env_cfg(suite="atari", task="breakout", obs="pixels", image_size=96, action_repeat=4, gray=True,
                     sticky=True, actions="all", noops=30)
CRAFTER = env_cfg(suite="crafter", task="reward", obs="pixels", action_repeat=1)
DICT_ENV = env_cfg(suite="gym", id="DreamerTest/DictImageVector-v0", obs="both", action_repeat=1)
DMC = env_cfg(suite="dmc", domain="cartpole", task="balance", obs="both", action_repeat=2)

CASES = {  # cfg, pixels [C, H, W], vector dim, actions, discrete
    "gym_cartpole": (CARTPOLE, None, 4, 2, True),
    "gym_pendulum": (PENDULUM, None, 3, 1, False),
    "gym_dict_image_vector": (DICT_ENV, (3, 64, 64), 10, 3, True),
    "atari100k_pong": (PONG, (3, 64, 64), None, 6, True),
    "atari_breakout_full": (FULL_ATARI, (1, 96, 96), None, 18, True),
    "crafter": (CRAFTER, (3, 64, 64), None, 17, True),
    "dmc_cartpole": (DMC, (3, 64, 64), 5, 1, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_suite_emits_the_apps_keys_shapes_and_dtypes(name):
    cfg, pixels, vector_dim, actions, discrete = CASES[name]
    spec = env_spec(cfg)
    assert (spec.pixels, spec.vector_dim, spec.action_dim, spec.discrete) == (pixels, vector_dim, actions, discrete)
    env = make_env(cfg, seed=0)
    try:
        assert isinstance(env.action_spec, OneHot) == discrete
        td = env.rand_step(env.reset())
        if discrete:
            assert td["action"].shape == (actions,) and td["action"].sum() == 1
        else:
            assert td["action"].shape == (actions,) and td["action"].abs().max() <= 1
        for root in (td, td["next"]):
            if pixels:
                assert root["pixels"].dtype == torch.uint8 and tuple(root["pixels"].shape) == pixels
            else:
                assert "pixels" not in root.keys()
            if vector_dim:
                assert root["observation"].dtype == torch.float32 and root["observation"].shape == (vector_dim,)
        assert td["next", "reward"].dtype == torch.float32 and td["next", "reward"].shape == (1,)
        assert td["is_init"].item() and not td["next", "is_init"].item()
        for flag in ("done", "terminated", "truncated"):
            assert td["next", flag].dtype == torch.bool
    finally:
        env.close()


def guarded(env):
    """The suite's Gymnasium env under the app's EnvErrors guard (a gymnasium Wrapper forwards no attributes)."""
    from collectors.envs.guard import EnvErrors

    wrapper = env.base_env._env
    assert isinstance(wrapper, EnvErrors)
    return wrapper.env


def run_episode(env, max_steps=5000):
    td = env.reset()
    for step in range(1, max_steps + 1):
        td = env.rand_step(td)
        if td["next", "done"].item():
            return step, td["next", "terminated"].item(), td["next", "truncated"].item()
        td = td["next"]
    raise AssertionError("episode did not end")


def test_gymnasium_termination_and_time_limit():
    env = make_env(CARTPOLE, seed=0)
    steps, terminated, truncated = run_episode(env)
    assert terminated and not truncated and steps < 200  # the pole fell under random actions
    env = make_env(PENDULUM, seed=0)
    assert run_episode(env) == (200, False, True)  # Pendulum has no end but its 200-step limit
    env = make_env({**PENDULUM, "action_repeat": 3}, seed=0)
    assert run_episode(env) == (67, False, True)  # 200 frames at repeat 3, the last repeat cut short


def test_atari_game_over_is_terminated_and_the_frame_limit_truncated(monkeypatch):
    from collectors.envs import atari

    steps, terminated, truncated = run_episode(make_env(PONG, seed=0))
    assert terminated and not truncated  # a random player loses 21 points
    monkeypatch.setattr(atari, "LENGTH_FRAMES", 40)
    assert run_episode(make_env(PONG, seed=0)) == (10, False, True)


def test_atari_losing_a_life_does_not_end_the_episode():
    env = atari_env = make_env(env_cfg(**{**PONG, "task": "breakout"}), seed=0)
    gym_env = guarded(atari_env)
    td, lives_lost = env.reset(), 0
    lives = gym_env.ale.lives()
    for _ in range(3000):
        td = env.rand_step(td)
        now = gym_env.ale.lives()
        if 0 < now < lives:
            lives_lost += 1
            assert not td["next", "done"].item()
        lives = now
        if td["next", "done"].item():
            break
        td = td["next"]
    assert lives_lost >= 1


def test_crafter_death_is_terminated_and_the_step_limit_truncated(monkeypatch):
    from collectors.envs import crafter

    monkeypatch.setattr(crafter, "LENGTH", 30)
    env = make_env(CRAFTER, seed=0)
    assert run_episode(env) == (30, False, True)
    achievements = env.reset()["achievements"]
    assert achievements.dtype == torch.uint8 and achievements.shape == (22,) and achievements.sum() == 0
    inner = guarded(env)
    real_step = inner._env.step

    def dies(action):
        image, reward, _, info = real_step(action)
        return image, reward, True, {**info, "discount": 0.0}

    inner._env.step = dies
    td = env.rand_step(env.reset())
    assert td["next", "terminated"].item() and not td["next", "truncated"].item()


def test_crafter_score_is_the_benchmarks_geometric_mean():
    from collectors.envs.crafter import crafter_score

    assert crafter_score([0.0] * 22) == pytest.approx(0.0)
    assert crafter_score([100.0] * 22) == pytest.approx(100.0)
    rates = [100.0] * 11 + [0.0] * 11
    assert crafter_score(rates) == pytest.approx(np.sqrt(101.0) - 1.0)  # exp(mean(log(1 + s))) - 1


def test_discrete_actor_mixes_in_one_percent_uniform_and_its_mode_is_one_hot():
    torch.manual_seed(0)
    net = DiscreteActorNet(in_features=8, action_dim=4, layers=1, units=16, unimix=0.01)
    with torch.no_grad():
        for p in net.head.parameters():
            p.mul_(1000)  # a near-deterministic policy
        logits = net(torch.randn(64, 4), torch.randn(64, 4))
    probs = logits.exp()
    assert torch.allclose(probs.sum(-1), torch.ones(64), atol=1e-5)
    assert probs.min() >= 0.01 / 4 - 1e-6  # every action keeps unimix / K
    dist = OneHotActions(logits=logits)
    sample = dist.sample()
    assert sample.dtype == torch.float32 and (sample.sum(-1) == 1).all()
    assert torch.allclose(dist.log_prob(sample), (probs * sample).sum(-1).log(), atol=1e-5)
    tied = OneHotActions(logits=torch.zeros(2, 5))
    assert (tied.mode.sum(-1) == 1).all()  # torchrl's own mode would be all ones here


def test_dict_observations_one_hot_discretes_and_leave_text_out():
    spec = env_spec(env_cfg(suite="gym", id="DreamerTest/DictNested-v0", obs="proprio", action_repeat=1))
    assert spec.vector_dim == 5 + 4 and spec.text_keys == ()
    env = make_env(env_cfg(suite="gym", id="DreamerTest/DictNested-v0", obs="proprio", action_repeat=1), seed=0)
    obs = env.reset()["observation"]
    goal, joints = obs[:4], obs[4:]  # the Dict's key order: goal, joints
    assert goal.sum() == 1 and set(goal.tolist()) == {0.0, 1.0} and joints.abs().max() <= 1
    env.close()
    top = make_env(env_cfg(suite="gym", id="DreamerTest/Discrete-v0", obs="proprio", action_repeat=1), seed=0)
    gym_env = guarded(top)
    td = top.reset()
    raw = gym_env.unwrapped  # Discrete(6, start=1): value v -> one-hot index v - 1
    assert td["observation"].shape == (6,) and td["observation"].sum() == 1
    assert gym_env.observation(3)["observation"].tolist() == [0, 0, 1, 0, 0, 0] and raw is not None
    top.close()


def test_a_symbolic_grid_is_flattened_into_the_vector_and_text_is_named():
    cfg = env_cfg(suite="gym", id="DreamerTest/GridMission-v0", obs="symbolic", action_repeat=1)
    spec = env_spec(cfg)
    assert (spec.pixels, spec.vector_dim, spec.text_keys) == (None, 4 + 7 * 7 * 3, ("mission",))
    env = make_env(cfg, seed=0)
    gym_env = guarded(env)
    grid = np.arange(147, dtype=np.uint8).reshape(7, 7, 3) % 11
    vector = gym_env.observation({"direction": 2, "image": grid, "mission": "go"})["observation"]
    assert vector[:4].tolist() == [0, 0, 1, 0] and (vector[4:] == grid.reshape(-1)).all()
    assert "pixels" not in env.reset().keys()
    env.close()
    pixels = env_spec({**cfg, "obs": "pixels", "image_size": 16})  # the same grid read as a picture
    assert pixels.pixels == (3, 16, 16) and pixels.vector_dim is None


def test_minigrid_runs_as_it_is():
    cfg = env_cfg(suite="gym", id="MiniGrid-Empty-8x8-v0", obs="symbolic", action_repeat=1)
    check_task(EnvConfig(**cfg))  # registers minigrid's ids on its own
    spec = env_spec(cfg)
    assert (spec.vector_dim, spec.action_dim, spec.discrete) == (4 + 147, 7, True)
    assert spec.text_keys == ("mission",) and spec.max_steps == 256  # MiniGrid's own limit (4 x 8 x 8)
    env = make_env(cfg, seed=0)
    steps, terminated, truncated = run_episode(env)
    assert (steps, terminated, truncated) == (256, False, True) or (terminated and steps < 256)
    env.close()


def test_old_dmc_checkpoint_env_configs_have_a_spec():
    saved = {"domain": "cartpole", "task": "balance", "obs": "proprio", "image_size": 64, "action_repeat": 2,
             "camera": None, "fast_visuals": False}  # saved before the suites existed
    assert env_key(saved)[0] == "dmc" and env_spec(saved).vector_dim == 5


@pytest.mark.parametrize("fields, key, words", [
    (dict(suite="gym", id="CartPol-v1", obs="proprio"), "env.id", ["closest registered ids", "CartPole-v1"]),
    (dict(suite="gym", id=None), "env.id", ["needs a Gymnasium env id"]),
    (dict(suite="atari100k", task="pongg"), "env.task", ["unknown Atari game", "pong", "breakout"]),
    (dict(suite="gym", id="DreamerTest/Text-v0", obs="proprio"), "env.id", ["Text("]),
    (dict(suite="gym", id="DreamerTest/DictTuple-v0", obs="proprio"), "env.id", ["pair: Tuple("]),
    (dict(suite="dmc", domain="cartpole", task="balance", obs="symbolic"), "env.obs", ["for gym envs"]),
    (dict(suite="gym", id="DreamerTest/MultiDiscrete-v0", obs="proprio"), "env.id", ["MultiDiscrete"]),
    (dict(suite="gym", id="tests.no_such_module:X-v0"), "env.id", ["cannot import"]),
    (dict(suite="crafter", task="score"), "env.task", ["reward, noreward"]),
    (dict(suite="crafter", task="reward", obs="proprio"), "env.obs", ["pixels only"]),
    (dict(suite="gym", id="CartPole-v1", obs="pixels", image_size=8), "env.image_size", [">= 16"]),
    (dict(suite="atari", actions="some"), "env.actions", ["minimal, all"]),
    (dict(suite="mujoco"), "env.suite", ["atari, atari100k, crafter, dmc, gym"]),
])
def test_bad_env_input_names_the_key(fields, key, words):
    with pytest.raises(ConfigError) as err:
        check_task(EnvConfig(**{"task": "pong", **fields}))
    assert err.value.key == key, str(err.value)
    for word in words:
        assert word in str(err.value)


def test_episode_ends_carry_crafter_achievements_into_success_rates():
    from tensordict import TensorDict

    from collectors.episodes import EpisodeTracker, SuccessRates
    from replay.records import ReplayRecords

    n = 6  # env 0 ends at step 2 with achievement 0, at step 5 with achievements 0 and 3
    achievements = torch.zeros(n, 22, dtype=torch.uint8)
    achievements[2, 0] = achievements[5, [0, 3]] = 1
    done = torch.tensor([False, False, True, False, False, True]).reshape(n, 1)
    batch = TensorDict({
        "pixels": torch.zeros(n, 3, 8, 8, dtype=torch.uint8), "action": torch.zeros(n, 17),
        "is_init": torch.tensor([1, 0, 0, 1, 0, 0], dtype=torch.bool).reshape(n, 1),
        "step_count": torch.tensor([0, 1, 2, 0, 1, 2]).reshape(n, 1), "env_index": torch.zeros(n, 1, dtype=torch.long),
        "next": {"pixels": torch.zeros(n, 3, 8, 8, dtype=torch.uint8), "reward": torch.ones(n, 1),
                 "done": done, "terminated": done, "truncated": torch.zeros(n, 1, dtype=torch.bool),
                 "achievements": achievements, "step_count": torch.tensor([1, 2, 3, 1, 2, 3]).reshape(n, 1)}}, [n])
    records = ReplayRecords(["pixels"], stats=("achievements",))(batch)
    assert records.shape == (n + 2,) and records["next", "achievements"].dtype == torch.uint8
    tracker = EpisodeTracker(stats=("achievements",))
    tracker(records)
    assert tracker.pop_finished() == [(3.0, 3), (3.0, 3)]
    ends = tracker.pop_stats()
    assert [e["achievements"][0] for e in ends] == [1, 1] and [e["achievements"][3] for e in ends] == [0, 1]
    success = SuccessRates([f"a{i}" for i in range(22)])
    success.add([e["achievements"] for e in ends])
    rates = success.rates()
    assert rates["a0"] == 100.0 and rates["a3"] == 50.0 and rates["a1"] == 0.0


def test_replay_bytes_per_transition_per_suite():
    from collectors.specs import spec_bytes

    assert spec_bytes(env_spec(CARTPOLE)) == 4 * 4 + 2 * 4 + 41
    assert spec_bytes(env_spec(PONG)) == 64 * 64 * 3 + 6 * 4 + 41
    assert spec_bytes(env_spec(FULL_ATARI)) == 96 * 96 + 18 * 4 + 41
    assert spec_bytes(env_spec(CRAFTER)) == 64 * 64 * 3 + 17 * 4 + 22 + 41  # + the achievements


def test_the_suites_are_the_modules_that_export_one(tmp_path):
    from collectors.envs import suite as suites

    assert suites.SUITE_MODULES == {"atari": "atari", "atari100k": "atari", "crafter": "crafter", "dmc": "dmc",
                                    "gym": "gym"}
    (tmp_path / "corridor.py").write_text((ROOT / "tests" / "corridor_suite.py").read_text())
    (tmp_path / "helpers.py").write_text("SUITES = 1\n")  # no SUITE: not a suite
    assert suites.discover(tmp_path) == {"corridor": "corridor"}


def test_a_new_suite_is_one_module_and_one_yaml(monkeypatch):
    """docs/environments.md's worked example (tests/corridor_suite.py): once its module is found (in
    collectors/envs/ by its SUITE; here in tests/), the config, start-up check, spec, task name,
    placement and env factory all serve it."""
    from collectors.envs import suite as suites
    from dreamer.config import placement

    monkeypatch.setitem(suites.SUITE_MODULES, "corridor", "tests.corridor_suite")
    cfg = EnvConfig(suite="corridor", task="short", obs="proprio", action_repeat=1)
    check_task(cfg)
    assert cfg.name == "corridor_short"
    assert env_spec(cfg) == env_spec(env_cfg(suite="corridor", task="short", obs="proprio", action_repeat=1))
    spec = env_spec(cfg)
    assert (spec.vector_dim, spec.action_dim, spec.discrete, spec.max_steps, spec.pixels) == (5, 2, True, 20, None)
    with pytest.raises(ConfigError) as err:
        check_task(EnvConfig(suite="corridor", task="wide", obs="proprio"))
    assert err.value.key == "env.task" and "short, long" in str(err.value)
    with pytest.raises(ConfigError) as err:
        EnvConfig(suite="corridor", task="short", obs="pixels")
    assert err.value.key == "env.obs" and "corridor observes proprio only" in str(err.value)
    env = make_env(env_cfg(suite="corridor", task="short", obs="proprio", action_repeat=1), seed=0)
    td = env.reset()
    for _ in range(4):  # four steps right reach the end
        td = env.step(td.set("action", torch.tensor([0.0, 1.0])))
        reward, terminated = float(td["next", "reward"]), bool(td["next", "terminated"])
        td = td["next"]
    assert (reward, terminated) == (1.0, True)

    class Config:
        env = cfg
    assert "no rendering" in placement.describe(Config, "cpu", "cpu", 0)


def test_collectors_never_import_dreamer():
    """The arrow runs one way: dreamer/ builds on collectors/, which knows nothing about learning."""
    import ast

    from tests.conftest import ROOT

    for path in sorted((ROOT / "collectors").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.split(".")[0] in ("dreamer", "benchmarks")], path
