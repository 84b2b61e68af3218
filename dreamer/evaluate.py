"""Evaluation: episodes with the mode action in a separate env, an episode video, and the world
model's open-loop prediction video (context frames observed, then imagined from actions alone).

Runs in the training process on the learner's weights; the collector keeps its own envs.
Proprio runs evaluate in an env that also renders pixels, so they get a video too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.envs.utils import step_mdp

from collectors.envs import env_factory
from dreamer.agent import DreamerAgent
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
    def __init__(self, agent: DreamerAgent, env_cfg, wm_cfg, seed: int, video: bool, stop=None):
        self.agent, self.video = agent, video
        self.stop = stop  # a StopRequest: Ctrl-C ends an episode between steps
        primer = primer_factory(wm_cfg, agent.action_dim)
        if video and env_cfg.obs == "proprio":  # render only for the video: the fast visuals will do
            self.env = env_factory(env_cfg, seed=seed, extra_transform=primer, obs="both", fast_visuals=True)()
        else:
            self.env = env_factory(env_cfg, seed=seed, extra_transform=primer)()
        self.policy = build_acting_policy(agent.nets, explore=False)
        self.max_steps = int(1000 / env_cfg.action_repeat) + 1  # DMC episodes: 1000 physics steps

    def run(self, episodes: int, video_dir: Path | None = None, tag: str = "") -> EvalResult:
        result = EvalResult([], [])
        for episode in range(episodes):
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
        frames = torch.cat([traj["pixels"], traj["next", "pixels"][-1:]])  # [T+1, 3, H, W] uint8
        videos = {"eval/video": write_video(video_dir / f"eval_{tag}.mp4", frames)}
        if self.agent.nets.pixel_decoder is not None:
            grid = open_loop_frames(self.agent, traj)
            videos["eval/open_loop"] = write_video(video_dir / f"open_loop_{tag}.mp4", grid)
        return videos

    def close(self) -> None:
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
    imageio.mimwrite(path, array, fps=fps, macro_block_size=1)
    return path
