"""Canaries: each place where the app replaces or patches torchrl, tensordict, torch or MKL behaviour
rests on a stock behaviour of the pinned versions. Each test here exercises that stock behaviour and
fails, saying which workaround may then be dropped or must be reviewed, when an upgrade changes it.
(The workarounds' own tests check that ours gives the same results: tests/test_imagination.py,
test_parity.py, test_replay.py, test_absent_modules.py, test_mkl_amd.py.)
"""
import ctypes
import importlib.machinery
import inspect
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.modules.models import model_based
from torchrl.modules.models.model_based import RSSMPriorV3, RSSMRolloutV3
from torchrl.objectives import DreamerV3ActorLoss

from dreamer.agent.model import build_agent
from dreamer.config import LearnerConfig
from tests.helpers import PROPRIO, TINY


def canary(changed: str, workaround: str) -> str:
    return f"the pinned library no longer {changed}: {workaround} may be dropped (or must be reviewed)"


def test_block_gru_stock_layer_repeats_the_features_per_block():
    prior = RSSMPriorV3(action_shape=(2,), action_dim=2, hidden_dim=16, rnn_hidden_dim=32, num_categoricals=4,
                        num_classes=4, recurrent_model="block_gru", num_blocks=4, num_layers=1, prior_num_layers=1)
    gru = next(m for m in prior.modules() if isinstance(m, model_based._DreamerV3BlockGRU))
    first = gru.hidden_layers[0]
    width = sum(p.numel() for n, p in first.named_parameters() if "weight" in n) // (32 // 4)
    assert width == 32 + 3 * 16 * 4, canary("builds each block's input from a copy of all features",
                                            "patches/block_gru.py (factored block GRU)")


def test_rssm_rollout_stock_loop_draws_a_discarded_prior_sample(monkeypatch):
    draws = []
    draw = model_based._straight_through_categorical
    monkeypatch.setattr(model_based, "_straight_through_categorical", lambda *a: draws.append(1) or draw(*a))
    agent = build_agent(TINY, LearnerConfig(compile=False), PROPRIO, 1, "cpu")
    rollout = next(m for m in agent.loss.modules() if isinstance(m, RSSMRolloutV3))
    rollout.__class__ = RSSMRolloutV3  # torchrl's own loop
    B, T = 2, 5
    data = TensorDict({"state": torch.zeros(B, T, agent.nets.sizes.S), "belief": torch.zeros(B, T, agent.belief_dim),
                       "action": torch.zeros(B, T, 1), "is_init": torch.zeros(B, T, 1, dtype=torch.bool),
                       "next": {"encoded_latents": torch.zeros(B, T, agent.nets.encoder.out_features)}}, [B, T])
    rollout(data)
    assert len(draws) == 2 * T, canary("draws (and discards) a prior sample per step of the observed rollout",
                                       "patches/rssm_rollout.py")


def test_regional_stock_step_compile_leaves_the_posterior_draw_outside():
    loop = inspect.getsource(RSSMRolloutV3._loop)
    assert "_straight_through_categorical" in loop and "_step_fn" in inspect.getsource(RSSMRolloutV3), canary(
        "draws the posterior outside the step it compiles (compile_rollout('step'))",
        "patches/rssm_rollout.py compile_fused_step and patches/regional.py's fused step")


def test_imagination_stock_actor_loss_imagines_with_env_rollout_and_gradients():
    forward = inspect.getsource(DreamerV3ActorLoss.forward)
    assert "self.model_based_env.rollout(" in forward and "no_grad" not in forward, canary(
        "imagines through EnvBase.rollout with gradients on under REINFORCE",
        "dreamer/agent/imagination.py (lean, gradient-free rollout)")


def test_absent_modules_stock_tensordict_searches_for_pandas_per_call(monkeypatch):
    if sys.modules.get("pandas") is not None:
        pytest.skip("pandas is installed here: the lookup finds it and the workaround does nothing")
    searches = []
    original = importlib.machinery.PathFinder.__dict__["find_spec"]
    monkeypatch.setattr(importlib.machinery.PathFinder, "find_spec",
                        classmethod(lambda cls, name, *a, **k: searches.append(name) or original.__func__(cls, name, *a, **k)))
    monkeypatch.delitem(sys.modules, "pandas", raising=False)
    module = TensorDictModule(torch.nn.Linear(3, 2), ["x"], ["y"])
    for _ in range(3):
        module(TensorDict(x=torch.zeros(4, 3), batch_size=[4]))
    assert searches.count("pandas") >= 3, canary("looks pandas up on sys.path at every module call",
                                                 "patches/absent_modules.py")


