"""Why a run does (not) learn: its world model's reward and continuation predictions and its critic,
measured on fresh episodes of the final checkpoint's policy (data the learner never trained on).

    python -m benchmarks.diagnose RUN_DIR [RUN_DIR ...] [--episodes 5] [--sample]

Per run, over the episodes' steps (posterior latents, as the acting policy computes them):
  reward   mean absolute error of the reward head against the env's reward, beside the reward's own
           mean absolute deviation (an error far below it: the model predicts the reward)
  cont     the continuation head's mean prediction where the episode goes on, and after a terminal
           observation (episodes that terminate, not those cut by a time limit)
  value    the critic's error against the discounted return that followed (a time-limited episode's
           tail bootstrapped with the critic's value after its last observation), beside that
           return's spread
  actor    the policy's entropy along the episodes, and the learner's return percentiles (low, high)
           and scale max(1, high - low), which divides the actor's advantages
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tensordict import TensorDict


def _two_hot_mean(logits: torch.Tensor) -> torch.Tensor:
    from torchrl.modules import SymExpTwoHot

    return SymExpTwoHot(logits.shape[-1])(logits)


@torch.no_grad()
def diagnose(run_dir: Path, episodes: int, sample: bool) -> dict:
    from collectors.specs import env_spec
    from dreamer.agent.model import build_agent
    from dreamer.agent.obs import ObsSpec
    from dreamer.evaluate import cli_config
    from dreamer.run.evaluator import Evaluator

    state, config, _ = cli_config([f"checkpoint={run_dir / 'checkpoints'}", f"eval.episodes={episodes}"])
    spec = env_spec(config.env)
    agent = build_agent(config.world_model, config.learner, ObsSpec.from_spec(spec), spec.action_dim, "cpu",
                        discrete=spec.discrete)
    agent.loss.load_state_dict(state["loss"])
    evaluator = Evaluator(agent, config.env, config.world_model, seed=config.seed + 3_000_000, video=False,
                          sample_actions=sample)
    n, gamma = agent.nets, config.learner.gamma
    rows = {"reward_err": [], "reward_dev": [], "cont_alive": [], "cont_end": [], "value_err": [], "returns": [],
            "entropy": [], "episode_return": []}
    try:
        for _ in range(episodes):
            traj = evaluator._episode()
            belief, latent = traj["next", "belief"], traj["next", "state"]  # after observing obs_t
            rewards = traj["next", "reward"].reshape(-1)  # r_{t+1}: the reward for action a_t
            # The reward head predicts the reward that arrived with the observation it has seen.
            arrived = torch.cat([rewards.new_zeros(1), rewards[:-1]])
            predicted = _two_hot_mean(n.reward(belief, latent)).reshape(-1)
            rows["reward_err"].append((predicted[1:] - arrived[1:]).abs())
            rows["reward_dev"].append((arrived[1:] - arrived[1:].mean()).abs())
            rows["cont_alive"].append(torch.sigmoid(n.cont(belief, latent)).reshape(-1))
            # the latent after the last observation (the policy never saw it): for the terminal
            # prediction, and to bootstrap a time-limited episode's return
            _, _, last_belief = n.prior(latent[-1:], belief[-1:], traj["action"][-1:].float())
            embed = n.encoder(*[traj["next", k][-1:] for k in n.obs.keys])
            _, last_latent = n.posterior(last_belief, embed)
            terminated = bool(traj["next", "terminated"][-1])
            if terminated:
                rows["cont_end"].append(torch.sigmoid(n.cont(last_belief, last_latent)).reshape(-1))
            value = _two_hot_mean(n.value(belief, latent)).reshape(-1)
            tail = 0.0 if terminated else float(_two_hot_mean(n.value(last_belief, last_latent)))
            returns, future = torch.empty_like(rewards), tail
            for t in range(len(rewards) - 1, -1, -1):  # discounted return after obs_t, bootstrapped
                future = float(rewards[t]) + gamma * future
                returns[t] = future
            rows["value_err"].append((value - returns).abs())
            rows["returns"].append(returns)
            dist = agent.actor.get_dist(TensorDict({"state": latent, "belief": belief}, batch_size=traj.shape))
            rows["entropy"].append(dist.entropy().reshape(-1))
            rows["episode_return"].append(rewards.sum().reshape(1))
    finally:
        evaluator.close()
    cat = {k: torch.cat(v) if v else torch.zeros(0) for k, v in rows.items()}
    retnorm = agent.actor_loss.retnorm
    low, high = float(retnorm.low.reshape(-1)[0]), float(retnorm.high.reshape(-1)[0])
    returns = cat["returns"]
    return {
        "run": str(run_dir), "task": config.env.name, "env_steps": state["frames"], "updates": state["updates"],
        "episode_return": float(cat["episode_return"].mean()),
        "reward_mae": float(cat["reward_err"].mean()), "reward_mad": float(cat["reward_dev"].mean()),
        "cont_alive": float(cat["cont_alive"].mean()) if cat["cont_alive"].numel() else float("nan"),
        "cont_end": float(cat["cont_end"].mean()) if cat["cont_end"].numel() else float("nan"),
        "value_mae": float(cat["value_err"].mean()) if returns.numel() else float("nan"),
        "return_mad": float((returns - returns.mean()).abs().mean()) if returns.numel() else float("nan"),
        "entropy": float(cat["entropy"].mean()) if cat["entropy"].numel() else float("nan"),
        "return_low": low, "return_high": high, "return_scale": max(1.0, high - low),
    }


def format_rows(rows: list[dict]) -> str:
    head = ("| run | task | env steps | episode return | reward MAE (reward MAD) | continue: alive / end "
            "| value MAE (return MAD) | entropy | return low / high (scale) |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        lines.append(
            f"| {Path(r['run']).name or r['run']} | {r['task']} | {r['env_steps']:,} | {r['episode_return']:.1f} "
            f"| {r['reward_mae']:.3f} ({r['reward_mad']:.3f}) | {r['cont_alive']:.3f} / {r['cont_end']:.3f} "
            f"| {r['value_mae']:.2f} ({r['return_mad']:.2f}) | {r['entropy']:.2f} "
            f"| {r['return_low']:.1f} / {r['return_high']:.1f} ({r['return_scale']:.1f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run dirs (each with checkpoints/)")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--sample", action="store_true", help="sample actions (default: the policy's mode)")
    args = parser.parse_args(argv)
    missing = [str(r) for r in args.runs if not (r / "checkpoints").is_dir()]
    if missing:
        parser.error(f"no checkpoints/ in {', '.join(missing)}")
    torch.set_num_threads(1)
    print(format_rows([diagnose(r, args.episodes, args.sample) for r in args.runs]))


if __name__ == "__main__":
    main()
