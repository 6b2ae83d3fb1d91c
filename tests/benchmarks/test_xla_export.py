"""benchmarks/export_xla.py, xla_replay.py and xla_profqi.py: the HLO export of a compiled call, its replay,
and the export of a partly trained ProFQI run."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from in_process import run_main  # tests/benchmarks/ is on sys.path (pytest prepends it)

from benchmarks import export_xla, xla_profqi, xla_replay
from tests.builders import profqi_trainer as _profqi

BENCHMARKS = os.path.dirname(os.path.abspath(export_xla.__file__))

_M = (1 << 64) - 1


def _splitmix64(x):  # the reference algorithm, in Python integers
    x = (x + 0x9E3779B97F4A7C15) & _M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M
    return x ^ (x >> 31)


def test_hash_uniform_is_splitmix64_of_index_and_seed():
    u = xla_replay.hash_uniform((3, 5), seed=7)
    assert u.dtype == np.float32 and u.shape == (3, 5)
    for i in range(15):
        expected = (_splitmix64((i + 7 * 0x9E3779B97F4A7C15) & _M) >> 40) / 2**24
        assert u.reshape(-1)[i] == np.float32(expected)
    big = xla_replay.hash_uniform((100_000,), seed=1)
    assert big.min() >= 0.0 and big.max() < 1.0
    assert abs(big.mean() - 0.5) < 0.01 and abs(big.std() - 12**-0.5) < 0.01
    assert not np.array_equal(big[:1000], xla_replay.hash_uniform((1000,), seed=2))


def test_entry_signature_and_aliases_of_a_hand_written_module():
    text = (
        "HloModule m, input_output_alias={ {1}: (2, {}, may-alias), {2}: (0, {}, may-alias) }, "
        "entry_computation_layout={(f32[2,3]{1,0}, s64[], f32[])->(f32[], f32[], f32[2,3]{1,0})}\n\n"
        "ENTRY %main.9 (a.1: f32[2,3], b.2: s64[], c.3: f32[]) -> (f32[], f32[], /*index=2*/f32[2,3]) {\n"
        "  ROOT %t = (f32[], f32[], f32[2,3]) tuple(...)\n}\n"
    )
    params, n_out = export_xla.entry_signature(text)
    assert params == [("f32", (2, 3)), ("s64", ()), ("f32", ())]
    assert n_out == 3
    assert export_xla.output_aliases(text) == [(1, 2), (2, 0)]


def _toy_case(tmp_path, max_stored):
    """A compiled update of two variables (one large enough to be hash-generated) and its export."""
    big = tf.Variable(np.linspace(-1.0, 3.0, 64, dtype=np.float32).reshape(8, 8))
    small = tf.Variable(np.float32(0.5))

    @tf.function(jit_compile=True)
    def step(x):
        big.assign(big * 2.0 + x)
        small.assign_add(1.0)
        return tf.reduce_sum(big) * small, tf.shape(x)[0]

    x = tf.constant(np.arange(8, dtype=np.float32))
    case = export_xla.export_call(step, (x,), "toy", str(tmp_path), 123.0, 1, max_stored)
    return case, big, small, x


def test_export_records_inputs_outputs_and_the_hashed_variable(tmp_path):
    case, big, small, x = _toy_case(tmp_path, max_stored=16)
    assert [s["kind"] for s in case["inputs"]] == ["stored", "hash", "stored"]
    assert case["n_outputs"] == 4 and case["n_return_values"] == 2 and case["variables_checked"] == 2
    assert sorted(case["aliases"]) == [(2, 1), (3, 2)]
    # TensorFlow computed its reference on the hashed values: the variable moved one step from them.
    spec = case["inputs"][1]
    hashed = xla_replay.synthetic_input(spec)
    np.testing.assert_allclose(big.numpy(), hashed * 2.0 + x.numpy(), rtol=1e-6)
    assert abs(hashed.mean() - 1.0) < 0.2 and abs(hashed.std() - np.linspace(-1, 3, 64).std()) < 0.2
    inputs = xla_replay.load_inputs(str(tmp_path), case)
    np.testing.assert_array_equal(inputs[0], x.numpy())
    assert inputs[2] == np.float32(0.5)
    stored = np.load(tmp_path / "toy.npz")
    np.testing.assert_allclose(stored["out_0"], [np.sum(hashed * 2 + x.numpy()) * 1.5], rtol=1e-6)
    stride = next(o["stride"] for o in case["outputs"] if o["index"] == 2)  # 64 elements, 16 kept
    assert stride == 4
    np.testing.assert_allclose(stored["out_2"], big.numpy().reshape(-1)[::stride], rtol=1e-6)
    # A corrupt input is refused with the input's number.
    bad = dict(case, inputs=[dict(case["inputs"][0], checksum=1e9), *case["inputs"][1:]])
    with pytest.raises(ValueError, match="input 0 does not match"):
        xla_replay.load_inputs(str(tmp_path), bad)


#: Where `scripts/setup.sh` installs JAX (requirements/jax.txt): apart from site-packages, so that no other
#: TensorFlow process imports it.
JAX_SITE = os.path.join(os.path.dirname(BENCHMARKS), ".venv", "jax")
NO_JAX = "JAX is not installed (bash scripts/setup.sh, or PBO_TF_JAX_PYTHON: a Python with jax and absl-py)"


def _jax_python():
    """``(python, environment)`` for a JAX process (this one's environment without its PYTHONPATH, JAX_SITE
    on it where setup.sh put JAX there), or None without JAX."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if os.environ.get("PBO_TF_JAX_PYTHON"):
        return os.environ["PBO_TF_JAX_PYTHON"], env
    if os.path.isdir(os.path.join(JAX_SITE, "jax")):
        return sys.executable, {**env, "PYTHONPATH": JAX_SITE}
    return (sys.executable, env) if importlib.util.find_spec("jax") else None


