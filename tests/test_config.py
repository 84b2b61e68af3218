"""Config composition and start-up validation, as users meet them."""

import pytest
from omegaconf import OmegaConf

from dreamer.config import Config, ConfigError, register_configs, validate
from tests.conftest import ROOT
from tests.helpers import composed

register_configs()


def test_defaults_compose_and_validate():
    cfg = validate(composed())
    assert isinstance(cfg, Config)
    assert (cfg.env.domain, cfg.env.task, cfg.env.obs) == ("walker", "walk", "pixels")
    assert cfg.collector.transport == "process_slot"
    assert cfg.world_model.size == "s"


@pytest.mark.parametrize("preset", ["cpu", "quick", "learn_cpu", "learn_cartpole", "dmc_vision", "seed_pixel_64env",
                                    "seed_pixel_64env_4gpu", "atari100k", "crafter"])
def test_experiment_presets_compose(preset):
    cfg = composed(f"experiment={preset}")
    assert cfg.collector.num_envs >= 1


@pytest.mark.parametrize("preset, suite, name, repeat", [
    ("gym_cartpole", "gym", "gym_CartPole-v1", 1), ("atari_pong", "atari100k", "atari100k_pong", 4),
    ("atari_breakout", "atari100k", "atari100k_breakout", 4), ("atari", "atari", "atari_pong", 4),
    ("crafter", "crafter", "crafter_reward", 1), ("dmc_walker_walk", "dmc", "dmc_walker_walk", 2)])
def test_env_presets_validate_with_official_task_names(preset, suite, name, repeat):
    cfg = validate(composed(f"env={preset}", "world_model=tiny"))
    assert (cfg.env.suite, cfg.env.name, cfg.env.action_repeat) == (suite, name, repeat)


ENV_PRESETS = sorted(p.stem for p in (ROOT / "conf" / "env").glob("*.yaml") if p.stem != "gym")


@pytest.mark.parametrize("env", ENV_PRESETS + ["gym"])
def test_the_cpu_preset_composes_with_every_env_preset(env):
    extra = ["env.id=Acrobot-v1"] if env == "gym" else []
    cfg = validate(composed("experiment=cpu", f"env={env}", *extra))
    assert (cfg.world_model.size, cfg.learner.train_ratio, cfg.learner.actor_grad) == ("tiny", 128, "auto")
    assert cfg.env == validate(composed(f"env={env}", *extra)).env  # the preset leaves the env to the user


def test_the_cpu_presets_for_make_train_and_the_learning_benchmark_are_cpu_plus_an_env_and_a_budget():
    cartpole, swingup = validate(composed("experiment=learn_cartpole")), validate(composed("experiment=learn_cpu"))
    cpu = validate(composed("experiment=cpu", "env=gym_cartpole"))
    assert cartpole.learner == cpu.learner and cartpole.replay == cpu.replay and cartpole.world_model == cpu.world_model
    assert swingup.learner == cpu.learner and (swingup.env.name, swingup.env.obs) == ("dmc_cartpole_swingup", "proprio")
    assert (cartpole.collector.total_frames, swingup.collector.total_frames) == (4000, 15000)


def test_seed_presets_match_the_reference_run_and_place_parts_on_four_gpus():
    from dreamer.config import placement

    one = composed("experiment=seed_pixel_64env")  # (validating needs CUDA)
    col, rep, lrn = one.collector, one.replay, one.learner
    assert (col.num_envs, col.transition_chunk_size, col.inference_static_batch_size, col.transport) == \
        (64, 64, 64, "process_slot")
    assert (lrn.train_ratio, lrn.compile, lrn.cudagraph, lrn.bf16) == (16, True, True, True)
    assert (rep.batch_size, rep.batch_length) == (32, 256)
    four = composed("experiment=seed_pixel_64env_4gpu")
    assert (four.learner.device, four.collector.device, list(four.env.render_devices)) == ("cuda:0", "cuda:1", [2, 3])
    assert four.replay.batch_length == 256  # the rest comes from seed_pixel_64env
    placement.check(four, gpus=4)
    with pytest.raises(ConfigError) as err:
        placement.check(four, gpus=2)
    assert err.value.key == "env.render_devices"


def test_official_atari100k_and_crafter_settings():
    atari = validate(composed("experiment=atari100k")).env
    assert (atari.image_size, atari.gray, atari.sticky, atari.actions, atari.noops) == (64, False, False, "minimal", 30)
    full = validate(composed("env=atari")).env
    assert (full.image_size, full.gray, full.sticky, full.actions) == (96, True, True, "all")
    for preset, ratio, steps in (("atari100k", 256, 110_000), ("crafter", 512, 1_100_000)):
        cfg = composed(f"experiment={preset}")
        assert (cfg.learner.train_ratio, cfg.collector.total_frames, cfg.collector.num_envs) == (ratio, steps, 1)
        assert cfg.world_model.size == "size200m" and cfg.eval.sample_actions


