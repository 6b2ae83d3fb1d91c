"""What the benchmark and the XLA export both measure: the problem sizes, their analytic costs and the
library objects built at those sizes.

The sizes are the paper's (`CAR_ON_HILL`, `LUNAR_LANDER`): car-on-hill ProFQI (K = 9, d = 151, |W| = 30 in one
batch, 5 500 transitions in batches of 500, 10 passes per refresh, deep PBO [2, 2, 2, 2]) and Lunar Lander
ProDQN (K = 10, d = 1261, |W| = 30 in batches of 15, replay batches of 500 transitions, deep PBO
[2, 2, 2, 2]), on synthetic transitions; ``*_TOY`` are the same structures at toy sizes, for the tests.
Everything here goes through the library's public API.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

#: Whether the objects built here compile with XLA where asked to (``jit`` True or ``"round"``). The
#: benchmark's ``--toy`` run turns it off, every program in graph mode: at toy sizes XLA's compilation is
#: most of the run, the toy run checks that the cases run and report, and the XLA programs themselves are
#: tested in tests/trainers and tests/agents.
XLA = True


def _jit(jit):
    """``jit`` where `XLA` is on, else False (graph mode)."""
    return jit if XLA else False


# ------------------------------------------------------------------------------------------------ sizes
@dataclass(frozen=True)
class Sizes:
    """A PBO problem's sizes: its Q network, W, the deep PBO and the data of one Adam step.

    Attributes:
      state_dim: the state's dimension; the Q network's input is the state and the action's value.
      hidden: the Q network's hidden widths.
      n_actions: the number of actions.
      K: Bellman iterations of the loss.
      n_w: |W|.
      w_batch: rows of W per Adam step.
      batch: transitions per Adam step.
      n_transitions: the dataset (offline: its Bellman targets are computed once per refresh).
      passes: passes over the dataset per refresh (offline: the paper's training steps).
      pbo_multiples: the deep PBO's hidden widths, in multiples of d.
      gamma: the discount factor.
    """

    state_dim: int
    hidden: tuple[int, ...]
    n_actions: int
    K: int
    n_w: int
    w_batch: int
    batch: int
    n_transitions: int
    passes: int
    pbo_multiples: tuple[int, ...] = (2, 2, 2, 2)
    gamma: float = 0.95

    @property
    def q_sizes(self) -> list[int]:
        """The Q network's layers: ``(s, a) → hidden → Q``."""
        return [self.state_dim + 1, *self.hidden, 1]

    @property
    def d(self) -> int:
        """The Q network's parameters."""
        return mlp_params(self.q_sizes)

    @property
    def pbo_sizes(self) -> list[int]:
        """The deep PBO's layers: ``d → m·d … → d``."""
        return [self.d, *(m * self.d for m in self.pbo_multiples), self.d]

    @property
    def w_batches(self) -> int:
        """W batches, one Adam step each: ``ceil(|W| / w_batch)``."""
        return math.ceil(self.n_w / self.w_batch)

    @property
    def batches_per_pass(self) -> int:
        """Batches of one pass over the dataset (the last partial one is dropped)."""
        return self.n_transitions // self.batch


CAR_ON_HILL = Sizes(
    state_dim=2, hidden=(30,), n_actions=2, K=9, n_w=30, w_batch=30, batch=500, n_transitions=5500, passes=10
)
CAR_ON_HILL_TOY = Sizes(
    state_dim=2, hidden=(3,), n_actions=2, K=2, n_w=4, w_batch=4, batch=20, n_transitions=60, passes=2
)
LUNAR_LANDER = Sizes(
    state_dim=8, hidden=(30, 30), n_actions=4, K=10, n_w=30, w_batch=15, batch=500, n_transitions=500,
    passes=1, gamma=0.99,
)  # fmt: skip
LUNAR_LANDER_TOY = Sizes(
    state_dim=8, hidden=(4,), n_actions=4, K=3, n_w=6, w_batch=3, batch=16, n_transitions=16, passes=1,
    gamma=0.99,
)  # fmt: skip


# --------------------------------------------------------------------------------------- analytic costs
def mlp_flops(sizes, rows):
    """FLOPs of a dense MLP of layer ``sizes`` on ``rows`` rows (multiply-adds count 2)."""
    return sum(2 * rows * i * o for i, o in zip(sizes[:-1], sizes[1:], strict=True))


def mlp_params(sizes):
    """Weights and biases of a dense MLP of layer ``sizes``."""
    return sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:], strict=True))


