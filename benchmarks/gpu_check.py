"""The one-shot device check (scripts/gpu_check.sh, make gpu-check): verifies and times the CUDA
paths in one short run, each step bounded in time, results written as they come.

    python -m benchmarks.gpu_check [--dry-run] [--out DIR] [--budget-s 465]

Steps, in order (each a subprocess with a time limit; a step that fails or runs out of time is
recorded as such and the next one runs):
  environment  versions, the GPU, torchrl's C++ extension, the EGL render device
  learner      benchmarks.learner, size s pixels B16 x T64: eager fp32, compiled + CUDA graph +
               bf16, compiled fp32; app Learner and bare torchrl stepper; ms/update, first
               update (compile) seconds, peak GPU memory
  sampling     replay sampling (64 envs, pixels) at B16 x T64 and 32 x 256 beside the update,
               the loop with and without prefetch
  inference    benchmarks.inference, 16 pixel envs: dynamic vs static (CUDA-graph) batches
  train        python train.py, the seed's flags with 16 pixel envs for a fixed time, then
               SIGINT: env steps/s, updates/s, sample wait vs update ms (from metrics.jsonl)
Results: <out>/gpu_check.json (rewritten after each step) and <out>/gpu_check.log (all output).
`--dry-run`: the same steps on the CPU with tiny sizes and CPU fallbacks (no compile, no static
batch), a few minutes; tests/test_gpu_check.py runs it so the script cannot rot.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (name, seconds allowed on the GPU (stretched to --budget-s), seconds a dry run waits before it calls
# a step hung); a GPU run never goes past the budget left. A dry run's steps stop on counts, not on
# time (its train step once DRY_TRAIN_UPDATES updates are logged), so a busy CPU only makes it slower.
STEPS = (("environment", 30, 300), ("learner", 190, 300), ("sampling", 45, 300), ("inference", 70, 300),
         ("train", 130, 600))
DRY_TRAIN_UPDATES = 4


def commands(dry: bool, work: Path) -> dict[str, list[str]]:
    py = [sys.executable]
    if dry:
        learner = ["--size", "tiny", "--batch", "2", "--length", "8", "--updates", "1", "--modes", "eager"]
        sampling = ["--size", "tiny", "--sampling-shapes", "2x8,4x16", "--sampling-updates", "1"]
        inference = ["--num-envs", "2", "--size", "tiny", "--seconds", "4", "--warmup-s", "4"]
        train = ["experiment=quick", "env.obs=pixels", "env.fast_visuals=true", "world_model=tiny",
                 "collector.num_envs=2", "collector.frames_per_batch=32", "replay.batch_size=2",
                 "replay.batch_length=8", "learner.prefill_frames=64", "learner.train_ratio=16", "logger.every=32"]
    else:
        learner = ["--size", "s", "--batch", "16", "--length", "64", "--updates", "5",
                   "--modes", "eager,cudagraph-bf16,compiled"]
        sampling = ["--size", "s", "--sampling-shapes", "16x64,32x256", "--sampling-updates", "3"]
        inference = ["--num-envs", "16", "--size", "s", "--seconds", "12", "--warmup-s", "8", "--static", "16"]
        # The seed's flags (experiment=seed_pixel_64env) on 16 envs; B16 x T64 and size s as in the
        # learner step, so the compiled step's graph comes from the inductor cache it filled.
        train = ["experiment=seed_pixel_64env", "collector.num_envs=16", "collector.frames_per_batch=1024",
                 "collector.inference_static_batch_size=16", "replay.batch_size=16", "replay.batch_length=64",
                 "replay.capacity=200000", "learner.prefill_frames=2048", "logger.every=2048"]
    train += ["logger.backends=[]", "eval.every=0", "checkpoint.every=0", "checkpoint.replay=false",
              "collector.total_frames=100000000", f"hydra.run.dir={work / 'train'}"]
    return {
        "environment": py + ["-m", "benchmarks.gpu_check", "--environment"],
        "learner": py + ["-m", "benchmarks.learner", *learner, "--sampling-shapes", "", "--json",
                         str(work / "learner.json")],
        "sampling": py + ["-m", "benchmarks.learner", *sampling, "--modes", "none", "--json",
                          str(work / "sampling.json")],
        "inference": py + ["-m", "benchmarks.inference", *inference, "--json", str(work / "inference.json")],
        "train": py + [str(ROOT / "train.py"), *train],
    }


def environment() -> dict:
    """What the machine has (printed as JSON for the orchestrator)."""
    info = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    import torch

    info.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available(),
                gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
    import importlib.metadata
    import importlib.util

    for name in ("torchrl", "tensordict", "mujoco", "dm_control", "hydra-core", "numpy"):
        try:
            info[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # recorded: the steps that need it will fail
            info[name] = "missing"

    info["torchrl_extension"] = importlib.util.find_spec("torchrl._torchrl") is not None
    try:
        import torchrl._torchrl  # noqa: F401  (built against one torch; prioritized replay needs it)
        info["torchrl_extension_loads"] = True
    except Exception as err:
        info["torchrl_extension_loads"] = f"no: {str(err)[:200]}"
    info["MUJOCO_GL"] = os.environ.get("MUJOCO_GL")
    return info


def train_summary(run_dir: Path) -> dict:
    """Means over the run's metric windows after the first (compile/prefill) one."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return {"error": "no metrics.jsonl"}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    windows = [r for r in rows if "train/updates_per_s" in r]
    steady = [r for r in windows[1:] if r.get("train/updates", 0) > 0] or windows
    keys = ("collect/env_steps_per_s", "train/updates_per_s", "train/sample_wait_ms", "train/update_ms",
            "collect/driver_cpu_ms_per_step", "system/tree_rss_mb")
    out = {"windows": len(steady), "env_steps": rows[-1].get("step") if rows else 0,
           "updates": max((r.get("train/updates", 0) for r in rows), default=0)}
    for key in keys:
        values = [r[key] for r in steady if key in r]
        out[key] = sum(values) / len(values) if values else None
    return out


