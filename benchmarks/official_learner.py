"""Seconds per learner update of the official DreamerV3 (JAX, danijar/dreamerv3) on this CPU.

Runs under the official code's own environment, not ours (scripts/official_venv.sh makes it):

    OFFICIAL_SRC=/tmp/official/src /tmp/official/venv/bin/python benchmarks/official_learner.py --length 64 \
        [--dims '{"deter": 512, ...}']

`python -m benchmarks.cpu_learner --official PYTHON` runs it beside our learner, shape by shape, with
the dimensions of our preset for the row (--dims: deter, hidden, stoch, classes, blocks, mlp_units,
mlp_layers, head_layers, policy_layers, and for --obs pixels cnn_depth, cnn_mults; default our
`tiny`: deter 64, hidden 64, 8 latents x 8 classes, 8 GRU blocks, 1-layer 64-unit MLPs). The
official agent is built as its main.py builds one, from its configs.yaml defaults with those
shapes (its RSSM keeps imglayers 2, as ours: tiny has the same 48,384 dynamics parameters),
float32, jit, replay context 1, B16, a 5-dim vector observation and one action in [-1, 1], or
(--obs pixels) a 64x64 RGB image and 6 actions. With pixels the parameter counts differ: the
official image decoder also maps the stochastic latent through a 2 x units hidden layer to its
first feature map (sp1, sp2: 5.2 M at `s`), where torchrl's decoder has one block-linear
projection of (deter, stoch): 17.8 M against our 13.1 M at `s`; their ~32 GFLOP per update
(forward and backward over B x T rows) are ~1-2% of the convolutions' (estimated). Its first update includes the XLA compile (precompile
off); the profiler and the policy-parameter copy are off. Threads: CPU affinity set before JAX
is imported (XLA sizes its pool from it; the official setup rewrites XLA_FLAGS). Prints one JSON
line with its trained-parameter count; the official code's output goes to stderr.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path


TINY = {"deter": 64, "hidden": 64, "stoch": 8, "classes": 8, "blocks": 8, "mlp_units": 64, "mlp_layers": 1,
        "head_layers": 1, "policy_layers": 1}  # conf/world_model/tiny.yaml (a test ties them)


def shape_overrides(dims: dict, batch: int, length: int, seed: int, logdir: str) -> dict:
    """The official config keys that give one of our presets' shapes (`dims`: its YAML's keys)."""
    layers = {"enc.simple": "mlp_layers", "dec.simple": "mlp_layers", "rewhead": "head_layers",
              "conhead": "head_layers", "policy": "policy_layers", "value": "policy_layers"}
    mlp = {}
    for part, key in layers.items():
        mlp[f"agent.{part}.units"], mlp[f"agent.{part}.layers"] = dims["mlp_units"], dims[key]
    rssm = {f"agent.dyn.rssm.{key}": dims[key] for key in ("deter", "hidden", "stoch", "classes", "blocks")}
    for part in ("enc.simple", "dec.simple"):  # the image encoder and decoder (pixel rows only)
        if "cnn_depth" in dims:
            mlp[f"agent.{part}.depth"], mlp[f"agent.{part}.mults"] = dims["cnn_depth"], list(dims["cnn_mults"])
    return {"batch_size": batch, "batch_length": length, "report_length": length, "replay_context": 1,
            "seed": seed, "logdir": logdir, "jax.platform": "cpu", "jax.compute_dtype": "float32",
            "jax.prealloc": False, "jax.jit": True, **rssm, **mlp}


def fixed_batch(spaces: dict, batch: int, steps: int, seed: int):
    """A random batch as the official replay stream yields it (consec 0: the carry comes from the
    replay-context entries of the first step)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    data = {}
    for key, space in spaces.items():
        shape = (batch, steps, *space.shape)
        if key in ("observation", "reward"):
            value = rng.normal(size=shape)
        elif key == "action":
            value = rng.uniform(-1, 1, size=shape)
        elif key == "is_first":
            value = np.zeros(shape, bool)
            value[:, 0] = True
        elif key in ("is_last", "is_terminal", "consec"):
            value = np.zeros(shape)
        elif key in ("image", "stepid"):
            value = rng.integers(0, 256, size=shape)
        elif key == "dyn/deter":
            value = np.tanh(rng.normal(size=shape))
        elif key == "dyn/stoch":
            value = np.eye(shape[-1])[rng.integers(0, shape[-1], size=shape[:-1])]
        else:
            raise KeyError(f"the official agent wants a train input this benchmark does not make: {key} {space}")
        data[key] = np.asarray(value).astype(space.dtype)
    return data


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dims", type=json.loads, default=TINY, help="our preset's dimensions, JSON")
    parser.add_argument("--obs", choices=("proprio", "pixels"), default="proprio",
                        help="proprio: a 5-dim vector, 1-dim action; pixels: 64x64 RGB, 6-dim action (cpu_learner's)")
    parser.add_argument("--src", default=os.environ.get("OFFICIAL_SRC", "/tmp/official/src"),
                        help="a checkout of danijar/dreamerv3 ($OFFICIAL_SRC)")
    args = parser.parse_args(argv)
    if not (Path(args.src) / "dreamerv3" / "configs.yaml").is_file():
        parser.error(f"--src {args.src}: no danijar/dreamerv3 checkout there (scripts/official_venv.sh makes one)")
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
    sys.path.insert(0, args.src)
    import elements
    import numpy as np
    import ruamel.yaml as yaml

    configs = yaml.YAML(typ="safe").load((Path(args.src) / "dreamerv3" / "configs.yaml").read_text())
    logdir = os.environ.get("TMPDIR", "/tmp") + "/official_learner"
    config = elements.Config(configs["defaults"]).update(
        shape_overrides(args.dims, args.batch, args.length, args.seed, logdir))
    jax_options = dict(config.jax, precompile=False, profiler=False, enable_policy=False)
    agent_config = elements.Config(
        **config.agent, logdir=config.logdir, seed=config.seed, jax=jax_options, batch_size=config.batch_size,
        batch_length=config.batch_length, replay_context=config.replay_context,
        report_length=config.report_length, replica=config.replica, replicas=config.replicas)
    seen = ({"image": elements.Space(np.uint8, (64, 64, 3))} if args.obs == "pixels"
            else {"observation": elements.Space(np.float32, (5,))})
    obs_space = {**seen, "reward": elements.Space(np.float32), "is_first": elements.Space(bool),
                 "is_last": elements.Space(bool), "is_terminal": elements.Space(bool)}
    act_space = {"action": elements.Space(np.float32, (6 if args.obs == "pixels" else 1,), -1, 1)}
    with contextlib.redirect_stdout(sys.stderr):
        import jax
        from dreamerv3.agent import Agent
        from embodied.jax import internal
        agent = Agent(obs_space, act_space, agent_config)
        data = internal.device_put(fixed_batch(agent.spaces, args.batch, args.length + 1, args.seed),
                                   agent.train_sharded)
        carry = agent.init_train(args.batch)

        def update(carry, index):
            carry, _, _ = agent.train(carry, {**data, "seed": agent._seeds(index, agent.train_mirrored)})
            jax.tree.map(lambda x: x.block_until_ready(), (carry, agent.params))
            return carry

        start = time.perf_counter()
        carry = update(carry, 0)
        first = time.perf_counter() - start
        times = []
        for index in range(1, args.updates + 1):
            start = time.perf_counter()
            carry = update(carry, index)
            times.append(time.perf_counter() - start)
    trained = ("enc", "dyn", "dec", "rew", "con", "pol", "val")  # not opt (its state), slowval, retnorm
    params = sum(int(v.size) for k, v in agent.params.items() if k.split("/")[0] in trained)
    print(json.dumps({"first_s": first, "ms": 1000 * float(np.mean(times)), "threads": args.threads,
                      "params": params, "jax": jax.__version__}))


if __name__ == "__main__":
    main()
