"""dreamer/runtime.py: importing the app's packages changes nothing in a process; setup(), called
first by every entry point, does (environment defaults, pandas marked absent, MKL's shim)."""
import ast
import json
import os
import subprocess
import sys

import pytest

from dreamer import runtime
from tests.conftest import ROOT

ENTRY_POINTS = ("train.py", "dreamer/evaluate.py", "benchmarks/__init__.py")
# what an entry point may import before setup(): the standard library and the stop recorder
BEFORE_SETUP = {"__future__", "os", "sys", "tempfile", "dreamer.run.stop", "dreamer.runtime"}

PROBE = """
import json, os, sys
import dreamer, collectors, replay, patches
import dreamer.run.app, dreamer.run.evaluator, collectors.envs.dmc, collectors.specs, replay.disk
from patches import mkl_amd
seen = lambda: {"env": {k: os.environ.get(k) for k in %r}, "pandas_marked": "pandas" in sys.modules
                and sys.modules["pandas"] is None, "mkl": mkl_amd.STATUS}
imported = seen()
from dreamer.runtime import setup
setup()
print(json.dumps({"imported": imported, "setup": seen()}))
"""


def test_importing_changes_nothing_and_setup_does():
    # libraries set two themselves on import: torch (its inductor cache dir), a pygame user (its prompt)
    keys = [k for k in runtime.ENV_DEFAULTS if k not in ("TORCHINDUCTOR_CACHE_DIR", "PYGAME_HIDE_SUPPORT_PROMPT")]
    env = {k: v for k, v in os.environ.items() if k not in runtime.ENV_DEFAULTS}
    proc = subprocess.run([sys.executable, "-c", PROBE % (keys,)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["imported"] == {"env": {k: None for k in keys}, "pandas_marked": False, "mkl": None}
    assert out["setup"]["env"] == {k: runtime.ENV_DEFAULTS[k] for k in keys}
    pandas_installed = subprocess.run([sys.executable, "-c", "import pandas"], capture_output=True).returncode == 0
    assert out["setup"]["pandas_marked"] is not pandas_installed
    from patches import mkl_amd

    if mkl_amd.STATUS:  # an AMD CPU with AVX-512: too late for the shim, and said so
        assert out["setup"]["mkl"].endswith("torch was imported before dreamer.runtime.setup()")


def test_a_value_the_user_set_wins_and_a_second_call_only_reports():
    code = ("import os; os.environ['MUJOCO_GL'] = 'osmesa'; from dreamer.runtime import setup; "
            "first = setup(); os.environ['MUJOCO_GL'] = 'glfw'; print(os.environ['MUJOCO_GL'], first == setup())")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["glfw", "True"], proc.stderr[-2000:]


def module_imports(node) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if isinstance(node, ast.ImportFrom):
        return {node.module}
    if isinstance(node, ast.If):  # an `if __name__ ...:` block at module level
        return set().union(*(module_imports(n) for n in node.body))
    return set()


def calls_setup(node) -> bool:
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "setup" for n in ast.walk(node))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_calls_setup_before_it_imports_anything_else(entry):
    body = ast.parse((ROOT / entry).read_text()).body
    first_setup = next((i for i, node in enumerate(body) if calls_setup(node)), None)
    assert first_setup is not None, f"{entry} never calls setup()"
    early = set().union(*(module_imports(node) for node in body[:first_setup])) - BEFORE_SETUP
    assert not early, f"{entry} imports {sorted(early)} before setup()"
