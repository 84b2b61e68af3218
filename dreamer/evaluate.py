"""`python -m dreamer.evaluate`: a saved checkpoint's policy, evaluated with the config saved inside it.

    python -m dreamer.evaluate checkpoint=PATH [eval.episodes=10] [eval.video=true] [seed=N] \
        [env=PRESET | env.KEY=VALUE ...] [out=DIR]

PATH is a checkpoint file or a run's checkpoints/ dir (newest wins). Prints each return and the
mean/std, writes eval.json (and the videos) to DIR (default: the run's eval/ dir). Runs on CPU
when there is no GPU, whatever the checkpoint was trained on. The episodes: dreamer/run/evaluator.py.
"""
from __future__ import annotations

if __name__ in ("__main__", "__mp_main__"):  # an entry point: set the process up before torch loads
    from dreamer.runtime import setup

    setup()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from collectors.specs import env_spec  # noqa: E402
from collectors.watchdog import CollectorFault  # noqa: E402
from dreamer.run.evaluator import EvalResult, Evaluator  # noqa: E402

CLI_KEYS = ("checkpoint", "env", "eval", "seed", "out")
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def cli_config(args: list[str]) -> tuple[dict, "Config", Path]:
    """(checkpoint state, the saved config with the command line's overrides, output dir)."""
    from omegaconf import OmegaConf

    from dreamer.io import checkpoint
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
    from dreamer.agent.model import build_agent
    from dreamer.agent.obs import ObsSpec

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
    from dreamer.io.checkpoint import CheckpointError
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
