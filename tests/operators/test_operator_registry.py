"""`pbo_tf.operators.registry`: the built-in kinds, a plug-in kind registered here and built by `make_pbo`
through gin with the Q family (whose flat layout it reads), the common arguments a builder receives, and
the one-line errors (unknown kind, another Q family, no problem, a deep option, a taken name)."""

import inspect
import json
import os
import subprocess
import sys

import gin
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from pbo_tf.cli.common import describe
from pbo_tf.envs.chain_walk.problem import ChainWalkProblem
from pbo_tf.operators import LinearPBO, registry
from pbo_tf.operators.base import PBO
from pbo_tf.operators.conv import ConvPBO, build_conv
from pbo_tf.operators.equivariant import EquivariantPBO, build_equivariant
from pbo_tf.operators.factory import make_pbo
from pbo_tf.q import FlatMLPQ, TableQ

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MLP = FlatMLPQ(2, [3], [-1.0, 1.0])  # layers (3 -> 3), (3 -> 1): d = 9 + 3 + 3 + 1 = 16


@gin.configurable(denylist=["q_family", "init_std", "seed"])
class LayerScalePBO(PBO):
    """``Λ(ω)`` scales each Dense layer's block of ``ω`` (kernel and bias) by its own learned factor
    ``a_l`` (initialised to ``scale``) and adds ``init_std`` to every coordinate: it reads the family's
    layout."""

    def __init__(self, q_family, scale: float = 1.0, init_std: float = 0.0, seed=None, **kwargs):
        super().__init__(q_family.d, **kwargs)
        self.layout = q_family.layout
        self.scale, self.init_std, self.seed = float(scale), float(init_std), seed
        self.factors = self.add_weight(
            name="factors",
            shape=[len(self.layout)],
            initializer=tf_keras.initializers.Constant(self.scale),
        )

    def apply(self, params):
        sizes = [layer.size for layer in self.layout]
        blocks = tf.split(params, sizes, axis=-1)
        return tf.concat([b * self.factors[i] for i, b in enumerate(blocks)], axis=-1) + self.init_std

    def get_config(self):
        return {"d": self.d, "scale": self.scale, "init_std": self.init_std, "name": self.name}


@pytest.fixture
def layer_scale():
    """``layer_scale`` registered (needs a FlatMLPQ family), removed afterwards."""
    registry.register("layer_scale", LayerScalePBO, q_family=FlatMLPQ)
    yield
    registry.unregister("layer_scale")


def test_the_built_in_kinds_are_registered_in_order():
    assert registry.names()[:4] == ["linear", "deep", "structured", "oracle"]
    assert registry.names(needs_problem=True)[:2] == ["structured", "oracle"]
    assert registry.kind("deep").options == registry.DEEP_OPTIONS
    assert registry.kind("linear").options == ()


def test_the_registry_alone_lists_every_built_in_kind():
    """A new process that imports only the registry lists the kinds it lists once `pbo_tf.operators.factory`
    (which makes the conv and equivariant builders' gin configurables) is imported, every built-in one
    (`factory.PBO_KINDS`) among them; the factory is imported when such a builder is first loaded."""
    code = (
        "import json, sys\n"
        "from pbo_tf.operators import registry\n"
        "alone = registry.names()\n"
        "assert 'pbo_tf.operators.factory' not in sys.modules and 'gin' not in sys.modules\n"
        "conv = registry.kind('conv').load_builder()\n"
        "from pbo_tf.operators import factory\n"
        "assert conv is factory.conv_builder\n"
        "print(json.dumps([alone, registry.names(), list(factory.PBO_KINDS)]))\n"
    )
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    alone, with_factory, built_in = json.loads(out.stdout.splitlines()[-1])
    assert alone == with_factory
    assert alone[: len(built_in)] == built_in  # the built-in kinds first, in registration order
    assert {"conv", "equivariant"} <= set(built_in)


def _shown(error) -> str:
    """The one line a program prints for ``error`` (`pbo_tf.cli.common.describe`, exit code 2)."""
    code, message = describe(error.value)
    assert code == 2 and "\n" not in message
    return message


def _layer_scale(omega, factors, added):
    """`LayerScalePBO` on `MLP` in NumPy: blocks [0, 12) and [12, 16) scaled, ``added`` added."""
    omega = np.asarray(omega, np.float64)
    return np.concatenate([factors[0] * omega[:, :12], factors[1] * omega[:, 12:]], axis=1) + added


