"""Evaluation episodes: the policy's mode (or, eval.sample_actions, a sample) in an env of its own,
an episode video, and the world model's open-loop prediction video (context frames observed, then
imagined from actions alone). During training it runs in the training process on the learner's
weights (the collector keeps its own envs); `python -m dreamer.evaluate` runs it on a checkpoint.

Vector-observation runs (DMC proprio, Gymnasium vector envs with rgb_array rendering) evaluate in
an env that also renders pixels, so they get a video too.
"""
from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.envs.utils import step_mdp

from collectors.envs import env_factory
from collectors.specs import env_spec
from collectors.watchdog import ProcessWatchdog
from dreamer.agent.model import DreamerAgent
from dreamer.agent.policy import build_acting_policy, primer_factory
from dreamer.config.env import task_name
from dreamer.io.disk import writing

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
        self.agent, self.video, self.seed, self.runs = agent, video, seed, 0
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
        # The posterior's samples (and sampled actions) draw from torch's generator: seed it from the
        # evaluation's seed, so one checkpoint and seed give one result, in a fork that leaves the
        # caller's generator (training's) where it was.
        device = torch.device(self.agent.device)
        with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
            torch.manual_seed(self.seed + self.runs)
            self.runs += 1
            return self._run(episodes, video_dir, tag)

    def _run(self, episodes: int, video_dir: Path | None, tag: str) -> EvalResult:
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
