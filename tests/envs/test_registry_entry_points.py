"""`pbo_tf.envs.registry`'s entry-point group ``pbo_tf.envs``, in this process: distributions written as
bare ``dist-info`` folders on ``sys.path`` (what ``pip install`` leaves), their entry points loaded once on
the first lookup, a module entry point imported and a callable one called, and a broken one reported in
one line naming its distribution and entry point. `Problem.env_id` and `Problem.gym_kwargs` too.

tests/launch/test_external_env.py installs a real package and runs the programs on it."""

import textwrap

import pytest

from pbo_tf.envs import registry
from pbo_tf.envs.base import Problem


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
    from pbo_tf.envs import registry

    IMPORTS = [1]
    registry.register("ep_module_env", problem="ep_envs_problem:P")
    """
CALLABLE = """
    from pbo_tf.envs import registry

    CALLS = []

    def register_all():
        CALLS.append(1)
        registry.register("ep_callable_env", online="ep_envs_online:O", gym_id="ep/Callable-v0")
    """


@pytest.fixture
def fresh_registry(monkeypatch, tmp_path):
    """The registry as in a new process (entry points not loaded yet), with ``tmp_path`` on ``sys.path``;
    the entries the test adds are removed afterwards."""
    before = set(registry._ENTRIES)
    monkeypatch.setattr(registry, "_entry_points_state", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in set(registry._ENTRIES) - before:
        del registry._ENTRIES[name]
        registry.ENV_IDS.pop(name, None)


def test_entry_points_load_once_on_the_first_lookup(fresh_registry):
    import sys

    _distribution(
        fresh_registry,
        "ep-envs",
        "1.2",
        {"modules": "ep_envs_registration", "callables": "ep_envs_callable:register_all"},
        {"ep_envs_registration.py": REGISTERING, "ep_envs_callable.py": CALLABLE},
    )
    assert "ep_module_env" not in registry._ENTRIES  # nothing loaded before a lookup
    assert "ep_envs_registration" not in sys.modules
    assert registry.names("problem").count("ep_module_env") == 1
    assert registry.names("online").count("ep_callable_env") == 1
    assert registry.entry("ep_callable_env").gym_id == "ep/Callable-v0"
    assert {"chain_walk", "lqr", "car_on_hill", "bicycle"} <= set(registry.names("problem"))
    registry.load_entry_points()
    registry.names()
    assert sys.modules["ep_envs_registration"].IMPORTS == [1]
    assert sys.modules["ep_envs_callable"].CALLS == [1]  # called once, not once per lookup


def test_a_broken_entry_point_is_one_line_naming_its_distribution_and_entry_point(fresh_registry):
    _distribution(fresh_registry, "broken-envs", "0.3", {"walk": "broken_envs_missing_module"})
    for lookup in (registry.names, lambda: registry.entry("chain_walk"), lambda: registry.make_problem("x")):
        with pytest.raises(registry.EntryPointError) as error:
            lookup()
        message = str(error.value)
        assert "\n" not in message
        assert message == (
            "the pbo_tf.envs entry point 'walk = broken_envs_missing_module' of the distribution broken-envs "
            "0.3 failed to load: ModuleNotFoundError: No module named 'broken_envs_missing_module'"
        )


def test_an_entry_point_registering_a_taken_name_names_both(fresh_registry):
    _distribution(
        fresh_registry,
        "clash-envs",
        "1.0",
        {"clash": "clash_envs"},
        {"clash_envs.py": "from pbo_tf.envs import registry\nregistry.register('lqr', problem='m:P')\n"},
    )
    expected = (
        r"'clash = clash_envs' of the distribution clash-envs 1.0 failed to load: ValueError: environment "
        r"'lqr' is already registered"
    )
    with pytest.raises(registry.EntryPointError, match=expected):
        registry.names()


def test_unknown_names_say_how_another_package_is_found():
    with pytest.raises(ValueError) as error:
        registry.make_problem("no_such_env")
    assert str(error.value).startswith("unknown environment 'no_such_env'; known environments: [")
    assert str(error.value).endswith(
        "(another package's environments are found through its 'pbo_tf.envs' entry point, or with "
        "--import=<the module that registers them>)"
    )


class _Plain(Problem):
    name = "chain_walk"


class _NoGym(Problem):
    name = "not_registered_anywhere"


class _Overridden(Problem):
    name = "chain_walk"

    @property
    def env_id(self):
        return "my/Own-v1"


def test_problem_env_id_is_the_registry_gym_id_unless_overridden():
    assert _Plain().env_id == "pbo_tf/ChainWalk-v0"
    assert _Plain().gym_kwargs() == {}
    assert _NoGym().env_id is None
    assert _Overridden().env_id == "my/Own-v1"
    instance = _Plain()
    instance.env_id = None  # an instance may say it has none
    assert instance.env_id is None and _Plain().env_id == "pbo_tf/ChainWalk-v0"
    from pbo_tf.envs.chain_walk.problem import ChainWalkProblem

    walk = ChainWalkProblem(n_states=7, success_prob=0.8, gamma=0.5)
    assert walk.gym_kwargs() == {"n_states": 7, "success_prob": 0.8, "gamma": 0.5}


def test_a_registered_module_that_fails_to_import_names_its_environment(fresh_registry):
    (fresh_registry / "ep_envs_failing.py").write_text("import a_dependency_nobody_installed\n")
    registry.register("ep_failing_env", problem="ep_envs_failing:P")
    with pytest.raises(registry.EnvironmentImportError) as error:
        registry.import_modules("problem")
    assert str(error.value) == (
        "the problem module 'ep_envs_failing' of the environment 'ep_failing_env' failed to import: "
        "ModuleNotFoundError: No module named 'a_dependency_nobody_installed'"
    )
