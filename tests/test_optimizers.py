"""Adam with ε placed as the reference (optax) or as Keras places it, fused and new-style, against Adam
written out in numpy with the linear learning-rate schedule."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from pbo_tf.optimizers import (
    AnnealedAdam,
    FusedReferenceAdam,
    ReferenceAdam,
    build_optimizer,
    check_optimizer,
    linear_schedule,
    make_adam,
    optimizer_variables,
    resolve_optimizer,
)

START, END, DECAY_STEPS, STEPS = 1e-2, 2e-3, 4, 6  # the schedule is flat after step 4: both parts covered
B1, B2 = 0.9, 0.999


def _gradients(seed=0):
    """Per step: a normal-scale gradient ``[3, 2]`` and a tiny one ``[4]`` (1e-9 scale, signs varying)."""
    rng = np.random.default_rng(seed)
    return [
        (rng.normal(size=(3, 2)).astype(np.float32), (1e-9 * rng.normal(size=4)).astype(np.float32))
        for _ in range(STEPS)
    ]


def _numpy_adam(grads, epsilon, placement):
    """Displacements ``θ_t − θ_0`` of each variable after every step, float64."""
    shapes = [g.shape for g in grads[0]]
    theta = [np.zeros(s) for s in shapes]
    m = [np.zeros(s) for s in shapes]
    v = [np.zeros(s) for s in shapes]
    out = []
    for t, step_grads in enumerate(grads, start=1):
        lr = START + (END - START) * min(t - 1, DECAY_STEPS) / DECAY_STEPS  # schedule at count t − 1
        for i, g in enumerate(step_grads):
            g = g.astype(np.float64)
            m[i] = B1 * m[i] + (1 - B1) * g
            v[i] = B2 * v[i] + (1 - B2) * g**2
            if placement == "reference":  # optax: ε after the bias correction
                m_hat, v_hat = m[i] / (1 - B1**t), v[i] / (1 - B2**t)
                theta[i] = theta[i] - lr * m_hat / (np.sqrt(v_hat) + epsilon)
            else:  # Keras: ε before it
                alpha = lr * np.sqrt(1 - B2**t) / (1 - B1**t)
                theta[i] = theta[i] - alpha * m[i] / (np.sqrt(v[i]) + epsilon)
        out.append([x.copy() for x in theta])
    return out


def _run(optimizer, grads, variables=None, apply=None):
    """Applies ``grads`` step by step; the variables (zeros by default) after each step."""
    variables = variables or [tf.Variable(tf.zeros(g.shape)) for g in grads[0]]
    apply = apply or (lambda gs: optimizer.apply_gradients(zip(gs, variables, strict=True)))
    out = []
    for step_grads in grads:
        apply([tf.constant(g) for g in step_grads])
        out.append([var.numpy() for var in variables])
    return out


@pytest.mark.parametrize("fused", [False, True], ids=["new_style", "fused"])
@pytest.mark.parametrize("placement", ["reference", "keras"])
@pytest.mark.parametrize("epsilon", [1e-8, 1e-7])
def test_make_adam_follows_adam_in_numpy_with_the_linear_schedule(fused, placement, epsilon):
    grads = _gradients()
    optimizer = make_adam(
        linear_schedule(START, END, DECAY_STEPS), epsilon=epsilon, epsilon_placement=placement, fused=fused
    )
    assert ("legacy" in type(optimizer).__module__ or isinstance(optimizer, FusedReferenceAdam)) == fused
    got, want = _run(optimizer, grads), _numpy_adam(grads, epsilon, placement)
    for got_t, want_t in zip(got, want, strict=True):
        for g, w in zip(got_t, want_t, strict=True):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * np.abs(w).max())  # float32 rounding
    assert int(optimizer.iterations.numpy()) == STEPS
    assert np.abs(got[-1][0]).max() > 1e-2  # the normal-scale variable moved by many learning rates


def test_the_placements_differ_on_tiny_gradients_by_the_effective_epsilon():
    """On 1e-9 gradients the first step is ``lr · g / (|g| + ε_eff)``: ε_eff = 1e-8 for the reference,
    1e-7 / √(1 − β2) ≈ 3.16e-6 for Keras' default, a step 288 times smaller (make_adam's docstring)."""
    grads = [(np.zeros((3, 2), np.float32), np.full(4, 1e-9, np.float32))]
    reference = _run(make_adam(1e-2), grads)[0][1]
    keras_default = _run(tf_keras.optimizers.Adam(1e-2), grads)[0][1]
    keras_1e8 = _run(make_adam(1e-2, epsilon_placement="keras"), grads)[0][1]
    np.testing.assert_allclose(reference, -1e-2 * 1e-9 / (1e-9 + 1e-8), rtol=1e-5)
    ratio = reference / keras_default
    assert np.all((ratio > 280) & (ratio < 295)), ratio
    np.testing.assert_allclose(reference / keras_1e8, (1e-9 + 1e-8 / np.sqrt(1 - B2)) / 1.1e-8, rtol=1e-4)
    # Later steps keep differing (the effective ε shrinks to ε only as √(1 − β2^t) → 1).
    grads = _gradients(seed=1)
    ref = _run(make_adam(linear_schedule(START, END, DECAY_STEPS)), grads)
    ker = _run(make_adam(linear_schedule(START, END, DECAY_STEPS), epsilon_placement="keras"), grads)
    assert np.abs(ref[-1][1] - ker[-1][1]).max() > 0.1 * np.abs(ref[-1][1]).max()
    np.testing.assert_allclose(ref[-1][0], ker[-1][0], rtol=1e-4)  # normal-scale gradients: the same


@pytest.mark.parametrize("fused", [False, True], ids=["new_style", "fused"])
def test_sparse_gradients_give_the_dense_update(fused):
    """`tf.IndexedSlices` (rows 0 and 2 of 4) update like the dense gradient with zero rows elsewhere."""
    rng = np.random.default_rng(2)
    rows = [(1e-9 * rng.normal(size=(2, 3))).astype(np.float32) for _ in range(3)]
    indices = tf.constant([0, 2])
    results = []
    for sparse in (False, True):
        optimizer = make_adam(linear_schedule(START, END, DECAY_STEPS), fused=fused)
        var = tf.Variable(tf.zeros([4, 3]))
        for r in rows:
            grad = (
                tf.IndexedSlices(tf.constant(r), indices, tf.constant([4, 3]))
                if sparse
                else tf.scatter_nd(indices[:, None], r, [4, 3])
            )
            optimizer.apply_gradients([(grad, var)])
        results.append(var.numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-12)
    assert np.abs(results[0][[0, 2]]).max() > 1e-3 and not results[0][[1, 3]].any()


def test_the_new_style_reference_adam_runs_under_xla():
    grads = _gradients()
    eager = _run(make_adam(linear_schedule(START, END, DECAY_STEPS)), grads)
    optimizer = make_adam(linear_schedule(START, END, DECAY_STEPS))
    variables = [tf.Variable(tf.zeros(g.shape)) for g in grads[0]]
    optimizer.build(variables)

    @tf.function(jit_compile=True)
    def step(g0, g1):
        optimizer.apply_gradients([(g0, variables[0]), (g1, variables[1])])

    compiled = _run(optimizer, grads, variables, apply=lambda gs: step(*gs))
    for got_t, want_t in zip(compiled, eager, strict=True):
        for g, w in zip(got_t, want_t, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
    np.testing.assert_allclose(compiled[-1][1], _numpy_adam(grads, 1e-8, "reference")[-1][1], rtol=2e-5)


@pytest.mark.parametrize("fused", [False, True], ids=["new_style", "fused"])
def test_checkpoints_hold_the_parents_variables(fused, tmp_path):
    """A reference-placement optimizer saves the same checkpoint keys as the Keras class it derives from."""
    keys = []
    for placement in ("reference", "keras"):
        optimizer = make_adam(1e-3, epsilon_placement=placement, fused=fused)
        assert isinstance(optimizer, (FusedReferenceAdam if fused else ReferenceAdam)) == (
            placement == "reference"
        )
        var = tf.Variable(tf.ones([2, 2]))
        optimizer.apply_gradients([(tf.ones([2, 2]), var)])
        path = tf.train.Checkpoint(optimizer=optimizer, var=var).save(str(tmp_path / placement / "ckpt"))
        keys.append(sorted(name for name, _ in tf.train.list_variables(path)))
    assert keys[0] == keys[1] and len(keys[0]) >= 4


def test_argument_checks_and_linear_schedule():
    with pytest.raises(ValueError, match="epsilon_placement"):
        make_adam(1e-3, epsilon_placement="before")
    with pytest.raises(ValueError, match="epsilon"):
        make_adam(1e-3, epsilon=0.0)
    with pytest.raises(ValueError, match="learning_rate"):
        make_adam(-1.0)
    schedule = linear_schedule(1.0, 0.1, 9)
    np.testing.assert_allclose([float(schedule(t)) for t in (0, 3, 9, 20)], [1.0, 0.7, 0.1, 0.1], rtol=1e-6)
    assert float(linear_schedule(1.0, 0.5, 0)(1)) == 0.5  # zero steps: one step to the end value


@pytest.mark.parametrize("fused", [False, True], ids=["new_style", "fused"])
def test_resolve_optimizer_calls_an_annealed_adam_with_the_schedule_length_and_keeps_a_keras_one(fused):
    """An `AnnealedAdam` becomes ``make_adam`` on a linear schedule of the given length (its steps follow
    Adam in numpy); a tf_keras optimizer comes back as given, without a schedule of the caller's."""
    optimizer, schedule = resolve_optimizer(AnnealedAdam(START, END, fused=fused), DECAY_STEPS)
    assert isinstance(optimizer, FusedReferenceAdam if fused else ReferenceAdam)
    np.testing.assert_allclose(
        [float(schedule(t)) for t in (0, 2, DECAY_STEPS, 9)], [START, (START + END) / 2, END, END], rtol=1e-6
    )
    grads = _gradients()
    got, want = _run(optimizer, grads), _numpy_adam(grads, 1e-8, "reference")
    for got_t, want_t in zip(got, want, strict=True):
        for g, w in zip(got_t, want_t, strict=True):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6 * np.abs(w).max())
    keras = tf_keras.optimizers.legacy.SGD(0.1) if fused else tf_keras.optimizers.SGD(0.1)
    assert resolve_optimizer(keras, None) == (keras, None)
    with pytest.raises(ValueError, match="^an AnnealedAdam optimizer needs lr_schedule_steps"):
        resolve_optimizer(AnnealedAdam(), None)


@pytest.mark.parametrize("wrong, name", [(AnnealedAdam()(10), "tuple"), ("adam", "str"), (None, "NoneType")])
def test_an_optimizer_of_another_kind_is_a_one_line_type_error(wrong, name):
    with pytest.raises(TypeError) as error:
        check_optimizer(wrong)
    assert str(error.value) == f"optimizer must be an AnnealedAdam or a tf_keras optimizer, got {name}"
    with pytest.raises(TypeError, match=f"got {name}$"):
        resolve_optimizer(wrong, 10)


@pytest.mark.parametrize("fused", [False, True], ids=["new_style", "fused"])
def test_build_optimizer_creates_the_step_count_and_moments_before_the_first_step(fused):
    optimizer = make_adam(1e-3, fused=fused)
    variables = [tf.Variable(tf.ones([2, 3])), tf.Variable(tf.ones([4]))]
    build_optimizer(optimizer, variables)
    state = optimizer_variables(optimizer)
    shapes = sorted(tuple(v.shape) for v in state)
    assert shapes == sorted([(), (2, 3), (2, 3), (4,), (4,)])  # iterations, m and v of each variable
    assert all(not v.numpy().any() for v in state)
