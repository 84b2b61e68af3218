"""learner.compile=regional (patches/regional.py): the same losses as eager, chosen by `auto` for
long CPU runs only, and a train.py run with it."""
import re

import pytest
import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
from torchrl.modules.models.model_based import RSSMRolloutV3, SymExpTwoHot
from torchrl.objectives.dreamer_v3 import DreamerV3ValueLoss

from dreamer.agent.learner import Learner, resolve_flags
from dreamer.agent.model import build_agent
from dreamer.config import LearnerConfig
from patches.regional import REGIONAL_MIN_UPDATES
from patches.rssm_rollout import RSSMRollout
from tests.helpers import LOSSES, PROPRIO, TINY, replay_batch


def test_auto_compiles_regions_only_for_long_cpu_runs():
    cpu, auto = torch.device("cpu"), LearnerConfig()
    assert not resolve_flags(auto, cpu).regional
    assert not resolve_flags(auto, cpu, expected_updates=REGIONAL_MIN_UPDATES - 1).regional
    assert resolve_flags(auto, cpu, expected_updates=REGIONAL_MIN_UPDATES).regional
    assert resolve_flags(LearnerConfig(compile="regional"), cpu).regional
    assert not resolve_flags(LearnerConfig(compile=False), cpu, expected_updates=10**6).regional
    flags = resolve_flags(LearnerConfig(compile="regional"), cpu)
    assert not flags.compile and flags.describe() == "regionally compiled fp32"


@pytest.mark.slow
@pytest.mark.parametrize("actor_grad", ["reinforce", "dynamics"])
def test_regional_gives_the_eager_losses(tmp_path, monkeypatch, actor_grad):
    """Same seed, same batch, three updates: every loss equal within 1e-4 relative (inductor fuses
    and reorders float sums). Compiled code draws its own random numbers unless told to use
    eager's (fallback_random), which this comparison needs; the run itself does not."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))  # a cold compile
    batch = replay_batch(2, 9, PROPRIO, 1, seed=3)
    torch._dynamo.reset()  # count this test's graphs only
    results = {}
    for mode in (False, "regional"):
        torch.manual_seed(0)
        cfg = LearnerConfig(compile=mode, lr_warmup_steps=0, imagination_horizon=4, actor_grad=actor_grad)
        learner = Learner(build_agent(TINY, cfg, PROPRIO, 1, "cpu"), cfg)
        assert learner.flags.regional == (mode == "regional")
        torch.manual_seed(1)
        with torch._inductor.config.patch(fallback_random=True):
            results[mode] = [{k: float(v) for k, v in learner.step(batch).items() if k in LOSSES} for _ in range(3)]
    assert (tmp_path / "cache").is_dir() and any((tmp_path / "cache").iterdir())  # the documented cache
    # one graph per region (each costs a compile): the RSSM step's first carry (no gradient) and
    # the decoders' grad-mode calls on logits without gradients used to compile graphs of their own
    # (the step is compiled with the posterior's draw: RSSMRollout._step_and_draw, torchrl's _step inlined)
    assert len(_debug_get_cache_entry_list(RSSMRollout._step_and_draw.__code__)) == 1
    assert len(_debug_get_cache_entry_list(RSSMRolloutV3._step.__code__)) == 0
    decoder_graphs = len(_debug_get_cache_entry_list(SymExpTwoHot.forward.__code__))
    assert decoder_graphs == 2  # with and without gradients (the eager replay value loss's targets)
    # the replay value loss stays eager (~16 s of cold compile for no measured gain); torchrl wraps it
    # and the value loss's forward in one wrapper code object: one graph is the value loss's
    assert len(_debug_get_cache_entry_list(DreamerV3ValueLoss.replay_value_loss.__code__)) == 1
    for eager, regional in zip(results[False], results["regional"]):
        assert set(eager) == set(LOSSES)
        for key in LOSSES:
            assert regional[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-6), key


@pytest.mark.slow
def test_a_train_run_with_regional_compile_says_so_and_trains(tmp_path):
    from tests.conftest import run_train
    from tests.helpers import RUN

    proc = run_train(*RUN, "collector.total_frames=400", "learner.compile=regional", "eval.every=400",
                     f"hydra.run.dir={tmp_path / 'run'}", timeout=400,
                     env_extra={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(rf"learner: regionally compiled fp32, \d+ thread\(s\), ~25 updates planned "
                     rf"\(compile cache: {re.escape(str(tmp_path / 'cache'))}\)", proc.stdout), proc.stdout[-2000:]
    from patches import mkl_amd
    if mkl_amd.STATUS:  # this CPU is an AMD one with AVX-512: the run says MKL runs its AVX-512 kernels
        assert "MKL: AVX-512 kernels on this AMD CPU (patches/mkl_amd.py)" in proc.stdout
    assert f"trained to 400 env steps ({1 + 100 * 16 // 64} updates)" in proc.stdout
    assert "eval at 400 env steps" in proc.stdout  # the evaluator acts with the compiled prior's nets


def test_the_compile_cache_defaults_to_the_apps_directory(tmp_path):
    """Without TORCHINDUCTOR_CACHE_DIR the cache is ~/.cache/dreamer-app/inductor, as documented, in a
    process set up as the entry points do (dreamer.runtime.setup()), also after torch._dynamo's import
    (which sets the variable to torch's /tmp default when unset)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["HOME"] = str(tmp_path)
    code = ("from dreamer.runtime import setup\nsetup()\nfrom patches.regional import compile_cache_dir\n"
            "import torch._dynamo, torchrl\nprint(compile_cache_dir())")
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == str(tmp_path / ".cache" / "dreamer-app" / "inductor")
