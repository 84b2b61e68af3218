"""The house rules a newcomer can rely on (docs/design.md): small modules and classes, imports that
run one way (train.py, benchmarks -> dreamer -> collectors -> replay -> patches; inside dreamer:
entry points -> run -> agent -> config -> io), library internals named only in patches/, a process
set up by one explicit call, and the Trainer's parts talked to through their methods."""
import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

# "about 300 lines a module, about 150 a class" (docs/design.md): modules at most 300, classes 170
MODULE_LINES, CLASS_LINES = 300, 170
APP_DIRS = ("patches", "replay", "collectors", "dreamer", "benchmarks")
# which top-level packages each may import (a lower layer never imports a higher one)
ALLOWED = {"patches": {"patches"}, "replay": {"replay", "patches"}, "collectors": {"collectors", "replay", "patches"},
           "dreamer": {"collectors", "dreamer", "replay", "patches"}, "benchmarks": set(APP_DIRS)}
DREAMER_LAYERS = ("io", "config", "agent", "run")  # low to high; dreamer/*.py are entry points above them
# torchrl/tensordict internals the app touches: named only in patches/ (patches/__init__.py lists them)
INTERNALS = ("_rbs", "_writer", "_cursor", "_write_count", "_storage", "_last_cursor", "_set_last_cursor",
             "_replay_thread", "_replay_error", "_check_kwargs", "_fused_fn", "_step_fn", "_sampler", "_batch_size", "spawnv_passfds")


def app_modules() -> list[Path]:
    return sorted(p for d in APP_DIRS for p in (ROOT / d).rglob("*.py")) + [ROOT / "train.py"]


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | ({f"{node.module}.{a.name}" for a in node.names} if node.module == "dreamer" else set())
    return names


def imported_packages(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imported_modules(path)} & set(ALLOWED)


def dreamer_layer(name: str) -> int:
    """A dreamer module's layer: its subpackage's place in DREAMER_LAYERS, entry points above all."""
    parts = name.split(".")
    return DREAMER_LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in DREAMER_LAYERS else len(DREAMER_LAYERS)


@pytest.mark.parametrize("path", app_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_classes_stay_small(path):
    source = path.read_text()
    assert len(source.splitlines()) <= MODULE_LINES, f"{path.name}: split it by concern"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            assert node.end_lineno - node.lineno + 1 <= CLASS_LINES, f"{path.name}: class {node.name}"


def test_imports_run_one_way():
    for path in app_modules():
        layer = path.relative_to(ROOT).parts[0]
        if layer == "train.py":
            continue
        wrong = imported_packages(path) - ALLOWED[layer]
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"


def test_dreamers_subpackages_import_downwards_only():
    for path in (ROOT / "dreamer").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mine = dreamer_layer(module)
        higher = sorted(name for name in imported_modules(path)
                        if name.startswith("dreamer.") and dreamer_layer(name) > mine and name != "dreamer.runtime")
        assert not higher, f"{path.relative_to(ROOT)} imports {higher} (a higher layer)"


@pytest.mark.parametrize("path", [p for p in app_modules() if "patches" not in p.parts],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_library_internals_are_named_only_in_patches(path):
    tree = ast.parse(path.read_text())
    named = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    named |= {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert not named & set(INTERNALS), f"{path.name} touches {sorted(named & set(INTERNALS))}: move it to patches/"


def test_the_loop_never_sets_the_trainers_attributes():
    """dreamer/run/loop.py reads the Trainer and calls its parts' methods; no `trainer.x = ...`."""
    tree = ast.parse((ROOT / "dreamer" / "run" / "loop.py").read_text())
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            while isinstance(target, ast.Attribute):
                owner = target.value
                if isinstance(owner, ast.Name) and owner.id in ("t", "trainer"):
                    pytest.fail(f"dreamer/run/loop.py line {node.lineno} sets an attribute of the trainer")
                if isinstance(owner, ast.Attribute) and owner.attr == "t":
                    pytest.fail(f"dreamer/run/loop.py line {node.lineno} sets an attribute of the trainer")
                target = owner
