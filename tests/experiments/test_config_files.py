"""Finding gin files: a config by its path or by its name under the shipped configs, ``include`` lines
resolved by pbo_tf (not by gin's search, which logs an ERROR "Path not found" for each place it tries in
vain), from any working folder."""

import logging
import os
import pathlib

import gin
import pytest

from pbo_tf.experiments.config import (
    GIN_CONFIGS_DIR,
    GinConfigError,
    find_include,
    macros,
    parse_config,
    resolve_gin_file,
)

PROFQI = os.path.join(GIN_CONFIGS_DIR, "chain_walk", "profqi.gin")


def test_a_config_is_found_by_its_path_or_its_name_under_the_shipped_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_gin_file(PROFQI) == PROFQI
    assert resolve_gin_file("chain_walk/profqi.gin") == PROFQI
    assert resolve_gin_file("gin_configs/chain_walk/profqi.gin") == PROFQI  # as the docs write it
    (tmp_path / "chain_walk").mkdir()
    (tmp_path / "chain_walk" / "profqi.gin").write_text("K = 1\n")
    assert resolve_gin_file("chain_walk/profqi.gin") == "chain_walk/profqi.gin"  # a path comes first
    with pytest.raises(FileNotFoundError, match=r"gin file 'chain_walk/nope.gin' does not exist"):
        resolve_gin_file("chain_walk/nope.gin")
    with pytest.raises(GinConfigError, match="is a folder"):
        resolve_gin_file("chain_walk")


def test_a_name_resolved_against_the_shipped_configs_is_said_in_one_line(tmp_path, monkeypatch):
    """A name that is not a file here but a shipped config: one line names the file used; a path that is a
    file as given, nothing."""
    monkeypatch.chdir(tmp_path)
    said = []
    assert resolve_gin_file("chain_walk/profqi.gin", log=said.append) == PROFQI
    assert said == [f"gin file 'chain_walk/profqi.gin' is not a file here: using the shipped config {PROFQI}"]
    said.clear()
    parse_config([PROFQI], log=said.append)
    assert said == []
    parse_config(["gin_configs/chain_walk/fqi.gin"], log=said.append)
    assert len(said) == 1 and said[0].endswith(os.path.join(GIN_CONFIGS_DIR, "chain_walk", "fqi.gin"))


def test_includes_are_resolved_without_gin_logging_a_miss(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)  # no chain_walk/ here: gin's own search would miss it first
    with caplog.at_level(logging.DEBUG):
        parse_config(["chain_walk/profqi_inf.gin"], ["K=3"])  # includes profqi.gin, which includes common
    assert macros()["K"] == 3 and gin.query_parameter("Experiment.algorithm").selector == "ProFQI"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_a_users_config_folder_includes_its_own_files_first(tmp_path, monkeypatch):
    shipped = pathlib.Path(GIN_CONFIGS_DIR, "chain_walk")
    (tmp_path / "mine" / "chain_walk").mkdir(parents=True)
    common = tmp_path / "mine" / "chain_walk" / "common.gin"
    common.write_text((shipped / "common.gin").read_text() + "K = 7\n")
    user = tmp_path / "mine" / "chain_walk" / "fqi.gin"
    user.write_text((shipped / "fqi.gin").read_text())
    monkeypatch.chdir(tmp_path)
    assert find_include("chain_walk/common.gin", str(user)) == str(common)
    parse_config([str(user)])
    assert macros()["K"] == 7
    bad = tmp_path / "bad.gin"
    bad.write_text("include 'nowhere/common.gin'\n")
    with pytest.raises(GinConfigError, match=r"includes 'nowhere/common.gin', which is in none of"):
        parse_config([str(bad)])
    loop = tmp_path / "loop.gin"
    loop.write_text("include 'loop.gin'\n")
    with pytest.raises(GinConfigError, match="includes itself"):
        parse_config([str(loop)])


def test_an_error_in_an_included_file_names_that_file(tmp_path):
    (tmp_path / "common.gin").write_text("K = 2\nNoSuchThing.x = 1\n")
    top = tmp_path / "top.gin"
    top.write_text("# top\ninclude 'common.gin'\nEXTRA = 1\n")
    with pytest.raises(GinConfigError, match=r"common.gin' \(included by '.*top.gin'\): No configurable"):
        parse_config([str(top)])