def _import_jax():
    """JAX in this process, from JAX_SITE where setup.sh put it; skips the test without it."""
    if os.path.isdir(os.path.join(JAX_SITE, "jax")) and JAX_SITE not in sys.path:
        sys.path.append(JAX_SITE)
    return pytest.importorskip("jax", reason=NO_JAX)


def test_replay_with_jax_reproduces_tensorflow(tmp_path):
    found = _jax_python()
    if found is None:
        pytest.skip(NO_JAX)
    python, env = found
    case, *_ = _toy_case(tmp_path, max_stored=16)
    with open(tmp_path / "cases.json", "w") as f:
        json.dump({"cases": [case]}, f)
    out = tmp_path / "replay.json"
    subprocess.run(
        [python, os.path.join(BENCHMARKS, "xla_replay.py"), f"--export_dir={tmp_path}", f"--output={out}",
         "--repeats=2", "--iters=2", "--big_matmul=256"],
        check=True, env=env,
    )  # fmt: skip
    results = json.loads(out.read_text())
    assert results["toy_max_relative_error"] < 1e-6
    assert results["toy_step_ms"] > 0 and results["matmul_gflops"] > 0


def test_the_device_hardware_record_names_the_device_and_tf32_where_the_dots_allow_it():
    """`xla_replay.hardware` on devices as JAX describes them: TF32 on a GPU of compute capability 8.0 or
    higher when TensorFlow exported the dots at its default precision (TF32 enabled), not otherwise."""
    jax = _import_jax()

    class Device:
        def __init__(self, platform, device_kind, compute_capability=None):
            self.platform, self.device_kind = platform, device_kind
            if compute_capability is not None:
                self.compute_capability = compute_capability

    exported = {"exported_with": {"tensorflow": tf.__version__, "tf32": True}}
    h200 = Device("gpu", "NVIDIA H200", "9.0")
    assert xla_replay.hardware(exported, h200) == {
        "device": "NVIDIA H200", "platform": "gpu", "framework": f"jax {jax.__version__}",
        "matmul_precision": "default", "tf32": True,
    }  # fmt: skip
    assert xla_replay.hardware(exported, Device("gpu", "Tesla V100-SXM2-16GB", "7.0"))["tf32"] is False
    full = xla_replay.hardware({"exported_with": {"tf32": False}}, h200)
    assert (full["matmul_precision"], full["tf32"]) == ("highest", False)
    assert xla_replay.hardware({}, h200)["tf32"] is True  # an export before the record: TensorFlow's default
    cpu = xla_replay.hardware(exported, Device("cpu", "cpu"))
    assert (cpu["device"], cpu["platform"], cpu["tf32"]) == ("CPU", "cpu", False)