@pytest.mark.parametrize("size", ["tiny", "xs", "s", "m", "l", "xl"])
def test_world_model_presets_validate(size):
    assert validate(composed(f"world_model={size}")).world_model.size == size


def test_chunk_auto_resolves_to_64_capped_by_share_of_batch():
    cfg = validate(composed("collector.num_envs=4", "collector.frames_per_batch=1024"))
    assert cfg.collector.chunk_size() == 64
    cfg = validate(composed("collector.num_envs=4", "collector.frames_per_batch=32"))
    assert cfg.collector.chunk_size() == 8


# (overrides, key named in the error)
BAD = [
    (["collector.transition_chunk_size=0"], "collector.transition_chunk_size"),
    (["collector.transition_chunk_size=big"], "collector.transition_chunk_size"),
    (["collector.transition_chunk_size=128", "collector.frames_per_batch=64"], "collector.transition_chunk_size"),
    (["collector.inference_static_batch_size=8", "collector.num_envs=4"], "collector.inference_static_batch_size"),
    (["collector.num_envs=0"], "collector.num_envs"),
    (["collector.total_frames=-5"], "collector.total_frames"),
    (["collector.transport=zmq"], "collector.transport"),
    (["env.task=fly"], "env.task"),
    (["env.domain=spaceship"], "env.domain"),
    (["env.obs=audio"], "env.obs"),
    (["learner.compile=sometimes"], "learner.compile"),
    (["learner.train_ratio=0"], "learner.train_ratio"),
    (["replay.batch_length=1"], "replay.batch_length"),
    (["logger.mode=loud"], "logger.mode"),
    (["checkpoint.resume=/no/such/checkpoint.pt"], "checkpoint.resume"),
    (["resume=/no/such/checkpoint.pt"], "resume"),
    (["checkpoint.replay_max_gb=-1"], "checkpoint.replay_max_gb"),
    (["learner.lr_warmup_steps=-1"], "learner.lr_warmup_steps"),
    (["world_model.blocks=7"], "world_model.blocks"),
    (["learner.actor_grad=foo"], "learner.actor_grad"),
    (["learner.lr=0"], "learner.lr"),
    (["learner.model_lr=-1"], "learner.model_lr"),
    (["world_model.cnn_mults=[]"], "world_model.cnn_mults"),
    (["learner.device=cuda:64"], "learner.device"),
    (["replay.prefetch=-1"], "replay.prefetch"),
    (["collector.device=cuda:64"], "collector.device"),
    (["env.render_devices=[64]"], "env.render_devices"),
    (["env.suite=mujoco"], "env.suite"),
    (["env=gym", "env.id=CartPol-v1"], "env.id"),
    (["env=atari_pong", "env.task=pongg"], "env.task"),
    (["env=gym_cartpole", "learner.actor_grad=dynamics"], "learner.actor_grad"),
]


@pytest.mark.parametrize("overrides,key", BAD, ids=[k + ":" + o[0] for o, k in BAD])
def test_bad_values_raise_config_error_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        validate(composed(*overrides))
    assert err.value.key == key
    assert key in str(err.value)


def test_static_batch_on_cpu_is_rejected_at_start_up():
    with pytest.raises(ConfigError, match="CUDA inference device") as err:
        validate(composed("collector.inference_static_batch_size=2", "collector.device=cpu"))
    assert err.value.key == "collector.inference_static_batch_size"


def test_cudagraph_true_on_cpu_is_rejected():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match="learner.cudagraph"):
        validate(composed("learner.cudagraph=true"))


def test_cfg_job_prints_composed_config(train):
    proc = train("--cfg", "job", "collector.transition_chunk_size=64")
    assert proc.returncode == 0, proc.stderr
    printed = OmegaConf.create(proc.stdout)
    assert printed.collector.transition_chunk_size == 64
    assert set(printed.keys()) >= {"env", "collector", "world_model", "learner", "replay", "logger"}


# (override, the key the message names, a piece of the allowed values / the reason)
FAIL_FAST = [
    ("collector.transition_chunk_size=0", "collector.transition_chunk_size", "int >= 1 or 'auto'"),
    ("collector.bogus=1", "collector.bogus", "valid keys in collector: num_envs, frames_per_batch"),
    ("bogus=1", "bogus", "valid keys in the top level: env, collector"),
    ("seed.x=1", "seed.x", "seed is a value"),
    ("collector.num_envs=two", "collector.num_envs", "could not be converted to Integer"),
    ("learner.lr=1e-4,fast", "learner.lr", "'fast' of type 'str' could not be converted to Float"),
    ("env=dmc_nonexistent", "env", "dmc_walker_walk"),  # Hydra lists the group's presets
    ("env.domain=nope", "env.domain", "walker"),
    ("env.task=nope", "env.task", "walk"),
    ("collector.inference_static_batch_size=8", "collector.inference_static_batch_size", "between 1 and"),
    ("collector.transition_chunk_size=128", "collector.transition_chunk_size", "<= collector.frames_per_batch"),
    ("learner.cudagraph=true", "learner.cudagraph", "use auto or false"),
    ("collector.total_frames=-5", "collector.total_frames", ">= 1"),
    ("resume=/no/such/run/checkpoints", "resume", "no such file"),
    ("replay.capacity=100000000", "replay.capacity", "transitions fit"),  # 1.2 TB of pixels
    ("learner.compile=maybe", "learner.compile", "auto, true, false"),
    ("env.obs=depth", "env.obs", "pixels, proprio, both, symbolic"),
    ("env.nonfinite=ignore", "env.nonfinite", "error, zero"),
    ("logger.mode=loud", "logger.mode", "offline, online, disabled"),
    ("replay.batch_length=1", "replay.batch_length", ">= 2"),
]


