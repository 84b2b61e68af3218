"""docs/config.md is generated from the schema: a new key without a comment, or a stale file, fails."""
import dataclasses
import re

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