def test_w_batch_indices_have_a_static_shape_under_xla():
    """The W batch is a constant-size slice (a tensor-bounded slice gave XLA a bounded dynamic shape, which
    JAX's HLO importer refuses), with the same rows as slicing the shuffled order, and the same order in
    graph mode as under XLA (so a run can resume in another `jit_compile` mode)."""
    from pbo_tf.data.transitions import seeded_permutation
    from pbo_tf.envs.chain_walk.problem import ChainWalkProblem
    from pbo_tf.operators import LinearPBO
    from pbo_tf.optimizers import AnnealedAdam
    from pbo_tf.trainers.base import data_seed

    cw = ChainWalkProblem()
    q, data = cw.q_family(), cw.dataset(0)
    trainer = _profqi(
        pbo=LinearPBO(q.d), target_pbo=LinearPBO(q.d), q_family=q, dataset=data.to_dataset(),
        w_set=q.initial_params(10, 0), K=2, gamma=cw.gamma, passes_per_refresh=1, refreshes=1, batch_size=20,
        w_batch_size=5, optimizer=AnnealedAdam(lr_start=1e-3, lr_end=1e-4), seed=3, log=None,
    )  # fmt: skip
    fn = tf.function(trainer.w_batch_indices, jit_compile=True)
    epoch, wb = tf.constant(4, tf.int64), tf.constant(1, tf.int64)
    hlo = fn.experimental_get_compiler_ir(epoch, wb)(stage="hlo")
    assert "<=" not in hlo  # no bounded dynamic dimension anywhere
    order = seeded_permutation(10, data_seed(trainer.seed, epoch)).numpy()
    assert sorted(order) == list(range(10)) and list(order) != list(range(10))
    np.testing.assert_array_equal(fn(epoch, wb).numpy(), order[5:10])
    np.testing.assert_array_equal(fn(epoch, tf.constant(0, tf.int64)).numpy(), order[:5])
    graph = tf.function(trainer.w_batch_indices)
    np.testing.assert_array_equal(graph(epoch, wb).numpy(), order[5:10])
    other_epoch = fn(tf.constant(5, tf.int64), tf.constant(0, tf.int64)).numpy()
    assert list(other_epoch) != list(order[:5])  # each epoch reshuffles W


def test_xla_profqi_exports_only_the_outer_steps_a_partly_trained_run_has_left(tmp_path, monkeypatch):
    """A run folder part-trained here (or by an earlier device run) exports from its checkpoint: the device
    schedule covers the outer steps left, its epoch counter starts where the run stopped, and the exported
    weights are the checkpoint's. Seeds at different outer steps are refused. (The device side is checked
    end to end against launch/train.py with JAX on the CPU, see BUILD.md.)"""
    from pbo_tf.experiments.config import GIN_CONFIGS_DIR, parse_config
    from pbo_tf.experiments.runner import Experiment

    gin = os.path.join(GIN_CONFIGS_DIR, "chain_walk", "profqi.gin")  # (the smallest program to trace)
    sizes = ["REFRESHES=3", "PASSES_PER_REFRESH=2", "K=2", "EXTRA_ITERATIONS=1", "ProFQIConfig.w_size=4"]
    bindings = ["NUM_SEEDS=2", *sizes, "ProFQIConfig.w_batch_size=4", "ProFQIConfig.jit_compile=False"]
    parse_config([gin], bindings)
    root, export_dir = tmp_path / "run", tmp_path / "export"
    trainers = [Experiment(root_dir=str(root), log=None).build_seed(s)["trainer"] for s in (0, 1)]
    trainers[0].train(max_rounds=1)
    from absl import app

    with pytest.raises(app.UsageError, match=r"different refreshes \{0: 1, 1: 0\}"):
        xla_profqi.outer_steps_done(list(enumerate(trainers)))
    trainers[1].train(max_rounds=1)
    # --mode=evaluate's core: the curves at the checkpoints, into partial_metrics.json, no metrics.json.
    xla_profqi.evaluate_partial(Experiment(root_dir=str(root), log=None), 1)
    partial = json.loads((root / "partial_metrics.json").read_text())
    assert partial["refreshes_done"] == 1 and partial["budget_fraction"] == pytest.approx(1 / 3)
    assert [p["seed"] for p in partial["per_seed"]] == [0, 1] and not (root / "metrics.json").exists()
    for seed, trainer in enumerate(trainers):  # the iterates are the checkpointed operator's
        saved = np.load(root / f"seed_{seed}" / "iterates.npz")["iterates"]
        omega0 = saved[:1]
        np.testing.assert_allclose(trainer.pbo.iterate(omega0, 3)[:, 0].numpy(), saved, rtol=1e-6, atol=1e-7)
    # xla_profqi.py --mode=export on the run folder, in this process (it compiles its own XLA program,
    # whatever jit_compile says, and builds the seeds' trainers from their checkpoints)
    export = ["--mode=export", f"--gin_file={gin}", f"--root_dir={root}", f"--export_dir={export_dir}"]
    run_main(xla_profqi, [*export, *[f"--gin_bindings={b}" for b in bindings]], monkeypatch)
    cases = {c["name"]: c for c in json.loads((export_dir / "cases.json").read_text())["cases"]}
    for seed, trainer in enumerate(trainers):
        case = cases[f"profqi_seed{seed}"]
        assert case["train"] == {"calls": 2, "counter_input": 0, "counter_start": 2, "counter_step": 2,
                                 "first_outer_step": 1}  # fmt: skip
        inputs = xla_replay.load_inputs(str(export_dir), case)
        assert inputs[0] == 2  # the first epoch of outer step 2
        kernel = trainer.pbo.weights[0].numpy()  # trained: no longer its initial value
        assert any(x.shape == kernel.shape and np.array_equal(x, kernel) for x in inputs)


