"""DMC environments: specs, episode ends, action repeat."""
import torch

from collectors.envs.dmc import make_dmc_env


def test_pixel_env_renders_64x64_uint8_chw():
    env = make_dmc_env("walker", "walk", obs="pixels", seed=0)
    td = env.reset()
    assert td["pixels"].shape == (3, 64, 64) and td["pixels"].dtype == torch.uint8
    assert "observation" not in td.keys()
    assert env.action_spec.shape == (6,)
    assert td["is_init"].all()
    td = env.rand_step(td)
    assert td["next", "pixels"].float().std() > 0, "blank frame: rendering is broken"
    assert td["next", "reward"].dtype == torch.float32 and td["next", "reward"].shape == (1,)
    env.close()


def test_proprio_env_concatenates_state_vector():
    env = make_dmc_env("cartpole", "balance", obs="proprio", seed=0)
    td = env.reset()
    assert td["observation"].shape == (5,) and td["observation"].dtype == torch.float32
    assert "pixels" not in td.keys()
    assert env.action_spec.shape == (1,)
    env.close()


def test_both_observations():
    env = make_dmc_env("cartpole", "balance", obs="both", seed=0)
    td = env.reset()
    assert td["pixels"].shape == (3, 64, 64) and td["observation"].shape == (5,)
    env.close()


def test_episode_ends_truncated_at_time_limit_over_action_repeat():
    env = make_dmc_env("cartpole", "balance", obs="proprio", action_repeat=2, seed=0)
    ro = env.rollout(600, break_when_any_done=True)
    assert ro.shape[0] == 500  # 1000 physics-control steps / action repeat 2
    assert ro["next", "done"][-1].item() and ro["next", "truncated"][-1].item()
    assert not ro["next", "terminated"].any()
    assert not ro["next", "done"][:-1].any()
    assert ro["is_init"][0].item() and not ro["is_init"][1:].any()


def test_action_repeat_sums_rewards():
    torch.manual_seed(0)
    actions = torch.rand(20, 1) * 2 - 1
    env1 = make_dmc_env("cartpole", "balance", obs="proprio", action_repeat=1, seed=3)
    env2 = make_dmc_env("cartpole", "balance", obs="proprio", action_repeat=2, seed=3)
    td1, td2 = env1.reset(), env2.reset()
    assert torch.allclose(td1["observation"], td2["observation"])
    single = []
    for a in actions:
        td1["action"] = a
        td1 = env1.step(td1)
        single.append(td1["next", "reward"].item())
        td1 = td1["next"]
        td1["action"] = a
        td1 = env1.step(td1)
        single.append(td1["next", "reward"].item())
        td1 = td1["next"]
        td2["action"] = a
        td2 = env2.step(td2)
        assert abs(td2["next", "reward"].item() - (single[-1] + single[-2])) < 1e-5
        assert torch.allclose(td2["next", "observation"], td1["observation"])
        td2 = td2["next"]


def test_fast_visuals_keep_shape_and_change_image():
    slow = make_dmc_env("walker", "walk", obs="pixels", seed=0).reset()["pixels"]
    fast = make_dmc_env("walker", "walk", obs="pixels", fast_visuals=True, seed=0).reset()["pixels"]
    assert fast.shape == slow.shape and fast.dtype == slow.dtype
    assert not torch.equal(fast, slow)


def test_mujocos_warning_about_dm_controls_own_xml_is_dropped_and_other_warnings_kept(caplog):
    """MuJoCo 3.x warns through absl at every load of dm_control's cheetah XML ('settotalmass' is
    deprecated): nothing a user can act on. That one warning is dropped; others still reach the log."""
    import logging

    with caplog.at_level(logging.WARNING, logger="absl"):
        make_dmc_env("cheetah", "run", obs="proprio", seed=0).close()
        logging.getLogger("absl").warning("another warning")
    messages = [r.getMessage() for r in caplog.records]
    assert "another warning" in messages
    assert not any("settotalmass" in m for m in messages), messages