def pbo_loss_step_flops(K, pbo_sizes, q_sizes, n_actions, w_rows, batch, *, targets=True, chain=True):
    """FLOPs of one Adam step on `pbo_tf.losses.pbo_loss` for ``w_rows`` rows of W and ``batch``
    transitions: the prediction chain ``Λ_φ^k(ω)``, k = 1..K, forward and backward (≈ 3× forward) and Q at
    its K outputs on the batch, forward and backward; with ``targets``, the Bellman targets (Q of the target
    chain at every action of the next states, ``K·w_rows·batch·|A|`` evaluations); with ``chain``, the
    target chain ``Λ̄^{k−1}(ω)`` itself (K − 1 applications). The reference implementation does all four
    at every step. Adam's element-wise update and the gathers are not counted.

    Every term is proportional to ``w_rows``: the work on all of W in batches is the work on all of W."""
    pbo = mlp_flops(pbo_sizes, w_rows)
    q = mlp_flops(q_sizes, 1)
    flops = 3 * K * pbo + 3 * K * w_rows * batch * q
    if targets:
        flops += K * w_rows * batch * n_actions * q
    if chain:
        flops += (K - 1) * pbo
    return flops


def profqi_refresh_flops(sizes: Sizes, adam_steps: int) -> int:
    """FLOPs of one call of `ProFQITrainer`'s compiled refresh with cached targets (the default): the target
    chain of all of W (K − 1 applications), its Bellman targets on the whole dataset (``K·|W|·N·|A|`` Q
    evaluations), then ``adam_steps`` Adam steps that gather their targets."""
    s = sizes
    chain = (s.K - 1) * mlp_flops(s.pbo_sizes, s.n_w)
    targets = s.K * s.n_w * s.n_transitions * s.n_actions * mlp_flops(s.q_sizes, 1)
    step = pbo_loss_step_flops(
        s.K, s.pbo_sizes, s.q_sizes, s.n_actions, s.w_batch, s.batch, targets=False, chain=False
    )
    return chain + targets + adam_steps * step


def prodqn_train_step_flops(sizes: Sizes, cache_target_chain=True, policy_refresh=False) -> int:
    """FLOPs of one `ProDQNAgent.train` call (a training step): one Adam step per W batch on the same replay
    batch, each computing its Bellman targets, and its target chain unless ``cache_target_chain`` (then
    gathered from the chain the last refresh computed); with ``policy_refresh``, the policies' cached
    ``Λ_φ^K(ω_0)`` after the last Adam step (K one-row applications). Summed over the W batches this is
    `pbo_loss_step_flops` on all of W."""
    s = sizes
    flops = pbo_loss_step_flops(
        s.K, s.pbo_sizes, s.q_sizes, s.n_actions, s.n_w, s.batch, targets=True, chain=not cache_target_chain
    )
    return flops + (s.K * mlp_flops(s.pbo_sizes, 1) if policy_refresh else 0)


def step_weight_bytes(K, pbo_sizes, bytes_per_value=4):
    """Bytes one Adam step of ProDQN (cached target chain) moves over the operator's weights when they do not
    fit in the last-level cache (Lunar Lander: 102 MB of fp32). Each of the K prediction-chain
    applications reads the weights forward and again backward (the input's gradient); `DeepPBO.chain`'s
    backward pass then writes each weight gradient once, from one product over all K applications; Adam
    reads weights, gradient and both moments and writes weights and moments. So 2K + 8 passes; the
    activations (15 rows) are small beside the weights."""
    return (2 * K + 8) * mlp_params(pbo_sizes) * bytes_per_value


