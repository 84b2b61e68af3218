"""Answer tensordict's per-call "is pandas installed?" from sys.modules.

tensordict's `TensorDict.from_any`, which every TensorDictModule calls for each tensor it writes,
asks `importlib.util.find_spec("pandas")` on every call. Without pandas installed that is a fresh
search of sys.path each time (~0.2 ms): ~106 calls per learner update of the tiny model (the
imagination rollout's modules), measured ~22 ms of a ~290 ms CPU update, and the same per acting
call. A module recorded as None in sys.modules is one importlib reports as absent without a
search (`find_spec` returns None, `import` raises ModuleNotFoundError), which is what an absent
module does anyway. Applied only to modules that are not installed.
"""
from __future__ import annotations

import importlib.util
import sys

LOOKED_UP_PER_CALL = ("pandas",)  # tensordict/base.py, TensorDictBase.from_any


def mark_absent_modules(names=LOOKED_UP_PER_CALL) -> list[str]:
    """Record each of `names` that is not installed as absent; returns those marked."""
    marked = []
    for name in names:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            sys.modules[name] = None
            marked.append(name)
    return marked
