"""Shared test helpers: process-tree checks, sequence checks, and the configs and batches several
test modules use."""
import psutil
import torch


def live_children(proc: psutil.Process | None = None) -> list[psutil.Process]:
    """Descendants still running, ignoring multiprocessing's resource tracker (exits with us)."""
    proc = proc or psutil.Process()
    alive = []
    for child in proc.children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if "resource_tracker" in " ".join(child.cmdline()):
                continue
            alive.append(child)
        except psutil.NoSuchProcess:
            continue
    return alive


def processes_tagged(tag: str) -> list[psutil.Process]:
    """Processes whose environment carries DREAMER_TEST_TAG=tag (survivors of a subprocess run)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("DREAMER_TEST_TAG") == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def assert_sequences_consistent(batch) -> None:
    """Each row: one env, and steps either follow on (+1) or start a marked new episode."""
    env_index = batch["env_index"].reshape(batch.shape)
    assert (env_index == env_index[:, :1]).all(), "a sampled sequence mixes environments"
    steps = batch["step_count"].reshape(batch.shape)
    is_init = batch["is_init"].reshape(batch.shape)
    follows = steps[:, 1:] == steps[:, :-1] + 1
    restarts = is_init[:, 1:] & (steps[:, 1:] == 0)
    assert (follows | restarts).all(), f"unmarked break in a sequence:\n{steps}\n{is_init}"
    assert not (is_init & (steps != 0)).any(), "is_init set in the middle of an episode"


def assert_stream_in_order(stream) -> None:
    """One env's stored transitions, oldest first: consecutive steps, resets only at is_init."""
    steps = stream["step_count"].reshape(-1)
    is_init = stream["is_init"].reshape(-1)
    follows = steps[1:] == steps[:-1] + 1
    restarts = is_init[1:] & (steps[1:] == 0)
    assert torch.all(follows | restarts), f"stream out of order: {steps.tolist()}"


# -- configs and batches shared by several test modules ---------------------------------------------

def composed(*overrides: str):
    """conf/ composed with `overrides`, as train.py composes it (not yet validated)."""
    from hydra import compose, initialize_config_dir

    from dreamer.config import register_configs
    from tests.conftest import ROOT

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def preset(name: str):
    """A conf/world_model/ preset as the app composes it."""
    from omegaconf import OmegaConf

    from dreamer.config import WorldModelConfig
    from tests.conftest import ROOT

    merged = OmegaConf.merge(OmegaConf.structured(WorldModelConfig), OmegaConf.load(ROOT / f"conf/world_model/{name}.yaml"))
    return OmegaConf.to_object(merged)


TINY, XS = preset("tiny"), preset("xs")


def _obs_specs():
    from dreamer.agent.obs import ObsSpec

    return ObsSpec(), ObsSpec(pixels=None, vector_dim=5)


PIXELS, PROPRIO = _obs_specs()
LOSSES = ("loss_model_reco", "loss_model_reward", "loss_model_dynamic", "loss_model_representation",
          "loss_actor", "loss_value", "loss_replay_value")

# A train.py run of DMC cartpole balance at the tiny size, in-process (SMALL) or as a subprocess
# (RUN: action repeat 8, 125-step episodes, so a short run finishes several of them).
SMALL = ("env=dmc_cartpole_balance", "world_model=tiny", "collector.num_envs=2", "replay.batch_size=4",
         "replay.batch_length=8", "learner.prefill_frames=100", "learner.train_ratio=16", "logger=none")
RUN = ("env=dmc_cartpole_balance", "env.action_repeat=8", "world_model=tiny", "collector.num_envs=2",
       "collector.transition_chunk_size=16", "replay.batch_size=4", "replay.batch_length=16",
       "learner.prefill_frames=300", "learner.train_ratio=16", "logger.every=100",
       "eval.every=400", "checkpoint.every=300")


def replay_batch(B, T, obs, action_dim, *, smooth=False, seed=0):
    """Replay-format batch: root obs at t, action, is_init, next reward/done/terminated."""
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(seed)
    is_init = torch.zeros(B, T, 1, dtype=torch.bool)
    is_init[:, 0] = True
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    done[0, -1] = True
    td = {"action": torch.rand(B, T, action_dim, generator=g) * 2 - 1, "is_init": is_init,
          "next": {"reward": torch.randn(B, T, 1, generator=g), "done": done, "terminated": done.clone()}}
    if obs.pixels:
        if smooth:  # a learnable image: a horizontal gradient
            x = torch.linspace(0, 255, 64).round().to(torch.uint8)
            td["pixels"] = x.view(1, 1, 1, 1, 64).expand(B, T, 3, 64, 64).clone()
        else:
            td["pixels"] = torch.randint(0, 256, (B, T, *obs.pixels), dtype=torch.uint8, generator=g)
    if obs.vector_dim:
        td["observation"] = 3 * torch.randn(B, T, obs.vector_dim, generator=g)
    return TensorDict(td, [B, T])


def transitions(env: int, start: int, steps: int, obs_dim: int = 5, done_at: int | None = None):
    """`steps` consecutive transitions of one env in the collector's format."""
    from tensordict import TensorDict

    from replay.buffer import ENV_INDEX

    g = torch.Generator().manual_seed(env * 1000 + start)
    done = torch.zeros(steps, 1, dtype=torch.bool)
    if done_at is not None:
        done[done_at] = True
    is_init = torch.zeros(steps, 1, dtype=torch.bool)
    is_init[0] = start == 0
    return TensorDict({
        ENV_INDEX: torch.full((steps,), env), "observation": torch.randn(steps, obs_dim, generator=g),
        "action": torch.rand(steps, 1, generator=g) * 2 - 1, "is_init": is_init,
        "is_last": torch.zeros_like(is_init), "step_count": torch.arange(start, start + steps).unsqueeze(-1),
        # the tiny model's latent: 8 categoricals of 8 classes, a 64-unit GRU state
        "replay_context": {"state": torch.randint(0, 8, (steps, 8), generator=g).to(torch.uint8),
                           "belief": (torch.rand(steps, 64, generator=g) * 2 - 1).half()},
        "next": {"reward": torch.rand(steps, 1, generator=g), "done": done, "terminated": torch.zeros_like(done)},
    }, [steps])