# ------------------------------------------------------------------------------------------ the objects
def synthetic_transitions(rng, n, state_low, state_high, n_actions):
    """``n`` random transitions in the box ``[state_low, state_high]``: small moves, rewards 0 / ±1 and 5%
    terminal, enough to give the losses the real shapes and non-trivial values."""
    from pbo_tf.data.transitions import Transitions

    states = rng.uniform(state_low, state_high, size=(n, len(state_low)))
    nxt = states + rng.normal(0, 0.05, states.shape) * (np.asarray(state_high) - np.asarray(state_low))
    return Transitions.from_arrays(
        states, rng.integers(0, n_actions, n), rng.choice([0.0, 1.0, -1.0], n, p=[0.9, 0.05, 0.05]),
        np.clip(nxt, state_low, state_high), rng.random(n) < 0.05,
    )  # fmt: skip


def car_on_hill_data(seed, n=500):
    """Synthetic car-on-hill transitions (position in [-1, 1], speed in [-3, 3], two actions)."""
    return synthetic_transitions(np.random.default_rng(seed), n, [-1, -3], [1, 3], 2)


def car_on_hill_q(sizes: Sizes = CAR_ON_HILL):
    """The car-on-hill Q family: state 2, hidden layers ``sizes.hidden`` (the paper's: one of 30, d = 151),
    actions ±1."""
    from pbo_tf.q import FlatMLPQ

    return FlatMLPQ(2, list(sizes.hidden), [-1.0, 1.0])


def car_on_hill_pbo(compute_dtype=None, sizes: Sizes = CAR_ON_HILL):
    """The car-on-hill deep PBO at the paper's initialisation."""
    from pbo_tf.operators import DeepPBO

    return DeepPBO(
        sizes.d, hidden_multiples=list(sizes.pbo_multiples), init_std=5e-7, compute_dtype=compute_dtype
    )


def recommended_options(gin_file: str = "car_on_hill/profqi_fixed_point.gin") -> dict[str, dict]:
    """What the shipped ``gin_file`` binds on ``make_pbo``, ``WSampler``, ``ProFQIConfig`` and
    ``FixedPointTerm``, read from the file (parsed, then gin's config cleared) so the benchmark times what the
    gin file runs: ``{"make_pbo": {...}, ..., "FixedPointTerm": {...}}``."""
    import gin

    from pbo_tf.experiments.config import parse_config, resolved_bindings

    parse_config([gin_file])
    try:
        bindings = resolved_bindings()
    finally:
        gin.clear_config()

    def of(configurable):
        return {k.split(".", 1)[1]: v for k, v in bindings.items() if k.startswith(configurable + ".")}

    return {name: of(name) for name in ("make_pbo", "WSampler", "ProFQIConfig", "FixedPointTerm")}


def car_on_hill_recommended(sizes: Sizes = CAR_ON_HILL, seed=0):
    """``(pbo_factory, w_set, trainer_options)`` of the recommended configuration at ``sizes``' widths: the
    operator and W that `gin_configs/car_on_hill/profqi_fixed_point.gin` binds on ``make_pbo`` and
    ``WSampler`` (W's last layer drawn N(0, 0.25²), the input standardised over W, Glorot-uniform kernels,
    SiLU) and its loss terms on ``ProFQIConfig`` (the deep fixed-point term at ``Λ̄^N(ω₀)``, with ω₀)."""
    from pbo_tf.data.w_set import draw_w_set
    from pbo_tf.loss_terms import BellmanTerm, FixedPointTerm
    from pbo_tf.operators.factory import make_pbo

    options = recommended_options()
    pbo_options = dict(options["make_pbo"], hidden_multiples=list(sizes.pbo_multiples))
    pbo_options.pop("kind", None)
    q = car_on_hill_q(sizes)
    w_set, omega0 = draw_w_set(
        q, sizes.n_w, seed, last_layer_std=options["WSampler"].get("last_layer_std", 0.0)
    )
    trainer_options = {}
    if "@FixedPointTerm()" in options["ProFQIConfig"].get("loss_terms", []):
        term = FixedPointTerm(**options["FixedPointTerm"])
        trainer_options["loss_terms"] = (BellmanTerm(), term)
        if term.iterations:
            trainer_options["omega0"] = omega0

    def factory():  # make_pbo standardises over W (`DeepPBO.adapt`) as the runner's operator
        return make_pbo(None, q, kind="deep", w_set=w_set, **pbo_options)

    return factory, w_set, trainer_options


