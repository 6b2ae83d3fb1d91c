"""Robust statistics over runs in the style of rliable (Agarwal et al., *Deep RL at the Edge of the
Statistical Precipice*, NeurIPS 2021), NumPy only.

Scores are arrays ``[n_runs, n_tasks]`` (a 1-D array is one task): ``scores[i, j]`` is run ``i``'s score on
task ``j`` (here a task is an environment, or one ``(env, K)`` point, and a run is a seed).

* `iqm`: the interquartile mean, rliable's ``aggregate_iqm``: ``scipy.stats.trim_mean(scores, 0.25,
  axis=None)`` over every run and task, which sorts the ``n`` scores, drops ``floor(n / 4)`` from each end
  and averages the rest (no fractional weights: with ``n`` not a multiple of 4 it keeps a little more than
  the middle half).
* `stratified_bootstrap_ci`: a percentile bootstrap confidence interval of any statistic of the scores,
  resampling the runs with replacement within each task (rliable's ``StratifiedBootstrap``), seeded.
* `probability_of_improvement`: ``P(X > Y)``, rliable's form: per task the Mann–Whitney ``U`` of ``X``'s
  runs against ``Y``'s over ``n_x · n_y`` (a tie counts 1/2), averaged over tasks.
  `paired_probability_of_improvement`: the same when run ``i`` of ``X`` and of ``Y`` share their seed and so
  their dataset and ``ω_0``: the fraction of seeds where ``X`` beats ``Y``, plus half the ties.
  `improvement_ci` bootstraps either (paired: the seeds resampled jointly; unpaired: each method's runs
  independently, rliable's ``StratifiedIndependentBootstrap``).
* `performance_profile`: the fraction of runs (over every task) with a score above each threshold ``τ``,
  with its bootstrap band (rliable's score distribution, ``create_performance_profile``).

On run records (`pbo_tf.analysis.results`): `k_scores` gathers each algorithm's per-seed value at one k,
`robust_table` is ``pbo-report``'s table of the IQM and ``P(ahead of the baseline)`` at ``k = K``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pbo_tf.analysis import paired, results
from pbo_tf.analysis.report import markdown_table

#: Bootstrap replications when a caller does not choose (rliable's default for performance profiles is
#: 2000, for interval estimates 50 000).
DEFAULT_REPS = 2000


def as_scores(scores) -> np.ndarray:
    """``scores`` as a float array ``[n_runs, n_tasks]`` (a 1-D array is one task).

    Raises:
      ValueError: not 1-D or 2-D, no run, or a non-finite score.
    """
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"scores must be [n_runs, n_tasks] with at least one run, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError("scores must be finite (drop the runs without a value first)")
    return array


def iqm(scores) -> float:
    """The interquartile mean of every score (`as_scores`): sorted, ``floor(n / 4)`` dropped from each end
    (``n`` = runs × tasks), the rest averaged; ``scipy.stats.trim_mean(scores, 0.25, axis=None)``."""
    flat = np.sort(as_scores(scores), axis=None)
    cut = int(0.25 * flat.size)
    return float(flat[cut : flat.size - cut].mean())


def _percentile_interval(samples: np.ndarray, confidence: float) -> np.ndarray:
    """``[2, ...]``: the ``(1 ∓ confidence) / 2`` percentiles of ``samples`` along axis 0."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = 100.0 * (1.0 - confidence) / 2.0
    return np.percentile(samples, [alpha, 100.0 - alpha], axis=0)


