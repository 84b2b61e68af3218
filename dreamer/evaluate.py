"""Evaluation: episodes with the policy's mode (or, eval.sample_actions, a sample) in a separate env, an episode video, and the world
model's open-loop prediction video (context frames observed, then imagined from actions alone).

During training it runs in the training process on the learner's weights (the collector keeps its
own envs). On its own, it evaluates a saved checkpoint with the config saved inside it:

    python -m dreamer.evaluate checkpoint=PATH [eval.episodes=10] [eval.video=true] [seed=N] \
        [env=PRESET | env.KEY=VALUE ...] [out=DIR]

PATH is a checkpoint file or a run's checkpoints/ dir (newest wins). Prints each return and the
mean/std, writes eval.json (and the videos) to DIR (default: the run's eval/ dir). Runs on CPU
when there is no GPU, whatever the checkpoint was trained on.

Vector-observation runs (DMC proprio, Gymnasium vector envs with rgb_array rendering) evaluate in
an env that also renders pixels, so they get a video too.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.envs.utils import step_mdp

from collectors.envs import env_factory
from collectors.specs import env_spec
from collectors.watchdog import CollectorFault, ProcessWatchdog
from dreamer.agent import DreamerAgent
from dreamer.disk import writing
from dreamer.env_config import task_name
from dreamer.policy import build_acting_policy, primer_factory

OPEN_LOOP_CONTEXT = 5  # observed frames before the model imagines on its own (paper figure: 5)
OPEN_LOOP_STEPS = 50


@dataclass
class EvalResult:
    returns: list[float]
    lengths: list[int]
    videos: dict[str, Path] = field(default_factory=dict)

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))


class Evaluator:
    def __init__(self, agent: DreamerAgent, env_cfg, wm_cfg, seed: int, video: bool, stop=None,
                 sample_actions: bool = False, env_timeout_s: float | None = None):
        self.agent, self.video = agent, video
        self.stop = stop  # a StopRequest: Ctrl-C ends an episode between steps
        primer = primer_factory(wm_cfg, agent.action_dim)
        # An env stuck in step() or reset() for env_timeout_s ends the run naming it (as a collector's)
        handle, self.heartbeat = tempfile.mkstemp(prefix="dreamer-eval-heartbeat-")
        os.close(handle)
        make = functools.partial(env_factory, env_cfg, seed=seed, extra_transform=primer, heartbeat=self.heartbeat)
        # (renders on MuJoCo's default GPU: this process imported dm_control at start-up)
        if video and env_cfg.obs == "proprio":  # render only for the video: the fast visuals will do
            self.env = make(obs="both", fast_visuals=True)()
        elif video and env_cfg.obs == "symbolic":  # a grid of codes: the video shows the env's renders
            self.env = make(render_pixels=True)()
        else:
            self.env = make()()
        name = getattr(env_cfg, "name", None) or task_name(  # EnvConfig's, or a plain mapping's
            env_cfg.get("suite", "dmc"), env_cfg.get("domain"), env_cfg.get("task"), env_cfg.get("id"))
        self.watchdog = ProcessWatchdog([], heartbeats=[(self.heartbeat, f"the evaluation env ({name})")],
                                        env_timeout_s=env_timeout_s).start()
        # the policy's mode, or (eval.sample_actions, the official way) a sample
        self.policy = build_acting_policy(agent.nets, explore=sample_actions)
        self.max_steps = env_spec(env_cfg).max_steps + 1

    def run(self, episodes: int, video_dir: Path | None = None, tag: str = "") -> EvalResult:
        result = EvalResult([], [])
        for episode in range(episodes):
            with self.watchdog.guard():
                traj = self._episode()
            result.returns.append(float(traj["next", "reward"].sum()))
            result.lengths.append(traj.shape[0])
            if episode == 0 and self.video and video_dir is not None:
                result.videos.update(self._videos(traj, Path(video_dir), tag))
        return result

    @torch.no_grad()
    def _episode(self) -> TensorDictBase:
        steps, td = [], self.env.reset()
        for _ in range(self.max_steps):
            if self.stop is not None:
                self.stop.check()
            td = self.env.step(self.policy(td.to(self.agent.device)).to("cpu"))
            steps.append(td)
            if td["next", "done"].any():
                break
            td = step_mdp(td)
        return torch.stack(steps)

    def _videos(self, traj: TensorDictBase, video_dir: Path, tag: str) -> dict[str, Path]:
        video_dir.mkdir(parents=True, exist_ok=True)
        frames = torch.cat([traj["pixels"], traj["next", "pixels"][-1:]])  # [T+1, C, H, W] uint8
        if frames.shape[1] == 1:  # gray Atari
            frames = frames.expand(-1, 3, -1, -1)
        videos = {"eval/video": write_video(video_dir / f"eval_{tag}.mp4", frames)}
        if self.agent.nets.pixel_decoder is not None:
            grid = open_loop_frames(self.agent, traj)
            videos["eval/open_loop"] = write_video(video_dir / f"open_loop_{tag}.mp4", grid)
        return videos

    def close(self) -> None:
        self.watchdog.stop()
        with contextlib.suppress(OSError):
            os.remove(self.heartbeat)
        if self.watchdog.fault is None:  # else it is stuck inside: closing would wait for it
            self.env.close()


@torch.no_grad()
def open_loop_frames(agent: DreamerAgent, traj: TensorDictBase, context: int = OPEN_LOOP_CONTEXT,
                     steps: int = OPEN_LOOP_STEPS) -> torch.Tensor:
    """[T, 3, H, 3W] uint8: real | predicted | error. The first `context` predictions see the
    real frames (posterior); after that the model only gets the actions (prior)."""
    n, device = agent.nets, agent.device
    steps = min(steps, traj.shape[0])
    keys = n.obs.keys
    obs = {k: traj["next", k][:steps].to(device) for k in keys}
    actions = traj["action"][:steps].to(device).float()
    state = torch.zeros(1, n.sizes.S, device=device)
    belief = torch.zeros(1, n.sizes.deter, device=device)
    predicted = []
    for t in range(steps):
        _, prior_state, belief = n.prior(state, belief, actions[t:t + 1])
        if t < context:
            embed = n.encoder(*[obs[k][t:t + 1] for k in keys])
            _, state = n.posterior(belief, embed)
        else:
            state = prior_state
        predicted.append(n.pixel_decoder(state, belief).float().clamp(0, 1))
    real = obs["pixels"].float() / 255
    pred = torch.cat(predicted)
    error = (pred - real).abs()
    return (torch.cat([real, pred, error], dim=-1) * 255).round().to(torch.uint8).cpu()


def write_video(path: Path, frames: torch.Tensor, fps: int = 20) -> Path:
    """frames: [T, 3, H, W] uint8 -> mp4."""
    import imageio.v2 as imageio

    array = frames.permute(0, 2, 3, 1).contiguous().numpy()
    # macro_block_size=1: 64x64 frames are not multiples of 16; keep them as they are.
    with writing(path):
        imageio.mimwrite(path, array, fps=fps, macro_block_size=1)
    return path


# -- the `python -m dreamer.evaluate` entry point ------------------------------------------------
CLI_KEYS = ("checkpoint", "env", "eval", "seed", "out")
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def cli_config(args: list[str]) -> tuple[dict, "Config", Path]:
    """(checkpoint state, the saved config with the command line's overrides, output dir)."""
    from omegaconf import OmegaConf

    from dreamer import checkpoint
    from dreamer.config import Config, ConfigError, validate

    overrides = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ConfigError(arg, "arguments are key=value")
        if key.split(".")[0] not in CLI_KEYS:
            raise ConfigError(key, f"not an evaluation option; allowed: {', '.join(CLI_KEYS)} (and their sub-keys)")
        overrides[key] = value
    if "checkpoint" not in overrides:
        raise ConfigError("checkpoint", "required: checkpoint=PATH (a checkpoint file or a run's checkpoints/ dir)")
    path = Path(overrides.pop("checkpoint"))
    if not path.exists():
        raise ConfigError("checkpoint", f"no such file or directory: {path}")
    state = checkpoint.load(path, required=("loss", "frames", "updates", "config"))
    saved = migrate_config(dict(state["config"], resume=None))
    saved["checkpoint"] = dict(saved["checkpoint"], resume=None)  # paths of the training machine
    # Training-machine settings that need its hardware (a GPU run's CUDA graph, static inference
    # batch): evaluation picks its own device.
    saved["learner"] = dict(saved["learner"], compile="auto", cudagraph="auto", bf16="auto", device="auto")
    saved["collector"] = dict(saved["collector"], inference_static_batch_size=None, device="auto")
    cfg = OmegaConf.merge(OmegaConf.structured(Config), saved)
    if "env" in overrides:  # a preset of the env group
        preset = CONF_DIR / "env" / f"{overrides['env']}.yaml"
        if not preset.exists():
            names = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml"))
            raise ConfigError("env", f"unknown preset {overrides['env']!r}; allowed: {', '.join(names)}")
        cfg.env = OmegaConf.merge(OmegaConf.structured(Config).env, OmegaConf.load(preset))
        del overrides["env"]
    out = overrides.pop("out", None)
    try:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{k}={v}" for k, v in overrides.items()]))
    except Exception as err:  # unknown key or wrong type
        raise ConfigError(getattr(err, "full_key", "") or ",".join(overrides), str(err).splitlines()[0]) from err
    config = validate(cfg)
    _check_compatible(state["config"]["env"], config.env)
    ckpt_dir = path if path.is_dir() else path.parent
    return state, config, Path(out) if out else ckpt_dir.parent / "eval"


def migrate_config(saved: dict) -> dict:
    """A checkpoint's saved config in today's schema: keys renamed since it was written."""
    logger = saved.get("logger")
    if isinstance(logger, dict) and "backend" in logger:  # logger.backend: wandb | none -> logger.backends
        backend = logger["backend"]
        saved["logger"] = {k: v for k, v in logger.items() if k != "backend"}
        saved["logger"]["backends"] = [] if backend == "none" else [backend]
    return saved


def _check_compatible(saved_env: dict, env) -> None:
    """The model's encoder and actor fix the observation layout and the action size and kind."""
    from collectors.specs import env_spec
    from dreamer.config import ConfigError

    for key in ("obs", "image_size"):
        if saved_env[key] != getattr(env, key):
            raise ConfigError(f"env.{key}", f"the checkpoint's model was trained with {saved_env[key]!r} "
                              f"(got {getattr(env, key)!r})")
    was, now = env_spec(saved_env), env_spec(env)
    layout = ("pixels", "vector_dim", "action_dim", "discrete")
    if any(getattr(was, k) != getattr(now, k) for k in layout):
        from dreamer.config import task_name

        old = task_name(saved_env.get("suite", "dmc"), saved_env["domain"], saved_env["task"], saved_env.get("id"))
        raise ConfigError("env.suite" if saved_env.get("suite", "dmc") != env.suite else "env.task",
                          f"the checkpoint's model was trained on {old}, whose observations/actions "
                          f"differ from {env.name}'s")


def evaluate_checkpoint(state: dict, config, out_dir: Path) -> EvalResult:
    from dreamer.agent import ObsSpec, build_agent

    env = config.env
    device = "cuda" if torch.cuda.is_available() else "cpu"
    spec = env_spec(env)
    obs = ObsSpec.from_spec(spec)
    agent = build_agent(config.world_model, config.learner, obs, spec.action_dim, device, discrete=spec.discrete)
    agent.loss.load_state_dict(state["loss"])
    evaluator = Evaluator(agent, env, config.world_model, seed=config.seed + 2_000_000, video=config.eval.video,
                          sample_actions=config.eval.sample_actions, env_timeout_s=config.collector.env_timeout_s)
    try:
        return evaluator.run(config.eval.episodes, out_dir, tag=f"{state['frames']:09d}")
    finally:
        evaluator.close()


def main(argv: list[str] | None = None) -> None:
    from dreamer.checkpoint import CheckpointError
    from dreamer.config import ConfigError

    try:
        state, config, out_dir = cli_config(sys.argv[1:] if argv is None else argv)
    except (ConfigError, CheckpointError) as err:
        sys.exit(f"error: {err}")
    env = config.env
    print(f"evaluating the checkpoint at {state['frames']} env steps ({state['updates']} updates) on {env.name} "
          f"({env.obs}): {config.eval.episodes} episode(s), "
          f"{'sampled' if config.eval.sample_actions else 'mode'} actions")
    try:
        result = evaluate_checkpoint(state, config, out_dir)
    except CollectorFault as err:  # the env hung
        print(f"error: {err}", file=sys.stderr, flush=True)
        os._exit(1)  # the stuck env may hold what an orderly exit would wait on
    for i, (ret, length) in enumerate(zip(result.returns, result.lengths)):
        print(f"episode {i}: return {ret:.1f} ({length} steps)")
    std = float(np.std(result.returns))
    print(f"return {result.mean_return:.1f} +- {std:.1f} over {len(result.returns)} episode(s)")
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {"task": env.name, "env_steps": state["frames"], "updates": state["updates"],
               "returns": result.returns, "lengths": result.lengths, "mean": result.mean_return, "std": std,
               "videos": {k: str(v) for k, v in result.videos.items()}}
    (out_dir / "eval.json").write_text(json.dumps(summary, indent=2))
    for name, path in result.videos.items():
        print(f"{name}: {path}")
    print(f"results: {out_dir / 'eval.json'}")


if __name__ == "__main__":
    main()