def profqi_trainer(
    q, pbo_factory, data, K, n_w, batch_size, gamma, passes, jit, seed=0, w_set=None, **kwargs
):
    """A `ProFQITrainer` of one refresh of ``passes`` passes, silent, at the benchmark's learning rates;
    ``w_set`` (default the paper's: ``q.initial_params(n_w, seed)``) the set W; ``kwargs`` go to the trainer
    (more refreshes, checkpoint and summary folders)."""
    from pbo_tf.configs import ProFQIConfig
    from pbo_tf.optimizers import AnnealedAdam
    from pbo_tf.trainers.profqi import ProFQITrainer

    options = dict(refreshes=1, log=None)
    options.update(kwargs)
    w_set = q.initial_params(n_w, seed) if w_set is None else w_set
    fields = {f.name for f in dataclasses.fields(ProFQIConfig)}
    config = ProFQIConfig(
        K=K, w_size=len(w_set), passes_per_refresh=passes, batch_size=batch_size, w_batch_size=n_w,
        jit_compile=_jit(jit), **{k: options.pop(k) for k in list(options) if k in fields},
    )  # fmt: skip
    return ProFQITrainer(
        config=config, pbo=pbo_factory(), target_pbo=pbo_factory(), q_family=q, dataset=data.to_dataset(),
        w_set=w_set, gamma=gamma, optimizer=AnnealedAdam(lr_start=1e-4, lr_end=1e-5), seed=seed, **options,
    )  # fmt: skip


def profqi_trainers(q, pbo_factory, datasets, K, n_w, batch_size, gamma, passes, jit):
    """One `profqi_trainer` per dataset, seeded by its position."""
    return [
        profqi_trainer(q, pbo_factory, data, K, n_w, batch_size, gamma, passes, jit, seed=seed)
        for seed, data in enumerate(datasets)
    ]


def fqi_trainer(q, data, batch_size, gamma, epochs, jit, seed=0):
    """A one-iteration `FQITrainer` of ``epochs`` epochs that never stops early (for timing)."""
    from pbo_tf.configs import FQIConfig
    from pbo_tf.optimizers import AnnealedAdam
    from pbo_tf.trainers.fqi import FQITrainer

    config = FQIConfig(
        K=1, max_epochs=epochs, patience=epochs + 1, batch_size=batch_size, jit_compile=_jit(jit)
    )
    return FQITrainer(
        config=config, q_family=q, dataset=data.to_dataset(), initial_params=q.initial_params(1, seed)[0],
        gamma=gamma, optimizer=AnnealedAdam(lr_start=1e-3, lr_end=1e-4), seed=seed, log=None,
    )  # fmt: skip


