"""Every place where the app overrides an internal of torch, torchrl, tensordict, Python or MKL, with
the versions it was written for.

Each one is measured and tested (docs/design.md), and tests/test_canaries.py fails when the stock
behaviour it works around changes. At start-up `check_versions()` compares the installed versions
with these: a difference prints one warning per patch that may no longer apply, so an upgrade
says at once what to re-check (`python -m pytest tests/test_canaries.py`).
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True)
class Patch:
    where: str  # the file that holds it
    what: str  # the internal it overrides
    package: str  # the distribution whose internal it is
    version: str  # the version it was written for


PATCHES = (
    Patch("dreamer/block_gru.py", "_DreamerV3BlockGRU's forward (a __class__ swap)", "torchrl", "0.14.1"),
    Patch("dreamer/rssm_rollout.py", "RSSMRolloutV3._loop and _step_fn", "torchrl", "0.14.1"),
    Patch("dreamer/imagination.py", "the actor loss's DreamerEnv.rollout", "torchrl", "0.14.1"),
    Patch("dreamer/regional.py", "RSSMRollout._fused_fn and the prior's compile", "torchrl", "0.14.1"),
    Patch("replay/buffer.py", "LazyTensorStorage._len (CompileSafeStorage)", "torchrl", "0.14.1"),
    Patch("replay/disk.py", "LazyMemmapStorage._storage/_len and the writer's _cursor", "torchrl",
          "0.14.1"),
    Patch("collectors/envs/dmc.py", "DMControlWrapper._check_kwargs", "torchrl", "0.14.1"),
    Patch("dreamer/trainer.py", "AsyncBatchedCollector._replay_thread (the writer's fault check)", "torchrl",
          "0.14.1"),
    Patch("dreamer/learner.py", "the reset-row layout of RSSMRolloutV3's is_init rows", "torchrl", "0.14.1"),
    Patch("dreamer/actors.py", "OneHotCategorical.mode (OneHotActions)", "torchrl", "0.14.1"),
    Patch("collectors/absent_modules.py", "TensorDict.from_any's pandas lookup (sys.modules)", "tensordict",
          "0.14.3"),
    Patch("dreamer/stop.py", "multiprocessing.util.spawnv_passfds", "python", "3.11"),
    Patch("dreamer/mkl_amd.py", "MKL's mkl_serv_intel_cpu_true (a preloaded library)", "torch", "2.13.0"),
)


def installed(package: str) -> str | None:
    if package == "python":
        import sys

        return f"{sys.version_info.major}.{sys.version_info.minor}"
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def mismatches(version_of=installed) -> list[str]:
    """One line per patch written for another version than the installed one."""
    lines = []
    for patch in PATCHES:
        have = version_of(patch.package)
        if have is None or have.split("+")[0] == patch.version:
            continue
        lines.append(f"warning: {patch.where} overrides {patch.what}, written for {patch.package} {patch.version}; "
                     f"{have} is installed: run tests/test_canaries.py before trusting it")
    return lines


def check_versions() -> None:
    for line in mismatches():
        print(line, flush=True)
