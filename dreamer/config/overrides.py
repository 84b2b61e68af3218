"""The command line's keys and presets, checked before Hydra composes (train.py): a mistyped key or
preset fails naming it and listing the valid ones (Hydra's error lists none, and Hydra skips a
mistyped preset of an optional group such as experiment without a word)."""
from __future__ import annotations

import dataclasses
import os
import typing

from dreamer.config import Config
from dreamer.config.errors import _check

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "conf")


def presets(group: str) -> list[str]:
    """The presets of a config group (conf/<group>/*.yaml), e.g. presets("experiment")."""
    folder = os.path.join(CONF_DIR, group)
    return sorted(name[:-5] for name in os.listdir(folder) if name.endswith(".yaml"))


def check_group_choice(group: str, value: str) -> None:
    """`group=value` names a preset that exists (an optional group such as experiment would
    otherwise skip a mistyped one without a word); a sweep's comma-separated values each."""
    if value in ("null", "") or any(c in value for c in "()[]${}"):  # null, or Hydra's sweep functions
        return
    known = presets(group)
    for choice in value.split(","):
        _check(choice in known, group, f"no preset {choice!r}; available: {', '.join(known)}")


def check_override_keys(args: list[str]) -> None:
    """Command-line overrides name existing keys and presets; the error lists the valid ones (Hydra's
    does not, and skips a mistyped experiment)."""
    schema = None  # the structured config, built once when a value's type is to be checked
    for arg in args:
        key, sep, value = arg.partition("=")
        group = key.lstrip("+")
        ours = not group.startswith("hydra")  # Hydra's groups hold its own presets too (joblib, ...)
        if sep and ours and not key.startswith(("-", "~")) and os.path.isdir(os.path.join(CONF_DIR, group)):
            check_group_choice(group, value)  # env=..., experiment=..., world_model=...
            continue
        # flags, appends/deletes, Hydra's own keys
        if not sep or key.startswith(("-", "+", "~", "hydra")) or "/" in key:
            continue
        node, path = Config, []
        for part in key.split("."):
            if node is None:  # a plain value has no sub-keys
                _check(False, key, f"{'.'.join(path)} is a value, not a group of keys")
            hints = typing.get_type_hints(node)
            names = [f.name for f in dataclasses.fields(node)]
            _check(part in names, ".".join(path + [part]),
                   f"unknown key; valid keys in {'.'.join(path) or 'the top level'}: {', '.join(names)}")
            path.append(part)
            node = hints[part] if dataclasses.is_dataclass(hints[part]) else None
        if node is None:
            schema = check_value_type(key, arg, schema)


def check_value_type(key: str, arg: str, schema=None):
    """A value of the key's type (Hydra's own error for `collector.num_envs=two` is six lines and a
    hint about HYDRA_FULL_ERROR); each value of a sweep (`a=1,2,3`) too; interpolations are Hydra's.
    Returns the structured config it checked against, for the next key."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if "${" in arg:
        return schema
    try:
        parsed = OverridesParser.create().parse_override(arg)
    except Exception:  # Hydra's grammar: its own error says where
        return schema
    value = parsed.value()
    values = value.list if isinstance(value, ChoiceSweep) else [] if parsed.is_sweep_override() else [value]
    schema = OmegaConf.structured(Config) if schema is None else schema
    for one in values:
        try:
            OmegaConf.update(schema, key, one, merge=True)
        except OmegaConfBaseException as err:
            _check(False, key, str(err).splitlines()[0])
    return schema