def ifqi_refresh_call(q, sizes: Sizes, data, jit="round", seed=0):
    """``(call, trainer)``: one call of `IFQITrainer`'s compiled refresh at ``sizes`` (K + 1 heads of ``q``,
    ``sizes.passes`` passes over ``data``, one Adam step per batch)."""
    import tensorflow as tf

    from pbo_tf.configs import IFQIConfig
    from pbo_tf.optimizers import AnnealedAdam
    from pbo_tf.q.multi_head import MultiHeadQ
    from pbo_tf.trainers.ifqi import IFQITrainer

    heads = MultiHeadQ(q, sizes.K + 1).initial_params(1, seed)
    config = IFQIConfig(
        K=sizes.K, refreshes=1, passes_per_refresh=sizes.passes, batch_size=sizes.batch, jit_compile=_jit(jit)
    )
    trainer = IFQITrainer(
        config=config, q_family=q, dataset=data.to_dataset(), initial_params=heads, gamma=sizes.gamma,
        optimizer=AnnealedAdam(lr_start=1e-3, lr_end=5e-7), seed=seed, log=None,
    )  # fmt: skip
    first = tf.constant(0, tf.int64)
    return (lambda: trainer.run_round(first).numpy()), trainer


def prodqn_agent_train(
    sizes: Sizes = LUNAR_LANDER, jit=False, cache=True, compute_dtype=None, fused_adam=True,
    policy_refresh=False,
):  # fmt: skip
    """``(train, experience, agent)``: the compiled ``ProDQNAgent.train`` at the Lunar Lander shape (or
    ``sizes``), a fixed batch of ``sizes.batch`` MID-step transition pairs, and the agent.

    The defaults are `gin_configs/lunar_lander/prodqn.gin`'s (graph mode, fused Adam, cached target chain).
    ``policy_refresh`` adds what the online loop does after each training step: recomputing the policies'
    cached ``Λ^K(ω_0)`` (K one-row applications); without it, ``train`` is the Adam steps alone. The target
    is never refreshed here (online: every 25 training steps), so no timed call recomputes the chain.
    """
    import tensorflow as tf
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import time_step as ts
    from tf_agents.utils import common

    from pbo_tf.agents import ProDQNAgent
    from pbo_tf.configs import ProDQNConfig
    from pbo_tf.operators import DeepPBO
    from pbo_tf.optimizers import make_adam
    from pbo_tf.q import FlatMLPQ

    s = sizes
    q = FlatMLPQ(s.state_dim, list(s.hidden), [float(a) for a in range(s.n_actions)])
    obs = tensor_spec.BoundedTensorSpec([s.state_dim], tf.float32, -10.0, 10.0)
    action = tensor_spec.BoundedTensorSpec([], tf.int64, 0, s.n_actions - 1)
    config = ProDQNConfig(
        K=s.K, refreshes=1, train_steps_per_refresh=2**62, w_size=s.n_w, w_batch_size=s.w_batch,
        cache_target_chain=cache, cache_omega_k=policy_refresh,
    )  # fmt: skip
    agent = ProDQNAgent(
        time_step_spec=ts.time_step_spec(obs), action_spec=action, q_family=q,
        pbo=DeepPBO(q.d, hidden_multiples=list(s.pbo_multiples), compute_dtype=compute_dtype),
        w_set=q.initial_params(s.n_w, 0), gamma=s.gamma, optimizer=make_adam(1e-5, fused=fused_adam),
        config=config, enable_summaries=False, train_step_counter=tf.Variable(0, dtype=tf.int64),
    )  # fmt: skip
    experience = tensor_spec.sample_spec_nest(agent.collect_data_spec, outer_dims=(s.batch, 2), seed=0)
    mid = tf.ones([s.batch, 2], tf.int32)
    # (sample_spec_nest draws an unbounded reward spec from the float32 range: the loss would be inf.)
    reward = tf.random.stateless_uniform([s.batch, 2], seed=[0, 1], minval=-1.0, maxval=1.0)
    experience = experience._replace(  # (a namedtuple's public copy-with-changes method)
        step_type=mid, next_step_type=mid, discount=tf.ones([s.batch, 2]), reward=reward
    )
    return common.function(agent.train, jit_compile=_jit(jit)), experience, agent


