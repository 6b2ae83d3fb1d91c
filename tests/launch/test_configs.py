"""``pbo-configs``: every shipped gin file listed once with the first sentence of its opening comment."""

import os

from pbo_tf.cli import common, configs
from pbo_tf.experiments.config import GIN_CONFIGS_DIR


def test_every_shipped_config_is_listed_with_its_description(capsys):
    names = sorted(
        os.path.relpath(os.path.join(folder, f), GIN_CONFIGS_DIR).replace(os.sep, "/")
        for folder, _, files in os.walk(GIN_CONFIGS_DIR)
        for f in files
        if f.endswith(".gin")
    )
    assert [name for name, _ in configs.shipped_configs()] == names
    assert common.call_main(configs.run, configs.FLAGS, ["pbo-configs", "--filter=car_on_hill/"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Gin configs under {GIN_CONFIGS_DIR} (pass a name to pbo-train --gin_file):"
    listed = {line.split()[0]: line.split(None, 1)[1] for line in lines[1:]}
    assert listed["car_on_hill/fqi.gin"] == "FQI on car-on-hill."  # the file's first comment line
    # "(paper Sec. 6.1; ...)": an abbreviation does not end the sentence
    assert listed["car_on_hill/common.gin"] == "Car-on-hill (paper Sec. 6.1; appendix Table 1)."
    assert all(name.startswith("car_on_hill/") for name in listed)


def test_a_long_first_sentence_is_cut_and_a_filter_that_matches_nothing_is_one_line(tmp_path, capsys):
    (tmp_path / "a.gin").write_text("# " + "word " * 40 + "end.\n# More.\nK = 1\n")
    (tmp_path / "b.gin").write_text("K = 1  # no opening comment\n")
    listed = dict(configs.shipped_configs(str(tmp_path)))
    assert len(listed["a.gin"]) == configs.MAX_DESCRIPTION and listed["a.gin"].endswith("…")
    assert listed["b.gin"] == ""
    assert common.call_main(configs.run, configs.FLAGS, ["pbo-configs", "--filter=nothing_like_it"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pbo-configs: error: no shipped gin config's name contains 'nothing_like_it'"]
