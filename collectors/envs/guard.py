"""Non-finite env data stops at the env: a NaN or inf in an observation or reward never reaches the
policy or replay.

Every env the app builds (training workers, evaluation) ends with `FiniteGuard`, which checks each
step's float observations and reward in the env's own process (one `isfinite().all()` per key): it
has to be there, before the policy server, because a NaN observation would otherwise surface as a
sampling error deep inside the policy. env.nonfinite picks what happens:
  error  raise `NonFiniteEnvData`, whose message names the key, the env worker, its env step and
         the task; dreamer/run/app.py prints it as one line (the loop has written its checkpoint)
  zero   replace them with 0 and count them in the step's `nonfinite` entry (collect/nonfinite_values)
"""
from __future__ import annotations

import contextlib
import re
import traceback

import gymnasium
import torch
from torchrl.data import Unbounded
from torchrl.envs import Transform

COUNT_KEY = "nonfinite"
MODES = ("error", "zero")
# How dreamer/run/app.py finds an env fault's message inside the collector's wrapped errors (messages
# hold no quotes: the collector may pass them on as the repr of the worker's error).
MARK = "env.nonfinite: "
SPEC_MARK = "env spec changed: "


class NonFiniteEnvData(RuntimeError):
    pass


# EnvRaised's message: "env worker 1 (gym_X) raised ValueError: ..." (or "the evaluation env (...)")
RAISED = r"(?:env worker \d+|the evaluation env) \([^)]*\) raised \w+: "


class EnvSpecChanged(RuntimeError):
    """An observation that does not fit the space the env declared at start-up (collectors/envs/gym.py)."""


class EnvRaised(RuntimeError):
    pass


class EnvErrors(gymnasium.Wrapper):
    """An exception from a Gymnasium env's step() or reset() (the user's code, a simulator) becomes one
    that names the env and its env step; its traceback is appended to `log` (the run's train.log),
    because the collector passes on only the exception's repr from its worker process."""

    def __init__(self, env: gymnasium.Env, where: str, log: str | None = None):
        super().__init__(env)
        self.where, self.log, self.steps = where, log, 0

    def step(self, action):
        self.steps += 1
        try:
            return self.env.step(action)
        except Exception as err:
            raise self._named(err, f"step() at env step {self.steps}") from err

    def reset(self, **kwargs):
        try:
            return self.env.reset(**kwargs)
        except Exception as err:
            raise self._named(err, f"reset() after env step {self.steps}") from err

    def _named(self, err: Exception, call: str) -> Exception:
        if isinstance(err, EnvSpecChanged):  # already names everything
            return err
        where = ""
        if self.log is not None:
            with contextlib.suppress(OSError), open(self.log, "a") as f:
                f.write(f"{self.where} raised in {call}:\n{traceback.format_exc()}\n")
            where = f"; its traceback: {self.log}"
        # no quotes or backslashes: the collector passes the message on inside a repr
        text = str(err).translate({ord(c): " " for c in "'\"\\\n"}).strip()
        return EnvRaised(f"{self.where} raised {type(err).__name__}: {text} in {call}{where}")


def fault_line(err: BaseException) -> str | None:
    """An env fault's message (a guard's, EnvSpecChanged's or EnvRaised's), if `err` (or what it wraps, even as
    text) is one, else None."""
    marks = "|".join([re.escape(MARK), re.escape(SPEC_MARK), RAISED])
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        found = re.search(f"(?:{marks})" + r"[^'\"\\]*", str(err))
        if found:
            return found.group(0).rstrip(".) ")
        err = err.__cause__ or err.__context__
    return None


class FiniteGuard(Transform):
    def __init__(self, keys: list[str], where: str, mode: str = "error"):
        super().__init__(in_keys=[], out_keys=[])
        self.keys, self.where, self.mode, self.steps = list(keys), where, mode, 0

    def _step(self, tensordict, next_tensordict):
        self.steps += 1
        return self._check(next_tensordict, f"env step {self.steps}")

    def _reset(self, tensordict, tensordict_reset):
        return self._check(tensordict_reset, f"the reset after env step {self.steps}")

    def _check(self, td, when: str):
        count = 0
        for key in (*self.keys, "reward"):
            value = td.get(key, None)
            if value is None or not value.dtype.is_floating_point:
                continue
            finite = torch.isfinite(value)
            if bool(finite.all()):
                continue
            if self.mode == "error":
                bad = value[~finite][0].item()
                raise NonFiniteEnvData(f"{MARK}{bad} in {key} from {self.where} at {when}; env.nonfinite=zero "
                                       "replaces such values with 0 and counts them")
            count += int((~finite).sum())
            td.set(key, torch.where(finite, value, torch.zeros((), dtype=value.dtype)))
        if self.mode == "zero":
            td.set(COUNT_KEY, torch.tensor([count], dtype=torch.int64))
        return td

    def transform_observation_spec(self, observation_spec):
        if self.mode == "zero":
            observation_spec[COUNT_KEY] = Unbounded(shape=(1,), dtype=torch.int64, device=observation_spec.device)
        return observation_spec
