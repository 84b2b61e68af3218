"""The house rules a newcomer can rely on (docs/design.md): small modules and classes, imports that
run one way (train.py, benchmarks -> dreamer -> collectors -> replay), and the Trainer's parts
talked to through their methods."""
import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

# "about 300 lines a module, about 150 a class" (docs/design.md); the margins are the "about"
MODULE_LINES, CLASS_LINES = 330, 170
APP_DIRS = ("replay", "collectors", "dreamer", "benchmarks")
# which top-level packages each may import (a lower layer never imports a higher one)
ALLOWED = {"replay": {"replay"}, "collectors": {"collectors", "replay"},
           "dreamer": {"collectors", "dreamer", "replay"}, "benchmarks": {"collectors", "dreamer", "replay", "benchmarks"}}


def app_modules() -> list[Path]:
    return sorted(p for d in APP_DIRS for p in (ROOT / d).rglob("*.py")) + [ROOT / "train.py"]


def imported_packages(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names & set(ALLOWED)


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


def test_the_loop_never_sets_the_trainers_attributes():
    """dreamer/loop.py reads the Trainer and calls its parts' methods; no `trainer.x = ...`."""
    tree = ast.parse((ROOT / "dreamer" / "loop.py").read_text())
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            while isinstance(target, ast.Attribute):
                owner = target.value
                if isinstance(owner, ast.Name) and owner.id in ("t", "trainer"):
                    pytest.fail(f"dreamer/loop.py line {node.lineno} sets an attribute of the trainer")
                if isinstance(owner, ast.Attribute) and owner.attr == "t":
                    pytest.fail(f"dreamer/loop.py line {node.lineno} sets an attribute of the trainer")
                target = owner