def stratified_resample(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One stratified bootstrap resample of ``scores`` ``[n_runs, n_tasks]``: for each task, ``n_runs``
    of its runs drawn with replacement."""
    rows = rng.integers(0, scores.shape[0], size=scores.shape)
    return np.take_along_axis(scores, rows, axis=0)


def stratified_bootstrap_ci(
    scores,
    statistic: Callable[[np.ndarray], float | np.ndarray] = iqm,
    reps: int = DEFAULT_REPS,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float | np.ndarray, np.ndarray]:
    """``statistic`` of ``scores`` and its percentile bootstrap interval.

    Args:
      scores: ``[n_runs, n_tasks]`` (or 1-D, one task).
      statistic: a function of a ``[n_runs, n_tasks]`` array returning a number or an array.
      reps: bootstrap replications, each one resampling the runs of every task with replacement.
      confidence: the interval's coverage.
      seed: seeds the resampling (the same seed, the same interval).

    Returns:
      ``(statistic(scores), interval)``; ``interval`` is ``[lower, upper]`` (``[2, ...]`` for an
      array-valued statistic).
    """
    array = as_scores(scores)
    rng = np.random.default_rng(seed)
    samples = np.array([statistic(stratified_resample(array, rng)) for _ in range(int(reps))])
    return statistic(array), _percentile_interval(samples, confidence)


def probability_of_improvement(x, y) -> float:
    """``P(X > Y)`` of two methods' scores ``[n_x, n_tasks]`` and ``[n_y, n_tasks]`` (unpaired): per task
    the fraction of the ``n_x · n_y`` pairs of runs where ``X``'s is larger, a tie counting 1/2 (the
    Mann–Whitney ``U`` over ``n_x · n_y``), averaged over tasks. A task where both hold the same scores in
    the same order gives exactly 1/2 (rliable's convention)."""
    x, y = as_scores(x), as_scores(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must have the same tasks, got {x.shape[1]} and {y.shape[1]}")
    per_task = []
    for j in range(x.shape[1]):
        if np.array_equal(x[:, j], y[:, j]):
            per_task.append(0.5)
            continue
        diff = x[:, j][:, None] - y[:, j][None, :]
        per_task.append(float(np.mean((diff > 0) + 0.5 * (diff == 0))))
    return float(np.mean(per_task))


def paired_probability_of_improvement(x, y) -> float:
    """``P(X > Y)`` paired by run: ``x[i, j]`` and ``y[i, j]`` are the same seed on task ``j``. The
    fraction of ``(seed, task)`` pairs where ``X``'s score is larger, plus half the ties, averaged per task
    then over tasks."""
    x, y = as_scores(x), as_scores(y)
    if x.shape != y.shape:
        raise ValueError(f"paired scores must have the same shape, got {x.shape} and {y.shape}")
    per_task = np.mean((x > y) + 0.5 * (x == y), axis=0)
    return float(np.mean(per_task))


def improvement_ci(
    x,
    y,
    paired: bool,
    reps: int = DEFAULT_REPS,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, np.ndarray]:
    """``P(X > Y)`` (`paired_probability_of_improvement` or `probability_of_improvement`) and its
    percentile bootstrap interval: paired, the seeds of each task resampled jointly (a seed keeps its two
    scores); unpaired, each method's runs resampled independently within each task.

    Returns:
      ``(P(X > Y), [lower, upper])``.
    """
    x, y = as_scores(x), as_scores(y)
    rng = np.random.default_rng(seed)
    if paired:
        point = paired_probability_of_improvement(x, y)
        both = np.stack([x, y], axis=-1)  # [n, tasks, 2]
        samples = []
        for _ in range(int(reps)):
            rows = rng.integers(0, x.shape[0], size=x.shape)
            pair = np.take_along_axis(both, rows[..., None], axis=0)
            samples.append(paired_probability_of_improvement(pair[..., 0], pair[..., 1]))
    else:
        point = probability_of_improvement(x, y)
        samples = [
            probability_of_improvement(stratified_resample(x, rng), stratified_resample(y, rng))
            for _ in range(int(reps))
        ]
    return point, _percentile_interval(np.asarray(samples), confidence)


def score_distribution(scores, taus: Sequence[float]) -> np.ndarray:
    """``[len(taus)]``: the fraction of every run and task with a score strictly above each ``τ``."""
    array = as_scores(scores)
    return np.mean(array[..., None] > np.asarray(taus, dtype=np.float64), axis=(0, 1))


def performance_profile(
    scores,
    taus: Sequence[float],
    reps: int = DEFAULT_REPS,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The score distribution (`score_distribution`) at ``taus`` and its stratified bootstrap band.

    Returns:
      ``(profile [len(taus)], band [2, len(taus)])``.
    """
    return stratified_bootstrap_ci(scores, lambda s: score_distribution(s, taus), reps, confidence, seed)


def paired_scores(
    method: dict[int, float], baseline: dict[int, float]
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``(method's scores, baseline's scores, seeds)`` on the seeds both have, in seed order (one task)."""
    seeds = sorted(set(method) & set(baseline))
    return (
        np.array([method[s] for s in seeds], np.float64),
        np.array([baseline[s] for s in seeds], np.float64),
        seeds,
    )


def k_scores(
    groups: Mapping[Any, Mapping[str, Any]],
    env_runs: Sequence[Mapping[str, Any]],
    metric: str,
    K: int,
    k: int,
    baseline: str | None = None,
) -> dict[str, dict[int, float]]:
    """``{algorithm: {seed: value at k}}`` of the groups (`results.group_curves` values) of one K, seeds
    without a value left out. The ``baseline`` (an algorithm whose iterate k does not depend on its K, such
    as FQI) takes its value at ``k`` from every run of K or more (`pbo_tf.analysis.paired.seed_curves`), as
    the paired table does, so its seeds run at a larger K count too."""
    out: dict[str, dict[int, float]] = {}
    for g in groups.values():
        if int(g["K"]) != K:
            continue
        columns = {int(kk): j for j, kk in enumerate(g["ks"])}
        if g["algorithm"] == baseline:
            env = results.group_members(g, env_runs)[0]["env"]
            curves = paired.seed_curves(env_runs, env, baseline, metric, min_K=K)
            out[g["algorithm"]] = {s: c[k] for s, c in curves.items() if k in c}
        elif k in columns:
            values = g["values"][:, columns[k]]
            out[g["algorithm"]] = {
                int(s): float(v) for s, v in zip(g["seeds"], values, strict=True) if np.isfinite(v)
            }
    return {name: seeds for name, seeds in out.items() if seeds}


def interval_text(point: float, interval: Sequence[float]) -> str:
    """``point [lower, upper]`` with 4 significant digits."""
    return f"{point:.4g} [{interval[0]:.4g}, {interval[1]:.4g}]"


def robust_rows(
    sections: Sequence[tuple[str, list, str, dict]],
    baseline: str | None = None,
    higher_is_better: Mapping[str, bool] | None = None,
    reps: int = DEFAULT_REPS,
    seed: int = 0,
) -> list[list[str]]:
    """The rows of `robust_table` (see there); ``sections``: `pbo_tf.analysis.report.section_groups`."""
    higher_is_better = higher_is_better or {}
    rows = []
    for env, env_runs, metric, groups in sections:
        higher = higher_is_better.get(metric, metric not in paired.LOWER_IS_BETTER)
        sign = 1.0 if higher else -1.0
        for K in sorted({int(g["K"]) for g in groups.values()}):
            scores = k_scores(groups, env_runs, metric, K, K, baseline)
            base = scores.get(baseline) if baseline is not None else None
            for name in sorted(scores):
                values = np.array([scores[name][s] for s in sorted(scores[name])])
                point, interval = stratified_bootstrap_ci(values, iqm, reps=reps, seed=seed)
                row = [env, str(K), name, str(values.size), f"`{metric}`", interval_text(point, interval)]
                if baseline is not None:
                    row += _improvement_cells(scores[name], base, name == baseline, sign, reps, seed)
                rows.append(row)
    return rows


def _improvement_cells(method, base, is_baseline, sign, reps, seed) -> list[str]:
    """``[P(ahead) [CI], how]`` of one method against the baseline's ``{seed: value}``."""
    if is_baseline or not base:
        return ["—", ""]
    x, y, seeds = paired_scores(method, base)
    if seeds:  # a seed is the same dataset and ω_0 for both: compare seed by seed
        point, interval = improvement_ci(sign * x, sign * y, paired=True, reps=reps, seed=seed)
        return [interval_text(point, interval), f"paired, {len(seeds)} seeds"]
    x = np.array(list(method.values()))
    y = np.array(list(base.values()))
    point, interval = improvement_ci(sign * x, sign * y, paired=False, reps=reps, seed=seed)
    return [interval_text(point, interval), f"unpaired, {x.size} × {y.size} runs"]


def robust_caption(reps: int = DEFAULT_REPS, baseline: str | None = None) -> str:
    """The sentence above `robust_table`: what its columns are."""
    text = (
        "At k = K, over the seeds: the interquartile mean (IQM: the mean of the middle half of the seeds' "
        "values, `scipy.stats.trim_mean(·, 0.25)` as rliable computes it) with its 95% percentile bootstrap "
        f"interval ({reps} resamples of the seeds, seed 0)"
    )
    if baseline is None:
        return text + "."
    return text + (
        f", and the probability of being ahead of `{baseline}` in the metric's direction (paired: the share "
        "of the seeds both ran where the method is ahead, a tie counting 1/2, the seeds resampled together; "
        "unpaired, when they share no seed: the Mann–Whitney share of all pairs of runs). "
        f"`{baseline}`'s value at k is taken from its runs of every K' ≥ K, as in the paired tables."
    )


def robust_table(
    sections: Sequence[tuple[str, list, str, dict]],
    baseline: str | None = None,
    higher_is_better: Mapping[str, bool] | None = None,
    reps: int = DEFAULT_REPS,
    seed: int = 0,
) -> list[str]:
    """A markdown table, one row per ``(env, K, algorithm)`` at ``k = K``: the seeds, the IQM over them
    with its 95% percentile bootstrap interval (``reps`` resamples of the seeds, seeded), and with a
    ``baseline``, ``P(ahead of the baseline)`` with its interval: paired by seed on the seeds both ran
    (`paired_probability_of_improvement`, the seeds resampled jointly), the Mann–Whitney form over all runs
    (`probability_of_improvement`) when they share no seed. "Ahead" follows the metric's direction
    (``higher_is_better``, default: `pbo_tf.analysis.paired.LOWER_IS_BETTER`'s metrics are errors)."""
    header = ["env", "K", "algorithm", "seeds", "metric", "IQM at k = K [95% CI]"]
    if baseline is not None:
        header += [f"P(ahead of `{baseline}`) at k = K [95% CI]", "comparison"]
    return markdown_table(header, robust_rows(sections, baseline, higher_is_better, reps, seed))
