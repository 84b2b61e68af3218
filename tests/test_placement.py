"""Where the parts of a run go on a node: device indices checked at start-up, render GPUs per worker."""
import os

import pytest

from dreamer.config import CollectorConfig, Config, ConfigError, EnvConfig, LearnerConfig, placement


def config(learner="auto", collector="auto", render="all"):
    return Config(env=EnvConfig(render_devices=render), learner=LearnerConfig(device=learner),
                  collector=CollectorConfig(device=collector))


def test_workers_render_round_robin_over_the_render_devices():
    assert [placement.render_device(i, "all", 4) for i in range(6)] == [0, 1, 2, 3, 0, 1]
    assert [placement.render_device(i, [2, 3], 4) for i in range(4)] == [2, 3, 2, 3]
    assert placement.render_device(0, "all", 0) is None  # no GPU: MuJoCo's default (llvmpipe here)


def test_a_data_parallel_ranks_workers_render_on_its_own_gpu():
    assert [placement.render_device(i, "all", 4, local_rank=2) for i in range(3)] == [2, 2, 2]
    assert [placement.render_device(i, [0, 1], 4, local_rank=2) for i in range(3)] == [0, 1, 0]  # as given
    assert placement.render_device(0, "all", 0, local_rank=1) is None


@pytest.mark.parametrize("cfg, gpus, key", [
    (config(learner="cuda:1"), 4, None), (config(collector="cuda:3", render=[0, 3]), 4, None),
    (config(learner="cuda:4"), 4, "learner.device"), (config(collector="cuda:1"), 1, "collector.device"),
    (config(learner="cuda"), 0, "learner.device"), (config(render=[0, 4]), 4, "env.render_devices"),
    (config(render="gpus"), 4, "env.render_devices"), (config(render=[-1]), 4, "env.render_devices"),
])
def test_device_indices_beyond_the_node_fail_naming_the_key(cfg, gpus, key):
    if key is None:
        placement.check(cfg, gpus=gpus)
        return
    with pytest.raises(ConfigError) as err:
        placement.check(cfg, gpus=gpus)
    assert err.value.key == key


def test_the_start_up_line_says_what_runs_where():
    cfg = config(render=[1, 2])
    cfg.env.obs = "pixels"
    line = placement.describe(cfg, "cuda:0", "cuda:3", gpus=4)
    assert line == ("placement: learner on cuda:0, inference server on cuda:3, workers render on GPU 1, 2 "
                    "(MUJOCO_EGL_DEVICE_ID, round-robin)")
    assert "render on the CPU" in placement.describe(config(), "cpu", "cpu", gpus=0).replace("renders", "render")


def test_a_dmc_worker_sets_mujoco_egl_device_id_before_it_first_renders(monkeypatch):
    """torchrl sets EGL_DEVICE_ID, which MuJoCo does not read: the env sets MUJOCO_EGL_DEVICE_ID."""
    from dm_control.suite.wrappers import pixels

    from collectors.envs import env_factory

    seen = {}

    class Rendered(Exception):
        pass

    def first_render(*args, **kwargs):  # the pixel wrapper renders once when it is built
        seen["id"] = os.environ.get("MUJOCO_EGL_DEVICE_ID")
        raise Rendered

    monkeypatch.setenv("MUJOCO_EGL_DEVICE_ID", "unset")  # records the original, restored after the test
    monkeypatch.delenv("MUJOCO_EGL_DEVICE_ID")
    monkeypatch.setattr(pixels, "Wrapper", first_render)
    env = EnvConfig(domain="cartpole", task="balance", obs="pixels")
    with pytest.raises(Rendered):
        env_factory(env, seed=0, render_device=3)()
    assert seen["id"] == "3"
    monkeypatch.setenv("MUJOCO_EGL_DEVICE_ID", "7")
    with pytest.raises(Rendered):
        env_factory(env, seed=0)()  # no render device: the process's own setting stands
    assert seen["id"] == "7"


def test_dmc_rendering_is_not_imported_before_a_worker_sets_its_device():
    """dm_control opens its EGL display at import, on MUJOCO_EGL_DEVICE_ID's device: unpickling a
    worker's env factory must not import it."""
    import subprocess
    import sys

    code = ("import pickle, sys; from collectors.envs import env_factory; from dreamer.config import EnvConfig; "
            "f = pickle.dumps(env_factory(EnvConfig(domain='cartpole', task='balance'), seed=0, render_device=0)); "
            "[sys.modules.pop(m) for m in list(sys.modules) if m.startswith(('dm_control', 'collectors', 'dreamer'))]; "
            "pickle.loads(f); print('dm_control._render' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=__import__("tests.conftest").conftest.ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
