import os
import subprocess
import sys
from pathlib import Path

import pytest

from dreamer.runtime import setup

setup()  # before any test imports torch or a simulator: as in the app (dreamer/runtime.py)

ROOT = Path(__file__).resolve().parents[1]


def run_train(*overrides: str, timeout: float = 300, cwd: Path = ROOT, env_extra: dict | None = None):
    """Runs `python train.py <overrides>` as a user would; returns the CompletedProcess."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "WANDB_SILENT": "true", **(env_extra or {})}
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *overrides],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def train():
    return run_train
