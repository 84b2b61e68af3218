"""Data-parallel training on torch.distributed (dreamer/run/distributed.py): 2 gloo ranks on this CPU."""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from dreamer.io import checkpoint
from tests.conftest import ROOT
from tests.helpers import processes_tagged

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
SHORT = ["experiment=quick", "learner.prefill_frames=300", "replay.batch_length=16", "logger.every=200",
         "eval.every=0", "learner.compile=false"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_batch_not_divisible_by_the_world_size_is_rejected_naming_the_key():
    env = dict(os.environ, WORLD_SIZE="2", RANK="0")
    proc = subprocess.run([sys.executable, "train.py", "replay.batch_size=5"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "replay.batch_size" in proc.stderr and "world size" in proc.stderr, proc.stderr[-1500:]


def _update_on_rank(rank: int, port: int, x: torch.Tensor, y: torch.Tensor, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    from dreamer.run.distributed import Ranks
    world = Ranks(cuda=False)
    net, optimizer = _net_and_optimizer()
    optimizer.grad_sync = world.average_gradients
    half = x.shape[0] // 2
    rows = slice(rank * half, (rank + 1) * half)
    for _ in range(3):
        loss = (net(x[rows]) - y[rows]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    norm = _return_norm(rank)  # each rank's own statistics, then averaged
    world.average_buffers(norm)
    out[rank] = {"params": [p.detach().clone() for p in net.parameters()],
                 "norm": [b.clone() for b in norm.buffers()], "in_sync": world.in_sync(net)}
    world.close()


def _net_and_optimizer():
    from dreamer.agent.optimizer import GuardedDreamerV3Optimizer
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.SiLU(), torch.nn.Linear(32, 3))
    # the learner's optimizer (LaProp + adaptive gradient clipping), as built for the agent
    return net, GuardedDreamerV3Optimizer(net.parameters(), lr=1e-2, eps=1e-20, agc=0.3, warmup_steps=0)


def _return_norm(rank: int):
    from torchrl.modules.value_norm import PercentileValueNorm
    norm = PercentileValueNorm(rate=0.5)
    norm.update(torch.arange(100.0).unsqueeze(-1) * (rank + 1))
    return norm


def test_two_ranks_on_half_batches_equal_one_process_on_the_whole_batch():
    """The gradient all-reduce in the optimizer's step: three updates of 2 ranks on sub-batches b0
    and b1 equal three single-process updates on [b0; b1] (float tolerance: the mean is summed in
    another order); the ranks' weights are bitwise equal; averaged statistics are equal."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 6, generator=g), torch.randn(16, 3, generator=g)
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_update_on_rank, args=(free_port(), x, y, out), nprocs=2, join=True)
        ranks = dict(out)
    net, optimizer = _net_and_optimizer()
    for _ in range(3):
        loss = (net(x) - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for rank0, rank1, single in zip(ranks[0]["params"], ranks[1]["params"], net.parameters()):
        assert torch.equal(rank0, rank1)
        torch.testing.assert_close(rank0, single.detach(), rtol=1e-5, atol=1e-6)
    assert ranks[0]["in_sync"] and ranks[1]["in_sync"]
    for a, b in zip(ranks[0]["norm"], ranks[1]["norm"]):
        assert torch.equal(a, b)
    expected = (_return_norm(0).high + _return_norm(1).high) / 2
    assert torch.allclose(ranks[0]["norm"][1], expected)


def _constant_rand(*args, **kwargs):
    """torch.rand with every draw 0.37 (categorical latents are drawn by inverse CDF from it)."""
    return _TORCH_RAND(*args, **kwargs).fill_(0.37)


def _constant_normal_(self, mean=0.0, std=1.0, *, generator=None):
    """Tensor.normal_ at its mean (the continuous actor's reparameterised noise)."""
    return self.fill_(mean)


_TORCH_RAND, _NORMAL_ = torch.rand, torch.Tensor.normal_


def _deterministic(on: bool) -> None:
    """An update's random draws made constant, so a row gets the same ones in any batch."""
    torch.rand, torch.Tensor.normal_ = (_constant_rand, _constant_normal_) if on else (_TORCH_RAND, _NORMAL_)


def _dreamer_learner(batch_rows: slice):
    """The app's learner (tiny world model, official learner defaults, REINFORCE actor) and rows of
    a fixed replay batch; the update deterministic: constant draws from here on (the caller turns
    them off), return normalisation frozen (its batch percentiles are per rank: averaged
    separately, tested above)."""
    from hydra import compose, initialize_config_dir
    from tensordict import TensorDict

    from dreamer.agent.learner import Learner
    from dreamer.agent.model import build_agent
    from dreamer.agent.obs import ObsSpec
    from dreamer.config import register_configs, validate
    from replay.records import ContextSpec

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = validate(compose(config_name="config", overrides=[
            "world_model=tiny", "learner.compile=false", "learner.lr_warmup_steps=0", "learner.lr=1e-3"]))
    torch.manual_seed(0)
    agent = build_agent(cfg.world_model, cfg.learner, ObsSpec.from_env("proprio", 64, vector_dim=5), 1, "cpu")
    agent.loss.actor_loss.retnorm.rate = 0.0
    wm = cfg.world_model
    learner = Learner(agent, cfg.learner, ContextSpec(wm.stoch, wm.classes, wm.deter))
    B, L = 4, 9
    g = torch.Generator().manual_seed(0)
    data = {"action": _TORCH_RAND(B, L, 1, generator=g) * 2 - 1, "is_init": torch.zeros(B, L, 1, dtype=torch.bool),
            "next": {"reward": _TORCH_RAND(B, L, 1, generator=g), "done": torch.zeros(B, L, 1, dtype=torch.bool),
                     "terminated": torch.zeros(B, L, 1, dtype=torch.bool)},
            "replay_context": {"state": torch.zeros(B, L, wm.stoch, dtype=torch.uint8),
                               "belief": torch.zeros(B, L, wm.deter, dtype=torch.float16)},
            "observation": torch.randn(B, L, 5, generator=g)}
    _deterministic(True)  # after the weights' random initialisation
    return agent, learner, TensorDict(data, [B, L])[batch_rows]


def _dreamer_update_on_rank(rank: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    from dreamer.run.distributed import Ranks
    world = Ranks(cuda=False)
    agent, learner, batch = _dreamer_learner(slice(2 * rank, 2 * rank + 2))
    agent.optimizer.grad_sync = world.average_gradients  # as Trainer wires it
    learner.step(batch.clone())
    world.average_buffers(agent.loss.actor_loss.retnorm)
    out[rank] = [(p.detach().clone(), p.grad.clone() if p.grad is not None else None)
                 for p in agent.loss.parameters()]
    world.close()


def test_a_dreamer_update_on_two_ranks_equals_one_process_on_the_whole_batch():
    """A DreamerV3 update (world model, REINFORCE actor, critic, replay value loss; the real
    optimizer) on 2 ranks with sub-batches b0, b1: the gradients it steps with equal those of one
    process on [b0; b1], and the ranks' weights after it are bitwise equal to each other and equal
    the single process's (LaProp's first step is ~lr * sign(gradient): a gradient within float
    noise of 0 may step either way, so weights are compared where the gradient is clear of it)."""
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_dreamer_update_on_rank, args=(free_port(), out), nprocs=2, join=True)
        ranks = dict(out)
    try:
        agent, learner, batch = _dreamer_learner(slice(0, 4))
        learner.step(batch.clone())
    finally:
        _deterministic(False)
    with_grad = 0
    for (w0, g0), (w1, g1), single in zip(ranks[0], ranks[1], agent.loss.parameters()):
        assert torch.equal(w0, w1)
        if single.grad is None:
            assert g0 is None
            continue
        scale = single.grad.abs().max().clamp_min(1e-12)
        torch.testing.assert_close(g0, single.grad, rtol=1e-4, atol=1e-5 * float(scale))
        clear = single.grad.abs() > 1e-3 * scale
        torch.testing.assert_close(w0[clear], single.detach()[clear], rtol=1e-5, atol=1e-6)
        with_grad += bool(single.grad.abs().max() > 0)
    assert with_grad > 10, "(almost) no parameter had a gradient: the comparison would be empty"


def torchrun(run_dir: Path, *extra: str, tag: str | None = None, **popen) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **({"DREAMER_TEST_TAG": tag} if tag else {}))
    return subprocess.Popen([*TORCHRUN, "train.py", *SHORT, f"hydra.run.dir={run_dir}", *extra], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def rank_dirs() -> set[str]:
    return {p.name for p in Path("/tmp").glob("dreamer-rank*")}


@pytest.mark.slow
def test_torchrun_two_ranks_train_in_step_log_once_and_resume_each_ranks_replay(tmp_path):
    from dreamer.config import validate
    from dreamer.run.app import load_resume_state
    from tests.helpers import composed

    before = rank_dirs()
    disk = "replay.storage=disk"
    proc = torchrun(tmp_path, "collector.total_frames=900", disk)  # quick logs to wandb (offline)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    assert "data parallel over 2 ranks: each runs 1 envs and samples 8 of the 16 sequences" in out
    assert "ranks: 2, weights and statistics identical: yes" in out
    assert out.count("trained to ") == 1 and out.count("learner: ") == 1  # one voice: rank 0
    assert [p.name for p in tmp_path.rglob("metrics.jsonl")] == ["metrics.jsonl"]
    assert len(list(tmp_path.glob("wandb/offline-run-*"))) == 1, list(tmp_path.rglob("*run-*"))
    state = checkpoint.load(tmp_path / "checkpoints")
    assert state["frames"] >= 900 and state["world_size"] == 2
    # the train ratio over all ranks: global batch 16 x 16 steps at ratio 64 = one update per 4
    # env steps of either rank after the 300-step prefill
    assert state["updates"] == 1 + (state["frames"] - 300) // 4
    # each rank's replay files located in rank 0's checkpoint (RAM replay would stay each rank's own)
    assert state["replay"] is None and state["replay_disk"] is None
    located = state["replay_disk_ranks"]
    assert [loc["dir"] for loc in located] == ["replay/rank0", "replay/rank1"]
    lengths = [loc["streams"][0]["length"] for loc in located]
    assert min(lengths) > 0 and sum(lengths) >= state["frames"]  # + one final record per episode
    assert rank_dirs() == before, "a rank's placeholder Hydra dir was left in /tmp"

    proc = torchrun(tmp_path, "collector.total_frames=1300", disk, f"resume={tmp_path / 'checkpoints'}")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    assert f"resuming at {state['frames']} env steps, {state['updates']} updates" in out
    assert f"on disk in {tmp_path / 'replay' / 'rank0'} (the checkpoint's files)" in out
    assert "weights and statistics identical: yes" in out
    resumed = checkpoint.load(tmp_path / "checkpoints")
    # no refill: the ratio's count goes on as in one uninterrupted run, and each rank's replay grew
    assert resumed["frames"] >= 1300 and resumed["updates"] == 1 + (resumed["frames"] - 300) // 4
    grown = [loc["streams"][0]["length"] for loc in resumed["replay_disk_ranks"]]
    assert sum(grown) >= sum(lengths) + resumed["frames"] - state["frames"], (lengths, grown)

    # another world size refills, and says so; rank 1 of two reopens rank 1's files
    path = f"resume={checkpoint.latest(tmp_path / 'checkpoints')}"
    alone = load_resume_state(validate(composed(*SHORT, disk, path)), world_size=1)
    assert alone["replay_disk"] is None and "that of 2 process(es), this run has 1" in alone["replay_note"]
    second = load_resume_state(validate(composed(*SHORT, disk, path)), world_size=2, rank=1)
    assert second["replay_dir"] == tmp_path / "replay" / "rank1"


def _wait_for_updates(proc: subprocess.Popen, run_dir: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-12000:]
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists() and re.search(r'"train/updates": [1-9]', metrics.read_text()):
            return
        time.sleep(0.5)
    pytest.fail("the ranks did not start learning")


def _rank_process(tag: str, rank: str):
    return next(p for p in processes_tagged(tag) if p.environ().get("RANK") == rank
                and "train.py" in " ".join(p.cmdline()) and "spawn_main" not in " ".join(p.cmdline())
                and "torch.distributed.run" not in " ".join(p.cmdline()))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGKILL rank 1", "SIGTERM rank 0", "SIGTERM torchrun", "Ctrl-C"])
def test_one_rank_stopping_ends_the_job_and_leaves_nothing(tmp_path, how):
    tag = uuid.uuid4().hex
    proc = torchrun(tmp_path, "collector.total_frames=1000000", "logger=none", tag=tag, start_new_session=True)
    try:
        _wait_for_updates(proc, tmp_path)
        if how == "SIGKILL rank 1":  # as the OOM killer would
            _rank_process(tag, "1").kill()
        elif how == "SIGTERM rank 0":  # `kill` of one rank: all stop, with a checkpoint
            _rank_process(tag, "0").send_signal(signal.SIGTERM)
        elif how == "SIGTERM torchrun":  # a scheduler's: torchrun SIGTERMs each rank's process group
            proc.send_signal(signal.SIGTERM)
        else:  # a terminal's Ctrl-C reaches torchrun's process group
            os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode != 0
        deadline = time.monotonic() + 15
        while processes_tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_tagged(tag) == [], "processes left behind"
        if how == "SIGKILL rank 1":
            assert "another rank of the 2 is gone" in out and re.search(r"rank\s*: 1 .*\n.*exitcode\s*: -9", out), out[-3000:]
        else:
            assert out.count("interrupted: workers stopped") == 2, out[-3000:]  # both ranks stopped
        assert checkpoint.load(tmp_path / "checkpoints")["updates"] > 0
    finally:
        for leftover in processes_tagged(tag):
            leftover.kill()
        if proc.poll() is None:
            proc.kill()


def test_a_slurm_task_becomes_a_rank_from_slurms_variables():
    slurm = {"SLURM_NTASKS": "8", "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "4242",
             "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1"}
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT", "SUBMITIT_EXECUTOR")}
    code = ("import os; from dreamer.run.launch import export_slurm_rendezvous as e; print(e()); "
            "print(*(os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, **slurm}, capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    assert out[:5] == ["True", "5", "8", "1", "gpu07"] and 20000 <= int(out[5]) <= 60000
    single = subprocess.run([sys.executable, "-c", "from dreamer.run.launch import export_slurm_rendezvous as e; print(e())"],
                            cwd=ROOT, env={**env, **slurm, "SLURM_NTASKS": "1"}, capture_output=True, text=True,
                            timeout=60, check=True).stdout.strip()
    assert single == "False"