def test_the_flat_layout_reaches_the_operator_built_through_gin(layer_scale):
    gin.parse_config("make_pbo.kind = 'layer_scale'\nmake_pbo.init_std = 0.5\nLayerScalePBO.scale = 2.0")
    pbo = make_pbo(None, MLP, name="pbo", seed=3)
    assert isinstance(pbo, LayerScalePBO) and pbo.name == "pbo" and pbo.seed == 3
    assert pbo.layout == [((3, 3), (3,), 0), ((3, 1), (1,), 12)]
    np.testing.assert_array_equal(pbo.factors.numpy(), [2.0, 2.0])  # LayerScalePBO.scale
    pbo.factors.assign([2.0, -3.0])
    omega = np.arange(32, dtype=np.float32).reshape(2, 16) / 10
    once = _layer_scale(omega, [2.0, -3.0], 0.5)  # make_pbo.init_std is the added constant
    np.testing.assert_allclose(pbo(omega).numpy(), once, rtol=1e-6)
    chain = pbo.iterate(omega, 2).numpy()
    np.testing.assert_allclose(chain[2], _layer_scale(once, [2.0, -3.0], 0.5), rtol=1e-6)


def test_a_kind_needing_an_mlp_family_refuses_another_in_one_line(layer_scale):
    with pytest.raises(ValueError) as error:
        make_pbo(None, TableQ(4, 2), kind="layer_scale")
    assert _shown(error) == "make_pbo: kind='layer_scale' needs a FlatMLPQ Q family, got TableQ"


def test_a_deep_option_given_to_a_plug_in_kind_is_refused(layer_scale):
    with pytest.raises(ValueError) as error:
        make_pbo(None, MLP, kind="layer_scale", activation="silu")
    assert _shown(error) == "make_pbo.activation is an option of the deep PBO, not of kind='layer_scale'"
    # the deep sizes are left aside (a gin file may switch the kind of a deep one), as for the built-ins
    assert isinstance(make_pbo(None, MLP, kind="layer_scale", hidden_multiples=[2, 2]), LayerScalePBO)
    assert isinstance(make_pbo(None, MLP, kind="linear", hidden_units=[8]), LinearPBO)


def test_an_unknown_kind_is_one_line_naming_every_registered_kind(layer_scale):
    with pytest.raises(ValueError) as error:
        make_pbo(None, MLP, kind="low_rank")
    message = _shown(error)
    assert message.startswith(
        "make_pbo: unknown PBO kind 'low_rank'; known kinds: "
        "['linear', 'deep', 'structured', 'oracle', 'conv', 'equivariant', 'layer_scale']"
    )
    assert message.endswith("entry point, or with --import=<the module that registers them>)")


def test_a_kind_needing_a_problem_is_refused_online_naming_the_online_kinds(layer_scale):
    oracle = lambda q_family, problem: problem.oracle_pbo(q_family)  # noqa: E731
    registry.register("needs_walk", oracle, needs_problem=True)
    try:
        with pytest.raises(ValueError) as error:
            make_pbo(None, TableQ(20, 2), kind="needs_walk")
        assert _shown(error) == (
            "make_pbo: kind='needs_walk' needs an offline problem; the kinds of online runs: "
            "['linear', 'deep', 'conv', 'equivariant', 'layer_scale']"
        )
        problem = ChainWalkProblem()
        oracle = make_pbo(problem, problem.q_family(), kind="needs_walk")
        # the oracle of the chain-walk: Λ(0) is the expected reward R(s, a) (reward 1 at both chain ends)
        reward = oracle(np.zeros([1, 40], np.float32)).numpy()[0]
        assert reward.shape == (40,) and 0 < reward.max() <= 1.0 and reward.min() == 0.0
    finally:
        registry.unregister("needs_walk")


def test_a_builder_receives_the_common_arguments_its_signature_names():
    calls = []

    def only_seed(q_family, seed):
        calls.append(("only_seed", q_family.d, seed))
        return LinearPBO(q_family.d)

    def every(q_family, *, problem, init_std, seed, name, w_set, width=1):
        calls.append(("every", problem, init_std, seed, name, None if w_set is None else w_set.shape, width))
        return LinearPBO(q_family.d, name=name)

    registry.register("only_seed", only_seed)
    registry.register("every", every, options=("width",))
    try:
        q, w = TableQ(2, 2), np.zeros([5, 4], np.float32)
        registry.build("only_seed", q, init_std=0.1, seed=7, name="x", w_set=w)
        assert make_pbo("p", q, kind="every", init_std=0.25, seed=2, name="pbo", w_set=w).name == "pbo"
        registry.build("every", q, width=3)
        with pytest.raises(ValueError, match=r"^kind='only_seed' takes no option 'width'; its options: \[\]"):
            registry.build("only_seed", q, width=3)
    finally:
        registry.unregister("only_seed")
        registry.unregister("every")
    assert calls == [
        ("only_seed", 4, 7),
        ("every", "p", 0.25, 2, "pbo", (5, 4), 1),
        ("every", None, 5e-6, None, None, None, 3),
    ]