def test_compile_safe_storage_stock_length_turns_into_an_int_while_compiling():
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    td = TensorDict({"x": torch.zeros(5, 1)}, [5])
    buffer.extend(td)
    with torch.compiler._compile_session_context():  # what Dynamo holds while any thread compiles
        buffer.extend(td)
    with pytest.raises(AttributeError, match="'int' object has no attribute 'value'"):
        len(buffer)
        pytest.fail(canary("stores a storage's length as a plain int while any thread compiles",
                           "patches/storage.py CompileSafeStorage"))


def test_reset_rows_stock_rollout_zeroes_the_carry_and_action_on_is_init_rows():
    """dreamer/agent/learner.py flags row t when record t + 1 starts an episode, because torchrl's rollout
    zeroes the carried latent and a_t on a flagged row before stepping."""
    agent = build_agent(TINY, LearnerConfig(compile=False), PROPRIO, 1, "cpu")
    rollout = next(m for m in agent.loss.modules() if isinstance(m, RSSMRolloutV3))
    rollout.__class__ = RSSMRolloutV3
    S, D = agent.nets.sizes.S, agent.belief_dim
    embed = agent.nets.encoder(torch.randn(1, 1, PROPRIO.vector_dim)).detach()

    def first_prior(state, belief, action):
        data = TensorDict({"state": state, "belief": belief, "action": action,
                           "is_init": torch.ones(1, 1, 1, dtype=torch.bool), "next": {"encoded_latents": embed}}, [1, 1])
        return rollout(data)["next", "prior_logits"]

    zeros = first_prior(torch.zeros(1, 1, S), torch.zeros(1, 1, D), torch.zeros(1, 1, 1))
    other = first_prior(torch.rand(1, 1, S), torch.rand(1, 1, D), torch.ones(1, 1, 1))
    assert torch.equal(zeros, other), canary("zeroes the carry and the action on an is_init row",
                                              "the reset-row layout of dreamer/agent/learner.py")


def test_one_hot_actions_stock_mode_marks_every_tied_maximum():
    from torchrl.modules.distributions.discrete import OneHotCategorical

    mode = OneHotCategorical(logits=torch.zeros(3)).mode
    assert mode.sum() > 1, canary("returns a multi-hot mode on tied logits", "patches/distributions.py OneHotActions.mode")


@pytest.mark.skipif(sys.platform != "linux", reason="the shim is for Linux x86-64 wheels")
def test_mkl_amd_stock_torch_asks_mkls_vendor_check():
    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    exported = hasattr(ctypes.CDLL(str(library)), "mkl_serv_intel_cpu_true")
    assert exported, canary("links MKL with its Intel vendor check (mkl_serv_intel_cpu_true)", "patches/mkl_amd.py")


def test_the_installed_versions_are_the_ones_the_patches_were_written_for():
    import patches

    assert patches.mismatches() == [], "an upgrade: run this file's canaries and update patches/__init__.py"


def test_another_torchrl_version_names_each_patch_that_may_no_longer_apply():
    import patches

    lines = patches.mismatches(lambda package: "0.15.0" if package == "torchrl" else patches.installed(package))
    torchrl = [p for p in patches.PATCHES if p.package == "torchrl"]
    assert len(lines) == len(torchrl) >= 8
    for patch, line in zip(torchrl, lines):
        assert line.startswith(f"warning: {patch.where} overrides ") and "written for torchrl 0.14.1; 0.15.0" in line
    for patch in patches.PATCHES:
        assert (Path(__file__).resolve().parents[1] / patch.where).exists(), patch.where


def test_every_module_in_patches_is_listed_with_its_versions():
    import patches

    listed = {p.where for p in patches.PATCHES}
    modules = {f"patches/{p.name}" for p in (Path(__file__).resolve().parents[1] / "patches").glob("*.py")}
    assert modules - {"patches/__init__.py"} <= listed, sorted(modules - listed - {"patches/__init__.py"})


def test_the_collectors_writer_state_is_read_loudly():
    """patches/collector.py: torchrl's collector keeps its replay writer's thread and error in private
    attributes; a torchrl without them fails at start-up naming them, never a silent None."""
    from torchrl.collectors import AsyncBatchedCollector

    from patches.collector import replay_error, replay_thread

    for read, name in ((replay_thread, "_replay_thread"), (replay_error, "_replay_error")):
        with pytest.raises(RuntimeError, match=f"has no {name}"):
            read(object())
        assert f"self.{name}" in inspect.getsource(AsyncBatchedCollector.__init__), canary(
            f"no longer sets {name}", "patches/collector.py")
