"""`pbo_tf.operators.registry`'s entry-point group ``pbo_tf.operators``, in this process: distributions
written as bare ``dist-info`` folders on ``sys.path`` (what ``pip install`` leaves), their entry points loaded
once on the first lookup, a module entry point imported (its kind, built with the Q family, gin-configurable
under its own name) and a callable one called, and a broken one reported in one line naming its
distribution and entry point. tests/launch/test_external_env.py trains and reloads an installed package's
kind with the programs."""

import sys
import textwrap

import gin
import numpy as np
import pytest

from pbo_tf.operators import registry
from pbo_tf.operators.factory import make_pbo
from pbo_tf.q import FlatMLPQ


def _distribution(site, name, version, entry_points, modules=None):
    """A distribution ``name`` in the folder ``site``: its dist-info (METADATA and entry_points.txt) and
    ``modules`` (``{file name: source}``)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "\n".join(f"{key} = {value}" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{lines}\n")
    for file, source in (modules or {}).items():
        (site / file).write_text(textwrap.dedent(source))


REGISTERING = """
    import gin
    import tensorflow as tf

    from pbo_tf.operators import registry
    from pbo_tf.operators.base import PBO
    from pbo_tf.q import FlatMLPQ

    IMPORTS = [1]


    @registry.register("ep_last_layer", q_family=FlatMLPQ)
    @gin.configurable(denylist=["q_family"])
    class EpLastLayerPBO(PBO):
        \"\"\"Scales the last layer's block of ω by ``factor`` (read off the family's layout).\"\"\"

        def __init__(self, q_family, factor=1.0, **kwargs):
            super().__init__(q_family.d, **kwargs)
            self.start, self.factor = q_family.layout[-1].offset, float(factor)

        def apply(self, params):
            mask = tf.cast(tf.range(self.d) >= self.start, tf.float32)
            return params * (1.0 + (self.factor - 1.0) * mask)

        def get_config(self):
            return {"d": self.d, "factor": self.factor, "name": self.name}
    """
CALLABLE = """
    from pbo_tf.operators import registry
    from pbo_tf.operators.linear import build_linear

    CALLS = []

    def register_all():
        CALLS.append(1)
        registry.register("ep_callable_linear", build_linear)
    """


@pytest.fixture
def fresh_registry(monkeypatch, tmp_path):
    """The registry as in a new process (entry points not loaded yet), with ``tmp_path`` on ``sys.path``;
    the kinds the test adds are removed afterwards."""
    before = set(registry._KINDS)
    monkeypatch.setattr(registry, "_entry_points_state", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in set(registry._KINDS) - before:
        del registry._KINDS[name]


def test_entry_points_load_once_on_the_first_lookup(fresh_registry):
    _distribution(
        fresh_registry,
        "ep-operators",
        "0.4",
        {"modules": "ep_operators_registration", "callables": "ep_operators_callable:register_all"},
        {"ep_operators_registration.py": REGISTERING, "ep_operators_callable.py": CALLABLE},
    )
    assert "ep_last_layer" not in registry._KINDS  # nothing loaded before a lookup
    assert "ep_operators_registration" not in sys.modules
    assert registry.names()[:4] == ["linear", "deep", "structured", "oracle"]
    assert {"ep_last_layer", "ep_callable_linear"} <= set(registry.names())
    registry.load_entry_points()
    registry.kind("ep_last_layer")
    assert sys.modules["ep_operators_registration"].IMPORTS == [1]
    assert sys.modules["ep_operators_callable"].CALLS == [1]  # called once, not once per lookup

    # the package's kind through gin, its option bound on its own configurable
    gin.parse_config("make_pbo.kind = 'ep_last_layer'\nEpLastLayerPBO.factor = -2.0")
    q = FlatMLPQ(1, [2], [0.0, 1.0])  # (2 -> 2), (2 -> 1): d = 9, the last layer at 6..8
    pbo = make_pbo(None, q, name="pbo")
    assert type(pbo).__name__ == "EpLastLayerPBO" and pbo.start == 6 and pbo.name == "pbo"
    omega = np.arange(1, 10, dtype=np.float32)[None]
    np.testing.assert_array_equal(pbo(omega).numpy(), [[1, 2, 3, 4, 5, 6, -14, -16, -18]])


def test_a_broken_entry_point_is_one_line_naming_its_distribution_and_entry_point(fresh_registry):
    _distribution(fresh_registry, "broken-operators", "0.3", {"low_rank": "broken_operators_missing"})
    for lookup in (registry.names, lambda: registry.kind("linear"), lambda: make_pbo(None, None, kind="x")):
        with pytest.raises(registry.EntryPointError) as error:
            lookup()
        message = str(error.value).splitlines()[0]  # (gin appends the configurable make_pbo on a line)
        assert message == (
            "the pbo_tf.operators entry point 'low_rank = broken_operators_missing' of the distribution "
            "broken-operators 0.3 failed to load: ModuleNotFoundError: No module named "
            "'broken_operators_missing'"
        )


def test_an_entry_point_registering_a_taken_kind_names_both(fresh_registry):
    _distribution(
        fresh_registry,
        "clash-operators",
        "1.0",
        {"clash": "clash_operators"},
        {"clash_operators.py": "from pbo_tf.operators import registry\nregistry.register('deep', 'm:f')\n"},
    )
    expected = (
        r"'clash = clash_operators' of the distribution clash-operators 1.0 failed to load: ValueError: "
        r"operator kind 'deep' is already registered"
    )
    with pytest.raises(registry.EntryPointError, match=expected):
        registry.names()