def test_a_builder_raising_not_implemented_means_the_problem_has_no_such_operator():
    def missing(q_family, problem):
        raise NotImplementedError(f"{problem} has no low-rank PBO")

    registry.register("missing", missing, needs_problem=True)
    try:
        with pytest.raises(ValueError) as error:
            make_pbo("toy_walk", TableQ(2, 2), kind="missing")
    finally:
        registry.unregister("missing")
    assert _shown(error) == (
        "make_pbo: kind='missing': toy_walk has no low-rank PBO; the kinds every problem has: "
        "['linear', 'deep', 'conv', 'equivariant']"
    )


def test_register_as_a_decorator_and_with_a_lazy_reference():
    @registry.register("decorated")
    class Decorated(LinearPBO):
        def __init__(self, q_family, **kwargs):
            super().__init__(q_family.d, **kwargs)

    registry.register("lazy_linear", "pbo_tf.operators.linear:build_linear")
    try:
        assert registry.kind("decorated").builder is Decorated
        pbo = make_pbo(None, TableQ(3, 2), kind="decorated", name="dec")
        assert type(pbo) is Decorated and pbo.name == "dec" and pbo.d == 6
        lazy = make_pbo(None, TableQ(3, 2), kind="lazy_linear", init_std=1e-3, seed=1)
        direct = make_pbo(None, TableQ(3, 2), kind="linear", init_std=1e-3, seed=1)
        lazy.ensure_built()
        direct.ensure_built()
        for a, b in zip(lazy.get_weights(), direct.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
    finally:
        registry.unregister("decorated")
        registry.unregister("lazy_linear")


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (("linear", LinearPBO), {}, "operator kind 'linear' is already registered: OperatorKind("),
        (("Low-Rank", LinearPBO), {}, "operator kind 'Low-Rank' must be a lower-case identifier"),
        (("lazy", "no_colon"), {}, "builder='no_colon' must be a lazy reference 'package.module:Name'"),
        (("odd", 3), {}, "the builder of operator kind 'odd' is not callable: int"),
        (("odd", LinearPBO), {"q_family": "FlatMLPQ"}, "q_family of operator kind 'odd' must be a class"),
    ],
)
def test_bad_registrations_are_one_line_errors(args, kwargs, message):
    with pytest.raises(ValueError) as error:
        registry.register(*args, **kwargs)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert "odd" not in registry.names() and "lazy" not in registry.names()


def _options(function, skip):
    """A callable's named parameters with their defaults, less ``skip`` and ``**kwargs``."""
    parameters = inspect.signature(function).parameters.values()
    return {p.name: p.default for p in parameters if p.name not in skip and p.kind is not p.VAR_KEYWORD}


@pytest.mark.parametrize(
    "builder, operator, own",
    [(build_equivariant, EquivariantPBO, {"w_set"}), (build_conv, ConvPBO, set())],
    ids=["equivariant", "conv"],
)
def test_a_kinds_builder_takes_every_option_of_its_operator_with_the_same_default(builder, operator, own):
    # gin checks ``EquivariantPBO.*`` / ``ConvPBO.*`` bindings against the builder's signature, so an
    # option the operator gains and its builder lacks cannot be bound, and a default that differs would
    # make a gin run and a direct construction disagree.
    builder_options = _options(builder, {"q_family", "name", *own})
    assert builder_options == _options(operator.__init__, {"self", "q_family", "d"})


def test_the_equivariant_builder_passes_every_option_to_the_operator():
    options = dict(
        channels=[3, 2],
        activation="silu",
        residual=True,
        standardise=False,
        init_std=0.02,
        unroll_chain=True,
        probes=2,
        mix_fixed_units=True,
        centre_hidden=True,
    )
    assert set(options) | {"seed"} == set(_options(EquivariantPBO.__init__, {"self", "q_family"}))
    config = build_equivariant(MLP, seed=3, name="eq", **options).get_config()
    assert {key: config[key] for key in options} == options
    assert config["name"] == "eq"
    conv = build_conv(MLP, channels=[4], kernel_size=5, init_std=0.5, seed=1, name="cv").get_config()
    assert (conv["channels"], conv["kernel_size"], conv["init_std"], conv["name"]) == ([4], 5, 0.5, "cv")
