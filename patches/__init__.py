"""Every override of an internal of torch, torchrl, tensordict, Python or MKL lives in this package
(one module each); `PATCHES` lists them, and the two places elsewhere that re-implement or rely on
a library's behaviour, with the versions they were written for.

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


PATCHES = (  # overrides of internals: all in this package
    Patch("patches/block_gru.py", "_DreamerV3BlockGRU's forward (a __class__ swap)", "torchrl", "0.14.1"),
    Patch("patches/rssm_rollout.py", "RSSMRolloutV3._loop and _step_fn", "torchrl", "0.14.1"),
    Patch("patches/regional.py", "RSSMRollout._fused_fn and the prior's compile", "torchrl", "0.14.1"),
    Patch("patches/storage.py", "the storages' _len, _storage, _last_cursor and the writers' _cursor/_write_count",
          "torchrl", "0.14.1"),
    Patch("patches/dmc.py", "DMControlWrapper._check_kwargs", "torchrl", "0.14.1"),
    Patch("patches/collector.py", "AsyncBatchedCollector._replay_thread and _replay_error (the writer's faults)", "torchrl",
          "0.14.1"),
    Patch("patches/distributions.py", "OneHotCategorical.mode and sample (OneHotActions)", "torchrl", "0.14.1"),
    Patch("patches/absent_modules.py", "TensorDict.from_any's pandas lookup (sys.modules)", "tensordict",
          "0.14.3"),
    Patch("patches/spawn.py", "multiprocessing.util.spawnv_passfds", "python", "3.11"),
    Patch("patches/mkl_amd.py", "MKL's mkl_serv_intel_cpu_true (a preloaded library)", "torch", "2.13.0"),
    # public behaviour the app re-implements or relies on, checked against the same versions
    Patch("dreamer/agent/imagination.py", "the actor loss's DreamerEnv.rollout (a lean re-implementation)",
          "torchrl", "0.14.1"),
    Patch("dreamer/agent/learner.py", "the reset-row layout of RSSMRolloutV3's is_init rows", "torchrl", "0.14.1"),
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
