"""The exact car-on-hill optimum: ``V*`` and ``Q*`` by an exhaustive (pruned) search over action sequences.

`first_passage` runs a breadth-first search over all action sequences (see its docstring), made affordable
by an exact branch-and-bound pruning (certified upper bounds from rollouts + a sound energy bound), and
`optimal_values` turns it into ``V*``/``Q*`` on the 17 × 17 evaluation grid (`pbo_tf.envs.car_on_hill.grid`),
cached as ``.npz``. The package ships the full-horizon result in `PACKAGED_DATA_DIR`
(``pbo_tf/envs/car_on_hill/data``) because the search is long; other settings are computed once and cached
in `default_cache_dir`.
"""

from __future__ import annotations

import math
import os
import time
import warnings
import zipfile
from collections.abc import Callable
from typing import Any

import numpy as np

from pbo_tf.envs.car_on_hill.dynamics import (
    ACTION_FORCES,
    DT,
    GAMMA,
    GRAVITY,
    HORIZON,
    MASS,
    MAX_POSITION,
    MAX_VELOCITY,
    N_SUBSTEPS,
    _outcome_pv,
    hill,
    hill_derivatives,
    step_pv,
)
from pbo_tf.envs.car_on_hill.grid import DEFAULT_LAYOUT, GRID_SIZE, grid_centres

BFS_LATTICE = 1e-5
_CACHE_VERSION = 1
# The folder of the shipped ``.npz`` results (package data of ``pbo_tf.envs``).
PACKAGED_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def _numpy_stepper(n_substeps: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], tuple]:
    return lambda p, v, a: step_pv(p, v, a, np, n_substeps)