def _device_state(path, calls, value):
    np.savez(path, first_outputs=np.zeros((calls, 3)), seconds=np.ones(calls), param_1=np.full(2, value))


def test_device_run_cut_at_a_deadline_is_finished_at_the_newest_snapshot_every_seed_reached(tmp_path):
    """Seeds trained in separate processes and stopped at a deadline reach different call counts: the
    replay keeps the newest snapshot of every SNAPSHOT_EVERY-th call (removing the one before), and the
    finish takes every seed at the largest count they all have."""
    train_dir = str(tmp_path)
    for calls in range(1, 12):  # seed 0 runs 11 calls, with a snapshot every 4
        _device_state(tmp_path / "profqi_seed0_state.npz", calls, calls)
        if calls % 4 == 0:
            xla_replay.keep_snapshot(train_dir, "profqi_seed0", calls, 4)
    assert sorted(os.listdir(tmp_path)) == ["profqi_seed0_state.npz", "profqi_seed0_state_at8.npz"]
    _device_state(tmp_path / "profqi_seed1_state.npz", 9, 90)  # seed 1 stopped after 9, snapshot at 8
    _device_state(tmp_path / "profqi_seed1_state_at8.npz", 8, 80)
    states = xla_profqi.device_states(train_dir, [0, 1])
    assert [len(states[s]["seconds"]) for s in (0, 1)] == [8, 8]
    assert states[0]["param_1"][0] == 8 and states[1]["param_1"][0] == 80
    _device_state(tmp_path / "profqi_seed1_state.npz", 11, 110)  # both at 11: their last states
    states = xla_profqi.device_states(train_dir, [0, 1])
    assert states[0]["param_1"][0] == 11 and states[1]["param_1"][0] == 110
    os.remove(tmp_path / "profqi_seed1_state_at8.npz")
    _device_state(tmp_path / "profqi_seed1_state.npz", 7, 70)  # 7 against 11 and 8: nothing in common
    with pytest.raises(ValueError, match=r"different numbers of refreshes on the device, \{0: 11, 1: 7\}"):
        xla_profqi.device_states(train_dir, [0, 1])


# chain-walk's linear PBO (the smallest program), and the recommended car-on-hill configuration: its refresh
# also recomputes the deep fixed-point term's ω̄ = Λ̄^N(ω₀) and trains on it
DEVICE_RUNS = {  # gin file, refreshes, other sizes
    "chain_walk_profqi": ("chain_walk/profqi.gin", 6, ["PASSES_PER_REFRESH=2", "EXTRA_ITERATIONS=1"]),
    "car_on_hill_fixed_point": ("car_on_hill/profqi_fixed_point.gin", 4, [
        "PASSES_PER_REFRESH=1", "EXTRA_ITERATIONS=2", "MAX_EPOCHS=2", "PATIENCE=1",
        "CarOnHillProblem.n_random=900", "CarOnHillProblem.n_oriented=100",
        "FixedPointTerm.iterations=3"]),  # Λ̄^N(ω₀) at N = 3: each application is compiled
}  # fmt: skip


