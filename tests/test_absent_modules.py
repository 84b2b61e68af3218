"""patches/absent_modules.py: tensordict's per-call lookup of pandas answered from sys.modules."""
import importlib.machinery
import importlib.util
import sys

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from patches.absent_modules import mark_absent_modules


def path_searches(call) -> int:
    """How many sys.path searches importlib makes during `call()`."""
    count = 0
    finder = importlib.machinery.PathFinder
    original = finder.__dict__["find_spec"]

    def counting(cls, *args, **kwargs):
        nonlocal count
        count += 1
        return original.__func__(cls, *args, **kwargs)

    finder.find_spec = classmethod(counting)
    try:
        call()
    finally:
        finder.find_spec = original
    return count


@pytest.mark.skipif(sys.modules.get("pandas") is not None, reason="pandas is installed and imported here")
def test_a_module_call_searches_no_path_once_absent_modules_are_marked(monkeypatch):
    module = TensorDictModule(torch.nn.Linear(3, 2), ["x"], ["y"])
    call = lambda: [module(TensorDict(x=torch.zeros(4, 3), batch_size=[4])) for _ in range(5)]  # noqa: E731
    monkeypatch.delitem(sys.modules, "pandas", raising=False)  # as without the app's import
    assert path_searches(call) >= 5  # tensordict: one sys.path search per tensor written
    assert mark_absent_modules() == ["pandas"]
    assert path_searches(call) == 0
    assert importlib.util.find_spec("pandas") is None
    with pytest.raises(ImportError):
        import pandas  # noqa: F401


def test_an_installed_module_is_left_alone():
    assert mark_absent_modules(("torch", "tensordict")) == []
    assert sys.modules["torch"] is torch