@pytest.mark.parametrize("override,key,allowed", FAIL_FAST, ids=[o for o, _, _ in FAIL_FAST])
def test_train_py_fails_fast_naming_the_key(train, override, key, allowed, tmp_path):
    # the limit bounds a hang: about a second on an idle machine; cwd: the default run dir's root
    proc = train(override, timeout=60, cwd=tmp_path)
    message = proc.stderr + proc.stdout
    assert proc.returncode == 2, message[-2000:]  # the app's exit status for a config error
    assert key in message and allowed in message, message[-2000:]
    assert "Traceback" not in message
    assert "training " not in proc.stdout and "learner:" not in proc.stdout  # before anything was built
    assert list(tmp_path.iterdir()) == []  # no empty run dir (outputs/<day>/<run>) left behind


def test_a_rejected_config_keeps_a_run_dir_the_user_named_or_that_holds_anything_else(train, tmp_path):
    """Only a default-layout run dir Hydra just made (outputs/<day>/<run>: its .hydra/ and an empty
    log) is removed on a config error; a dir the user named stays (empty or not), and so does a day
    dir holding other runs."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    (tmp_path / "empty").mkdir()
    for name in ("mine", "empty"):
        proc = train("learner.lr=-1", f"hydra.run.dir={tmp_path / name}", timeout=60)
        assert proc.returncode == 2 and "learner.lr" in proc.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep" and (tmp_path / "empty").is_dir()
    other = tmp_path / "outputs" / "2026-12-07" / "other-run"
    other.mkdir(parents=True)
    proc = train("learner.lr=-1", "hydra.run.dir=outputs/2026-12-07/rejected", timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert sorted(p.name for p in (tmp_path / "outputs" / "2026-12-07").iterdir()) == ["other-run"]


GROUPS = ["experiment", "env", "collector", "world_model", "learner", "replay", "logger"]


@pytest.mark.parametrize("group", GROUPS)
def test_a_misspelled_preset_of_any_group_fails_naming_the_group_and_its_presets(train, group):
    from dreamer.config.overrides import presets

    real = presets(group)[0]
    for args in ([f"{group}={real}x"], ["--cfg", "job", f"{group}={real}x"], ["-m", f"{group}={real},{real}x"]):
        proc = train(*args, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        line = proc.stderr.strip().splitlines()[-1]
        assert line == f"error: config key '{group}': no preset '{real}x'; available: {', '.join(presets(group))}"
        assert "Traceback" not in proc.stderr and not proc.stdout.strip()  # nothing ran, nothing printed


def test_run_dir_checks_name_the_key(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from dreamer.run.app import check_run_dir, checkpoint_bytes

    check_run_dir(str(tmp_path / "run"), need=1)  # creates and writes it
    (tmp_path / "file").write_text("x")  # a file where a directory should go: not writable as a dir
    with pytest.raises(ConfigError) as err:
        check_run_dir(str(tmp_path / "file" / "run"), need=1)
    assert err.value.key == "hydra.run.dir" and "cannot write" in str(err.value)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 10**6, 10**6))
    with pytest.raises(ConfigError, match="checkpoint.keep"):
        check_run_dir(str(tmp_path / "run"), need=checkpoint_bytes(validate(composed("env=dmc_cartpole_balance"))))


def test_checkpoint_bytes_counts_the_replay_only_when_it_is_saved():
    from dreamer.run.app import checkpoint_bytes

    small = validate(composed("env=dmc_cartpole_balance", "replay.capacity=1000", "checkpoint.keep=1"))
    per_record = 5 * 4 + 1 * 4 + 41 + (32 + 2 * 512)  # obs, action, flags/counters, context of model s
    assert checkpoint_bytes(small) == 2 * (1000 * per_record + 100 * 2**20)
    no_context = validate(composed("env=dmc_cartpole_balance", "replay.capacity=1000", "checkpoint.keep=1",
                                   "replay.context=false"))
    assert checkpoint_bytes(no_context) == 2 * (1000 * (per_record - 32 - 2 * 512) + 100 * 2**20)
    big = validate(composed("replay.capacity=1000000"))  # pixels: 12 GB > replay_max_gb 4
    assert checkpoint_bytes(big) == (big.checkpoint.keep + 1) * 100 * 2**20