# ------------------------------------------------------------------------------------ operators that scale
@dataclass(frozen=True)
class QShape:
    """A Q network whose parameters an operator maps: ``(s, a) → hidden → Q``, the action fed as one value
    (`pbo_tf.q.FlatMLPQ`)."""

    name: str
    state_dim: int
    hidden: tuple[int, ...]
    n_actions: int

    @property
    def d(self) -> int:
        return mlp_params([self.state_dim + 1, *self.hidden, 1])


#: The operator-scaling case's Q networks: car-on-hill's (d = 151), Lunar Lander's (1 261), a [64, 64] and a
#: [256, 256] network on CartPole's 4-d state with the action as an input (4 609, 67 585).
OPERATOR_SCALES = (
    QShape("car_on_hill", 2, (30,), 2),
    QShape("lunar_lander", 8, (30, 30), 4),
    QShape("cartpole_64x64", 4, (64, 64), 2),
    QShape("cartpole_256x256", 4, (256, 256), 2),
)
OPERATOR_SCALES_TOY = (
    QShape("toy_3x3", 2, (3, 3), 2),
    QShape("toy_8x8", 2, (8, 8), 2),
)
#: The operators compared: the paper's deep PBO [2, 2, 2, 2], the reference's convolutional one
#: [2, 2, 2, 2] with kernel 15, the equivariant one with channels [16, 16] (each kind's defaults).
OPERATOR_KINDS = ("deep", "conv", "equivariant")
#: The deep PBO is skipped where its weights, their gradient and Adam's two moments (16 bytes a weight in
#: fp32) pass this many bytes.
DEEP_PBO_MEMORY_LIMIT = 2 * 2**30


def deep_pbo_bytes(d: int, multiples=(2, 2, 2, 2)) -> int:
    """Bytes of the deep PBO's weights, gradient and Adam moments at ``d`` (fp32)."""
    return 16 * mlp_params([d, *(m * d for m in multiples), d])


def operator_adam_step(kind: str, shape: QShape, K: int, w_rows: int, jit: bool, seed: int = 0):
    """``(step, pbo)``: one compiled Adam step on the PBO chain loss of operator ``kind`` (built by
    `pbo_tf.operators.factory.make_pbo` with the kind's defaults; the deep one as the paper's [2, 2, 2, 2])
    for the Q network ``shape``: ``mean_k ||Λ^k(ω) − T_k||²`` over k = 1..K and ``w_rows`` rows of W, with
    fixed targets T. It is the operator's share of the PBO loss (Q's share, the same for every operator,
    is left out); ``step()`` runs it and returns the loss."""
    import tensorflow as tf
    import tf_keras

    from pbo_tf.operators.factory import make_pbo
    from pbo_tf.q import FlatMLPQ

    q = FlatMLPQ(shape.state_dim, list(shape.hidden), [float(a) for a in range(shape.n_actions)])
    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 0.3, (w_rows, q.d)).astype(np.float32)
    options = {"hidden_multiples": [2, 2, 2, 2]} if kind == "deep" else {}
    pbo = make_pbo(None, q, kind=kind, init_std=1e-3, seed=seed, w_set=w, **options)
    pbo.ensure_built()
    params = tf.constant(w)
    targets = tf.constant(rng.normal(0.0, 0.3, (K, w_rows, q.d)).astype(np.float32))
    optimizer = tf_keras.optimizers.Adam(1e-5)
    variables = pbo.trainable_variables

    @tf.function(jit_compile=_jit(jit))
    def step(params, targets):  # (arguments, not captured constants, which XLA would fold at compile time)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(pbo.chain(params, K) - targets))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    return (lambda: step(params, targets)), pbo


def log_log_slope(d, ms) -> float:
    """The least-squares slope of ``log ms`` against ``log d``: the cost's exponent in d."""
    if len(d) < 2:
        return float("nan")
    return float(np.polyfit(np.log(np.asarray(d, float)), np.log(np.asarray(ms, float)), 1)[0])