# The device side's XLA CPU backend compiles without LLVM's optimisations: the same HLO programs, the same
# arithmetic to float rounding, in less than half the compile time of the default level.
DEVICE_XLA_FLAGS = "--xla_backend_optimization_level=0"


@pytest.mark.parametrize("config", sorted(DEVICE_RUNS))
def test_device_script_trains_every_seed_in_its_own_process_like_launch_train(tmp_path, config, monkeypatch):
    """`xla_profqi.py --mode=export`, benchmarks/xla_profqi_device.sh (each seed in a process of its own,
    snapshots) then `xla_profqi.py --mode=finish`: the same curve as the runner of launch/train.py on the
    same config, here; ``metrics.json`` records the device the seeds trained on (JAX's) and the local run
    this process's. Export, finish and the local run in the test's process (a subprocess would run the same
    code after its own interpreter and TensorFlow start), the device side with JAX only."""
    found = _jax_python()
    if found is None:
        pytest.skip(NO_JAX)
    python, env = found
    from pbo_tf.experiments.config import GIN_CONFIGS_DIR, parse_config
    from pbo_tf.experiments.hardware import training_hardware
    from pbo_tf.experiments.run import run_experiment

    gin_name, n, run_sizes = DEVICE_RUNS[config]
    gin = os.path.join(GIN_CONFIGS_DIR, gin_name)
    sizes = ["NUM_SEEDS=2", "K=2", f"REFRESHES={n}", *run_sizes]
    bindings = [*sizes, "ProFQIConfig.w_size=4", "ProFQIConfig.w_batch_size=4"]
    flags = [f"--gin_file={gin}", *[f"--gin_bindings={b}" for b in bindings]]
    device, here, export_dir = tmp_path / "device", tmp_path / "here", tmp_path / "export"

    def run(*cmd, **kwargs):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    dirs = [f"--root_dir={device}", f"--export_dir={export_dir}"]
    run_main(xla_profqi, ["--mode=export", *dirs, *flags], monkeypatch)
    device_env = {**env, "PYTHON": python, "SNAPSHOT_EVERY": "4", "XLA_FLAGS": DEVICE_XLA_FLAGS}
    log = run("bash", os.path.join(BENCHMARKS, "xla_profqi_device.sh"), str(tmp_path / "train"),
              str(export_dir), env=device_env)  # fmt: skip
    assert f"profqi_seed0: call {n}/{n}" in log and f"profqi_seed1: call {n}/{n}" in log
    train_dir = tmp_path / "train" / "export"
    assert sorted(p.name for p in train_dir.glob("*_at*.npz")) == [
        "profqi_seed0_state_at4.npz", "profqi_seed1_state_at4.npz"]  # fmt: skip
    run_main(xla_profqi, ["--mode=finish", *dirs, f"--device_dir={train_dir}", *flags], monkeypatch)
    # The local run in graph mode: the same arithmetic as its XLA refreshes to float rounding (the W batch
    # takes the whole of W, so the shuffle draws nothing), without compiling both seeds' refreshes into
    # one XLA program, which costs more than their training.
    parse_config([gin], [*bindings, "ProFQIConfig.jit_compile=False"])
    run_experiment(str(here), log=None)
    metrics = [json.loads((d / "metrics.json").read_text()) for d in (device, here)]
    for there, local in zip(metrics[0]["curve"], metrics[1]["curve"], strict=True):
        assert there.keys() == local.keys() and there["k"] == local["k"]
        names = [m for m in ("q_error_rms", "J", "q_error", "v_error") if m in local]
        assert names, local
        for m in names:
            assert there[m] == pytest.approx(local[m], rel=1e-4, abs=1e-6), (there["k"], m)
    # The hardware each trained on: JAX's CPU device there (the exported dots at TensorFlow's default
    # precision, no TF32 on a CPU), as each seed's process recorded it; TensorFlow's here.
    there = metrics[0]["hardware"]
    assert there == json.loads((train_dir / "profqi_seed1_hardware.json").read_text())
    assert there.pop("framework").startswith("jax ")
    assert there == {"device": "CPU", "platform": "cpu", "matmul_precision": "default", "tf32": False}
    assert metrics[1]["hardware"] == training_hardware()