def _tensorflow_stepper(
    n_substeps: int, chunk: int = 1 << 15
) -> Callable[[np.ndarray, np.ndarray, np.ndarray], tuple]:
    """`step_pv` compiled with XLA on fixed-size chunks (one compilation). On a CPU it gains little over
    NumPy (the traced path integrates the junction-crossing split for every state, not only for the few
    that cross), so it mainly pays off on a GPU."""
    import tensorflow as tf
    import tensorflow.experimental.numpy as tnp

    compiled = tf.function(
        lambda p, v, a: step_pv(p, v, a, tnp, n_substeps), jit_compile=True, autograph=False
    )

    def stepper(p: np.ndarray, v: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out_p, out_v = np.empty_like(p), np.empty_like(v)
        for lo in range(0, len(p), chunk):
            hi = min(lo + chunk, len(p))
            pad = chunk - (hi - lo)
            args = [np.pad(x[lo:hi], (0, pad)) for x in (p, v, a)]
            rp, rv = compiled(*(tf.constant(x) for x in args))
            out_p[lo:hi], out_v[lo:hi] = rp.numpy()[: hi - lo], rv.numpy()[: hi - lo]
        return out_p, out_v

    return stepper


# Energy per unit mass shifted to be >= 0: W = v²(1 + H′²)/2 + g (H(p) − min H), min H = −1/4. Along any
# trajectory dW/dt = u v / m and |v| ≤ √(2W), so √W grows at most at rate U/(m√2) and |p| moves at most
# √2 (√W0 t + U t² / (2 m √2)). Reaching p > 1 needs W > g (H(1) + 1/4).
_U_MAX = max(abs(f) for f in ACTION_FORCES)
_SQRT_W_TOP = math.sqrt(GRAVITY * (1.0 / math.sqrt(6.0) + 0.25))
_DIVE_BRAKE_SPEEDS = (np.inf, 2.5, 2.0)  # dive policies: +4 when 0 < v <= speed, else -4


def shifted_energy(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``W = v² (1 + H′(p)²) / 2 + g (Hill(p) + 1/4) ≥ 0``, the mechanical energy per unit mass, shifted."""
    d1, _ = hill_derivatives(p)
    return 0.5 * v * v * (1.0 + d1 * d1) + GRAVITY * (hill(p) + 0.25)


def can_reach_top(p: np.ndarray, v: np.ndarray, steps: Any, margin: float = 1e-3) -> np.ndarray:
    """A necessary condition for any action sequence to reach ``p > 1`` within ``steps`` steps from (p, v).

    Sound for the exact dynamics (energy bound, see the comment above); ``margin`` absorbs the integration
    error (~1e-7). Used by `first_passage` to discard states that cannot beat a known success depth.
    """
    t = DT * np.asarray(steps, dtype=np.float64)
    root_w = np.sqrt(np.maximum(shifted_energy(p, v), 0.0))
    rate = _U_MAX / (MASS * math.sqrt(2.0))
    energy_ok = root_w + rate * t >= _SQRT_W_TOP - margin
    reach_ok = p + math.sqrt(2.0) * (root_w * t + 0.5 * rate * t * t) >= MAX_POSITION - margin
    return energy_ok & reach_ok


def _dive_success_steps(
    p: np.ndarray, v: np.ndarray, limits: np.ndarray, brake_speeds: np.ndarray, stepper: Callable
) -> np.ndarray:
    """Rolls out "+4 when 0 < v <= brake_speed, else −4" from each state for at most ``limits`` steps.

    Returns the step at which each rollout reaches the top, or a huge number if it does not.
    """
    success = np.full(len(p), np.iinfo(np.int64).max // 4, dtype=np.int64)
    idx = np.arange(len(p))
    for step in range(1, int(limits.max(initial=0)) + 1):
        keep = limits[idx] >= step
        idx, p, v = idx[keep], p[keep], v[keep]
        if not len(idx):
            break
        p, v = stepper(p, v, ((v > 0.0) & (v <= brake_speeds[idx])).astype(np.int64))
        crash, top = _outcome_pv(p, v)
        success[idx[top]] = step
        alive = ~(crash | top)
        idx, p, v = idx[alive], p[alive], v[alive]
    return success


def first_passage(
    states: np.ndarray,
    horizon: int = HORIZON,
    *,
    lattice: float | None = BFS_LATTICE,
    prune: bool = True,
    dives_per_root: int = 8,
    dive_steps: int = 40,
    dive_min_frontier: int = 64,
    n_substeps: int = N_SUBSTEPS,
    backend: str = "numpy",
    max_frontier: int = 1 << 26,
    chunk: int = 1 << 14,
    stats: dict[str, Any] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Breadth-first search over every action sequence of length ≤ ``horizon`` from each state.

    All roots advance together as one vectorised frontier, level by level; a level expands every frontier
    state with both actions. A root is resolved at the first depth ``d`` where some sequence reaches the top
    (``p > 1``, ``|v| ≤ 3``): outcome +1; or where its last surviving sequence terminates otherwise: outcome
    −1; a root with a sequence alive after ``horizon`` steps gets outcome 0, depth ``horizon``.

    Merging: frontier states of the same root whose ``(p, v)`` fall in the same cell of the lattice of
    spacing ``lattice`` (anchored at ``(−1, −3)``) are merged, the first one kept (``None``: no merging). On
    car-on-hill the 2^d sequences stay far apart, so merging at 1e-5 almost never happens.

    Pruning (exact, ``prune=True``): the 2^d growth is tamed by branch and bound. At every level a few
    frontier states of each root with a large frontier (the ``dives_per_root`` most energetic) are rolled
    out with simple energy-pumping policies; a rollout that reaches the top certifies an upper bound ``b``
    on the root's success depth (the state's own action sequence followed by the rollout's). From then on
    the root's states that cannot reach the top within ``b − depth`` more steps (`can_reach_top`, a sound
    energy bound) are discarded: they cannot take part in any success at depth ≤ ``b``, so the first
    success depth is unchanged (tested against ``prune=False``). Roots without a certified bound are never
    pruned, so their −1/0 outcomes are exhaustive. From the bottom of the hill (answer depth 19) the
    largest frontier shrinks from ~250 000 to ~2 800 states.

    Args:
      states: float ``[N, 2]`` roots (inside ``[-1, 1] x [-3, 3]``).
      horizon: maximum number of steps.
      lattice: merge spacing, or ``None``.
      prune: enable the branch-and-bound pruning.
      dives_per_root: rollouts (per policy) per unresolved root and level that look for upper bounds.
      dive_steps: maximum length of those rollouts.
      dive_min_frontier: only roots with at least this many frontier states dive (pruning is pointless on
        small frontiers).
      n_substeps: RK4 sub-steps per step.
      backend: ``"numpy"`` or ``"tensorflow"`` (`step_pv` compiled with XLA in fixed-size chunks: pays
        off on a GPU; on a CPU it costs a long compilation for a small gain).
      max_frontier: raise instead of growing the frontier beyond this many states.
      chunk: number of frontier states expanded at once (NumPy is faster when a chunk's temporaries fit
        in the CPU cache than with one huge batch).
      stats: optional dict that receives ``frontier_sizes`` (after each level), ``merged`` and ``pruned``
        (states discarded in total) and ``seconds``.

    Returns:
      ``(outcome, depth)``: int8 ``[N]`` in {+1, −1, 0} and int64 ``[N]``.

    Raises:
      RuntimeError: the frontier would exceed ``max_frontier``.
    """
    started = time.perf_counter()
    roots = np.asarray(states, dtype=np.float64).reshape(-1, 2)
    n_roots = len(roots)
    if backend == "numpy":
        stepper = _numpy_stepper(n_substeps)
    elif backend == "tensorflow":
        stepper = _tensorflow_stepper(n_substeps)
    else:
        raise ValueError(f"backend must be 'numpy' or 'tensorflow', got {backend!r}")
    if lattice is not None:
        if lattice <= 0:
            raise ValueError(f"lattice must be positive or None, got {lattice!r}")
        bits_p = int(np.ceil(np.log2(2.0 * MAX_POSITION / lattice + 2)))
        bits_v = int(np.ceil(np.log2(2.0 * MAX_VELOCITY / lattice + 2)))
        if bits_p + bits_v + max(1, int(np.ceil(np.log2(n_roots + 1)))) > 63:
            raise ValueError(f"lattice {lattice} is too fine for {n_roots} roots (int64 keys)")
    no_bound = horizon + 1
    outcome = np.zeros(n_roots, dtype=np.int8)
    depth = np.full(n_roots, horizon, dtype=np.int64)
    resolved = np.zeros(n_roots, dtype=bool)
    bound = np.full(n_roots, no_bound, dtype=np.int64)  # certified upper bound on the success depth
    p, v, root = roots[:, 0].copy(), roots[:, 1].copy(), np.arange(n_roots)
    sizes: list[int] = []
    merged = pruned = 0

    def improve_bounds(level: int) -> None:
        """Dives from the most energetic frontier states of the roots whose frontier is large enough for
        pruning to matter (updates ``bound``)."""
        if not prune or not len(p) or dives_per_root < 1:
            return
        frontier_size = np.bincount(root, minlength=n_roots)
        wanted = (frontier_size >= dive_min_frontier) & (bound > level + 1)
        candidates = np.flatnonzero(wanted[root])
        if not len(candidates):
            return
        order = candidates[np.lexsort((-shifted_energy(p[candidates], v[candidates]), root[candidates]))]
        sorted_roots = root[order]
        group_start = np.searchsorted(sorted_roots, sorted_roots, side="left")
        chosen = order[np.arange(len(order)) - group_start < dives_per_root]
        chosen = np.tile(chosen, len(_DIVE_BRAKE_SPEEDS))
        brake = np.repeat(_DIVE_BRAKE_SPEEDS, len(chosen) // len(_DIVE_BRAKE_SPEEDS))
        limits = np.minimum(np.minimum(bound[root[chosen]] - 1, horizon) - level, dive_steps)
        steps = _dive_success_steps(p[chosen], v[chosen], limits, brake, stepper)
        hit = steps <= limits
        np.minimum.at(bound, root[chosen[hit]], level + steps[hit])

    for level in range(1, horizon + 1):
        parts, success = [], np.zeros(n_roots, dtype=bool)
        for lo in range(0, len(p), chunk):
            cp, cv, cr = p[lo : lo + chunk], v[lo : lo + chunk], root[lo : lo + chunk]
            m = len(cp)
            np_, nv = stepper(np.concatenate([cp, cp]), np.concatenate([cv, cv]), np.repeat(np.arange(2), m))
            nr = np.concatenate([cr, cr])
            crash, top = _outcome_pv(np_, nv)
            success[nr[top]] = True
            alive = ~(crash | top)
            parts.append((np_[alive], nv[alive], nr[alive]))
        new_success = success & ~resolved
        outcome[new_success], depth[new_success], resolved[new_success] = 1, level, True
        p = np.concatenate([x[0] for x in parts])
        v = np.concatenate([x[1] for x in parts])
        root = np.concatenate([x[2] for x in parts])
        keep = ~resolved[root]
        p, v, root = p[keep], v[keep], root[keep]
        # A certified success at this depth that the search did not reproduce (its path was merged away).
        due = ~resolved & (bound <= level)
        outcome[due], depth[due], resolved[due] = 1, bound[due], True
        keep = ~resolved[root]
        p, v, root = p[keep], v[keep], root[keep]
        if lattice is not None and len(p):
            ip = np.floor((p + MAX_POSITION) / lattice).astype(np.int64)
            iv = np.floor((v + MAX_VELOCITY) / lattice).astype(np.int64)
            key = (root << (bits_p + bits_v)) | (ip << bits_v) | iv
            _, first = np.unique(key, return_index=True)
            merged += len(p) - len(first)
            first.sort()
            p, v, root = p[first], v[first], root[first]
        improve_bounds(level)
        if prune and len(p):
            bounded = bound[root] <= horizon
            keep = ~bounded | can_reach_top(p, v, bound[root] - level)
            pruned += len(p) - int(keep.sum())
            p, v, root = p[keep], v[keep], root[keep]
        has_alive = np.zeros(n_roots, dtype=bool)
        has_alive[root] = True
        empty = ~resolved & ~has_alive
        certified = empty & (bound <= horizon)  # every state pruned: the certified success is the optimum
        outcome[certified], depth[certified], resolved[certified] = 1, bound[certified], True
        dead = empty & ~certified
        outcome[dead], depth[dead], resolved[dead] = -1, level, True
        sizes.append(len(p))
        if len(p) > max_frontier:
            raise RuntimeError(
                f"first_passage: frontier of {len(p)} states at depth {level} exceeds "
                f"max_frontier={max_frontier}"
            )
        if resolved.all():
            break
    if stats is not None:
        stats.update(
            frontier_sizes=sizes, merged=merged, pruned=pruned, seconds=time.perf_counter() - started
        )
    return outcome, depth


def values_from_first_passage(outcome: np.ndarray, depth: np.ndarray, gamma: float = GAMMA) -> np.ndarray:
    """``V*``: ``γ^(d−1)`` for outcome +1, ``−γ^(d−1)`` for −1, 0 for 0 (float64)."""
    return outcome.astype(np.float64) * gamma ** (np.asarray(depth, dtype=np.float64) - 1.0)


def optimal_state_values(
    states: np.ndarray, horizon: int = HORIZON, gamma: float = GAMMA, **kwargs: Any
) -> np.ndarray:
    """Exact ``V*`` ``[N]`` of states ``[N, 2]`` by `first_passage` (``kwargs`` are forwarded to it)."""
    return values_from_first_passage(*first_passage(states, horizon, **kwargs), gamma)


def optimal_q_values(
    states: np.ndarray,
    horizon: int = HORIZON,
    gamma: float = GAMMA,
    n_substeps: int = N_SUBSTEPS,
    **kwargs: Any,
) -> np.ndarray:
    """Exact ``Q*`` ``[N, 2]``: ``r`` for a terminal successor, else ``γ V*(s′)`` with ``V*(s′)`` searched
    over ``horizon − 1`` steps (``s′`` the exact successor; ``kwargs`` are forwarded to `first_passage`)."""
    states = np.asarray(states, dtype=np.float64).reshape(-1, 2)
    n = len(states)
    q = optimal_q_values_of_pairs(
        np.concatenate([states, states]), np.repeat([0, 1], n), horizon, gamma, n_substeps, **kwargs
    )
    return q.reshape(2, n).T


def optimal_q_values_of_pairs(
    states: np.ndarray,
    actions: np.ndarray,
    horizon: int = HORIZON,
    gamma: float = GAMMA,
    n_substeps: int = N_SUBSTEPS,
    **kwargs: Any,
) -> np.ndarray:
    """Exact ``Q*(s_i, a_i)`` ``[N]`` of state-action pairs (states ``[N, 2]``, actions ``[N]`` in {0, 1}):
    `optimal_q_values`' column ``a_i`` of row ``i``, one search per pair instead of two."""
    states = np.asarray(states, dtype=np.float64).reshape(-1, 2)
    actions = np.asarray(actions).reshape(-1)
    if len(actions) != len(states) or not np.isin(actions, (0, 1)).all():
        raise ValueError(f"actions must be {len(states)} values in {{0, 1}}, got {actions!r}")
    p2, v2 = step_pv(states[:, 0], states[:, 1], actions.astype(np.int64), np, n_substeps)
    crash, top = _outcome_pv(p2, v2)
    q = np.where(top, 1.0, np.where(crash, -1.0, 0.0))
    live = ~(crash | top)
    if live.any() and horizon > 1:
        successors = np.stack([p2[live], v2[live]], axis=1)
        q[live] = gamma * optimal_state_values(
            successors, horizon - 1, gamma, n_substeps=n_substeps, **kwargs
        )
    return q


def cached_optimal_q_values_of_pairs(
    states: np.ndarray,
    actions: np.ndarray,
    gamma: float = GAMMA,
    horizon: int = HORIZON,
    cache_dir: str | None = None,
    *,
    lattice: float | None = BFS_LATTICE,
    n_substeps: int = N_SUBSTEPS,
    use_cache: bool = True,
    log: Callable[[str], None] | None = None,
) -> np.ndarray:
    """`optimal_q_values_of_pairs`, cached in ``cache_dir`` (default `default_cache_dir`) under a digest of
    the pairs and the search's settings: a dataset's few thousand pairs take minutes to search (``log``, if
    given, hears when a search starts and how long it took); an unreadable cache file is searched again."""
    import hashlib

    from pbo_tf.io import atomic_open

    states = np.ascontiguousarray(np.asarray(states, dtype=np.float64).reshape(-1, 2))
    actions = np.ascontiguousarray(np.asarray(actions, dtype=np.int64).reshape(-1))
    digest = hashlib.sha256(states.tobytes() + actions.tobytes()).hexdigest()[:16]
    name = (
        f"car_on_hill_optimal_pairs_{digest}_gamma{gamma!r}_h{horizon}_lattice{lattice!r}_rk{n_substeps}"
        f"_v{_CACHE_VERSION}.npz"
    )
    path = os.path.join(cache_dir or default_cache_dir(), name)
    cached = (
        _read_cache(path, {"q_star": actions.shape}, "searching the car-on-hill optimum again")
        if use_cache
        else None
    )
    if cached is not None:
        return cached["q_star"]
    if log is not None:
        log(f"car-on-hill: searching the exact Q* of {len(actions)} state-action pairs (cached in {path})")
    started = time.perf_counter()
    q = optimal_q_values_of_pairs(states, actions, horizon, gamma, n_substeps, lattice=lattice)
    seconds = time.perf_counter() - started
    if log is not None:
        log(f"car-on-hill: exact Q* of {len(actions)} pairs in {seconds:.0f} s")
    if use_cache:
        with atomic_open(path, "wb") as f:
            np.savez(f, q_star=q, states=states, actions=actions, seconds=np.float64(seconds))
    return q


def _read_cache(path: str, shapes: dict[str, tuple[int, ...]], action: str) -> dict[str, np.ndarray] | None:
    """The arrays ``shapes`` names, as float64, from the ``.npz`` cache ``path``; None when there is no such
    file, or when it is unreadable or holds other shapes (then a warning starting with ``action`` says so)."""
    if not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in shapes}
        got = {name: a.shape for name, a in arrays.items()}
        if got != shapes:
            raise ValueError(f"shapes {got}")
        return {name: a.astype(np.float64) for name, a in arrays.items()}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
        warnings.warn(f"{action}: unreadable cache {path!r} ({e})", stacklevel=3)
        return None


def default_cache_dir() -> str:
    """``$PBO_TF_CACHE`` if set, else ``~/.cache/pbo_tf``."""
    return os.environ.get("PBO_TF_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pbo_tf")


def optimal_values_cache_path(
    cache_dir: str | None = None,
    gamma: float = GAMMA,
    horizon: int = HORIZON,
    layout: str = DEFAULT_LAYOUT,
    lattice: float | None = BFS_LATTICE,
    n_substeps: int = N_SUBSTEPS,
) -> str:
    """The ``.npz`` file `optimal_values` reads and writes for these parameters."""
    name = (
        f"car_on_hill_optimal_{layout}{GRID_SIZE}_gamma{gamma!r}_h{horizon}_lattice{lattice!r}"
        f"_rk{n_substeps}_v{_CACHE_VERSION}.npz"
    )
    return os.path.join(cache_dir or default_cache_dir(), name)


def optimal_values(
    gamma: float = GAMMA,
    horizon: int = HORIZON,
    cache_dir: str | None = None,
    *,
    layout: str = DEFAULT_LAYOUT,
    lattice: float | None = BFS_LATTICE,
    n_substeps: int = N_SUBSTEPS,
    backend: str = "numpy",
    use_cache: bool = True,
    verbose: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``V*`` ``[289]`` and ``Q*`` ``[289, 2]`` at the grid states (`grid_centres`), cached.

    ``Q*`` comes from `optimal_q_values` (one search from the 578 successors) and ``V* = max_a Q*``, which is
    exactly the search from the grid state itself (the best first action; tested on a subset of cells).
    The first call computes them (a long search, made affordable by `first_passage`'s pruning) and writes
    ``optimal_values_cache_path(...)`` atomically (``.npz``, no pickle); later calls load the file. An
    unreadable or inconsistent cache file is recomputed and overwritten.

    Args:
      gamma, horizon: discount and maximum number of steps.
      cache_dir: folder of the cache (default `default_cache_dir`).
      layout: grid layout (`pbo_tf.envs.car_on_hill.grid`).
      lattice, n_substeps, backend: search settings (`first_passage`).
      use_cache: read and write the cache.
      verbose: print the search time.

    Returns:
      ``(v_star, q_star)`` float64.
    """
    from pbo_tf.io import atomic_open

    path = optimal_values_cache_path(cache_dir, gamma, horizon, layout, lattice, n_substeps)
    n_cells = GRID_SIZE * GRID_SIZE
    shapes = {"v_star": (n_cells,), "q_star": (n_cells, 2)}
    cached = _read_cache(path, shapes, "recomputing the car-on-hill optimum") if use_cache else None
    if cached is not None:
        return cached["v_star"], cached["q_star"]
    started = time.perf_counter()
    q_star = optimal_q_values(
        grid_centres(layout), horizon, gamma, n_substeps, lattice=lattice, backend=backend
    )
    v_star = q_star.max(axis=1)
    seconds = time.perf_counter() - started
    if verbose:
        print(f"car-on-hill optimal values: {seconds:.1f} s")
    if use_cache:
        with atomic_open(path, "wb") as f:
            np.savez(
                f,
                v_star=v_star,
                q_star=q_star,
                gamma=np.float64(gamma),
                horizon=np.int64(horizon),
                lattice=np.float64(np.nan if lattice is None else lattice),
                n_substeps=np.int64(n_substeps),
                layout=np.str_(layout),
                seconds=np.float64(seconds),
            )
    return v_star, q_star