def trained(run_dir: Path, updates: int) -> bool:
    """The run has logged `updates` updates in a window after its first (the dry run's stop event)."""
    summary = train_summary(run_dir)
    return summary.get("updates", 0) >= updates and summary.get("windows", 0) >= 1 and \
        summary.get("train/update_ms") is not None


def run_step(name: str, cmd: list[str], limit: float, log, env: dict, interrupt_after: float | None,
             interrupt_when=None) -> dict:
    """Runs one step; SIGINT (the app's Ctrl-C) after `interrupt_after` s or once `interrupt_when()`."""
    log.write(f"\n===== {name}: {' '.join(cmd)} (limit {limit:.0f} s)\n")
    log.flush()
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    out_lines: list[str] = []

    def pump():
        for line in proc.stdout:
            out_lines.append(line)
            log.write(line)
            log.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    status = "ok"
    try:
        if interrupt_after is not None or interrupt_when is not None:
            until = start + (interrupt_after if interrupt_after is not None else limit)
            while proc.poll() is None and time.monotonic() < until and not (interrupt_when and interrupt_when()):
                time.sleep(0.5)
            if proc.poll() is None and (interrupt_when is None or interrupt_when()):
                os.killpg(proc.pid, signal.SIGINT)  # the app's Ctrl-C path: stop, checkpoint, exit 130
                status = "interrupted as planned"
        proc.wait(timeout=max(1.0, limit - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        status = "timed out"
    reader.join(timeout=5)
    code = proc.returncode
    if status == "ok" and code != 0:
        status = f"failed (exit {code})"
    if status == "interrupted as planned" and code not in (0, 130):
        status = f"failed after the interrupt (exit {code})"
    return {"status": status, "seconds": round(time.monotonic() - start, 1), "tail": "".join(out_lines[-15:])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="the same steps on the CPU, tiny sizes")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "outputs" / "gpu_check"))
    parser.add_argument("--budget-s", type=float, default=465.0, help="all steps together")
    parser.add_argument("--environment", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.environment:
        print(json.dumps(environment()))  # one line: the orchestrator reads the last
        return 0
    import torch  # only to decide; the steps run in subprocesses

    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        print("gpu_check: no CUDA device here; use --dry-run for the CPU rehearsal", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    if args.dry_run:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU fallbacks even on a GPU machine
    deadline = time.monotonic() + (args.budget_s if not args.dry_run else sum(dry for _, _, dry in STEPS))
    allowed = sum(gpu if not args.dry_run else dry for _, gpu, dry in STEPS)
    results = {"dry_run": args.dry_run, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "steps": {}}
    cmds = commands(args.dry_run, work)
    with open(out / "gpu_check.log", "w") as log:
        for name, gpu_s, dry_s in STEPS:
            left = deadline - time.monotonic()
            # a GPU run spreads the budget over its steps; a dry run only rehearses them (test time)
            limit = min(left, dry_s if args.dry_run else gpu_s * max(1.0, args.budget_s / allowed))
            if limit < 10:
                results["steps"][name] = {"status": "skipped: budget spent"}
                continue
            if name == "train" and args.dry_run:  # on a count: the CPU may be busy
                step = run_step(name, cmds[name], limit, log, env, None,
                                lambda: trained(work / "train", DRY_TRAIN_UPDATES))
            else:  # the GPU run measures a time window; leave time for the checkpoint
                step = run_step(name, cmds[name], limit, log, env, max(5.0, limit - 25) if name == "train" else None)
            results["steps"][name] = step
            source = {"learner": "learner.json", "sampling": "sampling.json", "inference": "inference.json"}.get(name)
            if source and (work / source).exists():
                step["result"] = json.loads((work / source).read_text())
            if name == "environment" and step["status"] == "ok":
                step["result"] = json.loads(step.pop("tail").strip().splitlines()[-1])
            if name == "train":
                step["result"] = train_summary(work / "train")
            (out / "gpu_check.json").write_text(json.dumps(results, indent=1))
            print(f"{name}: {step['status']} in {step['seconds']} s", flush=True)
    shutil.rmtree(work, ignore_errors=True)  # the train step's run dir and the steps' JSON (copied above)
    failed = [n for n, s in results["steps"].items() if not s["status"].startswith(("ok", "interrupted as planned"))]
    print(f"results: {out / 'gpu_check.json'}, log: {out / 'gpu_check.log'}" + (f"; not ok: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
