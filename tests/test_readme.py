"""Every command in README.md runs as written: each `python train.py ...` (and torchrun's) composes
with `--cfg job`, each `python -m ...` names a module that exists, and each `$ command` example
prints the `error:` line the README shows."""
import importlib.util
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def code_lines(language: str = "bash") -> list[str]:
    blocks = re.findall(rf"```{language}\n(.*?)```", README, re.S)
    lines = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def train_args(line: str) -> list[str] | None:
    words = shlex.split(line.replace("<", "").replace(">", ""))
    if "train.py" not in words or words[0] not in ("python", "torchrun"):
        return None
    args = words[words.index("train.py") + 1:]
    if "-m" in args:  # a sweep: --cfg job composes one job, its first value of each swept key
        args = [re.sub(r"=([^\[][^,]*),.*", r"=\1", a) for a in args if a != "-m"]
    return args


TRAIN = [args for args in map(train_args, code_lines()) if args is not None]


def test_the_readme_has_quick_start_commands():
    assert len(TRAIN) >= 10 and sum(line.startswith("python -m ") for line in code_lines()) >= 2


@pytest.mark.parametrize("args", TRAIN, ids=[" ".join(a)[:60] for a in TRAIN])
def test_each_train_command_composes(args):
    proc = subprocess.run([sys.executable, "train.py", *args, "--cfg", "job"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "collector:" in proc.stdout


def test_each_module_command_names_a_module_that_exists():
    for line in code_lines():
        if line.startswith("python -m "):
            module = line.split()[2]
            assert importlib.util.find_spec(module) is not None, line
            if module == "dreamer.report":
                assert line.split()[3] in ("plot", "compare") or "/" in line.split()[3], line


def test_each_error_example_prints_the_line_the_readme_shows():
    examples = re.findall(r"^\$ python train\.py (.+)\n(error: .+)$", README, re.M)
    assert len(examples) >= 2
    for args, expected in examples:
        proc = subprocess.run([sys.executable, "train.py", *shlex.split(args)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2 and expected in proc.stderr, (args, proc.stderr[-1000:])
