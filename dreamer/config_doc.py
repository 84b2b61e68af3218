"""The configuration reference (docs/config.md), generated from the schema so that it cannot drift.

    python -m dreamer.config_doc            # writes docs/config.md
    python -m dreamer.config_doc --check    # exit 1 if docs/config.md differs from the schema

Every key of every group (the dataclasses in dreamer/config/groups.py and dreamer/config/env.py): its
type, default and the comment written beside it (or on the lines just above it) in the schema's
source, then the presets of the group (conf/<group>/*.yaml) with each file's first comment line.
tests/test_config_doc.py fails when the file and the schema disagree.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import io
import sys
import tokenize
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "config.md"
GROUPS = ("env", "collector", "world_model", "learner", "replay", "logger", "eval", "checkpoint")


def field_comments(cls: type) -> dict[str, str]:
    """{field: its comment}: the comment ending the field's line, else the comment lines right above it."""
    source = inspect.getsource(cls)
    comments, above, names = {}, [], {f.name for f in dataclasses.fields(cls)}
    lines = source.splitlines()
    line_comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            line_comments[tok.start[0]] = tok.string.lstrip("#").strip()
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(line_comments.get(number, ""))
            continue
        name = stripped.split(":", 1)[0].strip() if ":" in stripped else None
        if name in names and line.startswith("    ") and not line.startswith("     "):
            text = line_comments.get(number) or " ".join(above)
            comments[name] = text
        above = [] if not stripped.startswith("#") else above
    return comments


def type_name(tp) -> str:
    if isinstance(tp, str):
        return tp.replace("typing.", "")
    if typing.get_origin(tp) is typing.Union:
        args = [type_name(a) for a in typing.get_args(tp) if a is not type(None)]
        return f"{' | '.join(args)} | null"
    if typing.get_origin(tp) in (list, typing.List):
        return f"list[{type_name(typing.get_args(tp)[0])}]"
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def default_of(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else str(value)


def presets(group: str) -> list[tuple[str, str]]:
    """(name, the file's leading comment paragraph) of each preset of the group."""
    rows = []
    for path in sorted((ROOT / "conf" / group).glob("*.yaml")):
        words = []
        for line in path.read_text().splitlines():
            if "@package" in line:
                continue
            if not line.startswith("#") or not line.lstrip("#").strip():
                break
            words.append(line.lstrip("#").strip())
        rows.append((path.stem, " ".join(words)))
    return rows


def escape(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    from dreamer.config import Config

    hints = typing.get_type_hints(Config)
    out = ["# Configuration reference", "",
           "Generated from the schema by `python -m dreamer.config_doc` (do not edit by hand: "
           "`tests/test_config_doc.py` fails when this file and the schema disagree). Every key can be "
           "set on the command line, e.g. `python train.py learner.train_ratio=256`; a preset of a group "
           "sets several at once, e.g. `python train.py env=dmc_cheetah_run`. Values are checked at "
           "start-up: a bad one stops the run within seconds, naming the key "
           "([troubleshooting](troubleshooting.md)).", ""]
    top = [f for f in dataclasses.fields(Config) if f.name not in GROUPS]
    for group in GROUPS:
        cls = hints[group]
        comments = field_comments(cls)
        out += [f"## `{group}`", ""]
        doc = inspect.getdoc(cls)
        if doc and not doc.startswith(cls.__name__ + "("):
            out += [" ".join(doc.split()), ""]
        out += ["| key | type | default | what it does |", "|---|---|---|---|"]
        field_hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            out.append(f"| `{group}.{f.name}` | {escape(type_name(field_hints[f.name]))} | `{default_of(f)}` "
                       f"| {escape(comments.get(f.name, ''))} |")
        rows = presets(group)
        if rows:
            out += ["", f"Presets (`{group}=NAME`, files in `conf/{group}/`):", ""]
            out += [f"- `{name}`: {escape(text)}" if text else f"- `{name}`" for name, text in rows]
        out.append("")
    comments = field_comments(Config)
    out += ["## Top level", "", "| key | type | default | what it does |", "|---|---|---|---|"]
    for f in top:
        out.append(f"| `{f.name}` | {escape(type_name(hints[f.name]))} | `{default_of(f)}` "
                   f"| {escape(comments.get(f.name, ''))} |")
    out += ["", "## Experiment presets", "",
            "`experiment=NAME` sets keys of several groups at once (files in `conf/experiment/`):", ""]
    out += [f"- `{name}`: {escape(text)}" if text else f"- `{name}`" for name, text in presets("experiment")]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/config.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.exists() or DOC.read_text() != text:
            sys.exit(f"error: {DOC.relative_to(ROOT)} is out of date with the schema; "
                     "run `python -m dreamer.config_doc` and commit it")
        print(f"{DOC.relative_to(ROOT)} matches the schema")
        return
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
