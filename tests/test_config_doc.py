"""docs/config.md is generated from the schema: a new key without a comment, or a stale file, fails."""
import dataclasses
import re

import pytest

from dreamer import config_doc
from dreamer.config import Config


def test_docs_config_md_matches_the_schema():
    assert config_doc.DOC.read_text() == config_doc.render(), \
        "docs/config.md is out of date: run `python -m dreamer.config_doc` and commit it"


def test_every_key_of_every_group_is_documented_with_a_comment():
    rows = re.findall(r"^\| `([a-z0-9_.]+)` \| [^|]*(?:\\\|[^|]*)* \| `[^`]*` \| (.*) \|$", config_doc.render(), re.M)
    documented = {key: text for key, text in rows}
    keys = [f"{group.name}.{f.name}" for group in dataclasses.fields(Config) if dataclasses.is_dataclass(
        group.default_factory() if group.default_factory is not dataclasses.MISSING else None)
        for f in dataclasses.fields(group.default_factory())]
    keys += [f.name for f in dataclasses.fields(Config) if f.default_factory is dataclasses.MISSING]
    assert len(keys) > 80
    missing = [k for k in keys if not documented.get(k, "").strip()]
    assert not missing, f"keys without a comment in the schema: {missing}"


def test_the_check_mode_fails_on_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "config.md"
    stale.write_text(config_doc.render().replace("learner.train_ratio", "learner.train_ratios"))
    monkeypatch.setattr(config_doc, "DOC", stale)
    monkeypatch.setattr(config_doc, "ROOT", tmp_path)
    try:
        config_doc.main(["--check"])
    except SystemExit as exit:
        assert "out of date" in str(exit.code)
    else:
        raise AssertionError("--check passed a stale file")


GROUPS = ("env", "collector", "world_model", "learner", "replay", "logger")


@pytest.mark.parametrize("group", GROUPS)
def test_group_presets_list_only_what_differs_from_the_schema(group):
    """One source of defaults: the schema's dataclasses; a preset yaml that repeats one of them
    would silently keep an old value when the schema's default changes."""
    import yaml

    from tests.conftest import ROOT

    field = next(f for f in dataclasses.fields(Config) if f.name == group)
    schema = dataclasses.asdict(field.default_factory())
    presets = sorted((ROOT / "conf" / group).glob("*.yaml"))
    assert presets
    for path in presets:
        data = yaml.safe_load(path.read_text()) or {}
        keys = [k for k in data if k != "defaults"]
        assert not [k for k in keys if k not in schema], f"{path.name}: keys the schema lacks"
        repeats = [k for k in keys if data[k] == schema[k]]
        assert not repeats, f"conf/{group}/{path.name} repeats the schema's defaults of {repeats}: drop them"
