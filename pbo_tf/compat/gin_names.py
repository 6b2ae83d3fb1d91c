"""Gin names of earlier run folders, read as the bindings that hold them today.

A run folder's ``config.gin`` and ``fingerprint.json`` keep the names they were written with. `parse_config`
(`pbo_tf.experiments.config`) reads a gin file's or binding's old names through `migrate_text`, and
`pbo_tf.experiments.run_folder` compares a recorded fingerprint through `migrate_bindings`, so committed
``results/**/config.gin`` load (``pbo-apply``, `pbo_tf.experiments.reader.RunReader.experiment`) and a run
folder started under the old names resumes.

* `RENAMED`: a parameter that moved, whatever the algorithm (``ProFQITrainer.refreshes`` →
  ``ProFQIConfig.refreshes``);
* `BY_ALGORITHM`: a runner parameter that is the algorithm's own config field (``Experiment.K`` →
  ``ProFQIConfig.K`` when ``Experiment.algorithm = @ProFQI``, ``FQIConfig.K`` with ``@FQI``);
* `RETIRED`: a parameter that no longer exists because the run never used it (the builders passed their
  own objects) or because it only held its default; it is dropped when its value is one of those the runs
  gave it, and refused (a `MigrationError` naming the binding) otherwise;
* `ADDED`: a parameter that the gin files bind since a later version, with the value every run before it
  had: a fingerprint recorded without it reads as holding that value (an online run folder from before
  ``NUM_SEEDS`` resumes);
* `LOSS_OPTIONS`: the loss's options that were fields of the PBO configs (``ProFQIConfig.fixed_point_term``,
  ``ProDQNAgent.fixed_point_iterations``, ...) and are now the loss terms' (`pbo_tf.loss_terms`):
  ``fixed_point_term = True`` is read as ``<config>.loss_terms = [@BellmanTerm(), @FixedPointTerm()]``
  (False: ``[@BellmanTerm()]``), every other option as its term's parameter (``FixedPointTerm.iterations``),
  dropped when it holds the default.
"""

from __future__ import annotations

import re
from typing import Any

_PROFQI = [
    "refreshes",
    "passes_per_refresh",
    "batch_size",
    "w_batch_size",
    "lr_schedule_counts_w_batches",
    "jit_compile",
    "cache_targets",
    "monitor_every",
    "checkpoint_every_s",
    "progress_every_s",
]
_PRODQN_AGENT = [
    "target_update_tau",
    "cache_omega_k",
    "cache_target_chain",
    "gradient_clipping",
]
_PRODQN_BUILDER = ["w_size", "w_batch_size", "extra_iterations", "lr_schedule_counts_w_batches"]
_OFFLINE_TRAINER = ["batch_size", "jit_compile", "cache_targets", "checkpoint_every_s", "progress_every_s"]

#: ``old: new`` for every algorithm.
RENAMED: dict[str, str] = {
    **{f"ProFQITrainer.{p}": f"ProFQIConfig.{p}" for p in _PROFQI},
    **{f"ProDQNAgent.{p}": f"ProDQNConfig.{p}" for p in _PRODQN_AGENT},
    **{f"ProDQN.{p}": f"ProDQNConfig.{p}" for p in _PRODQN_BUILDER},
    **{f"FQITrainer.{p}": f"FQIConfig.{p}" for p in ["max_epochs", "patience", *_OFFLINE_TRAINER]},
    **{f"IFQITrainer.{p}": f"IFQIConfig.{p}" for p in ["refreshes", "passes_per_refresh", *_OFFLINE_TRAINER]},
    **{f"make_dqn_agent.{p}": f"DQNConfig.{p}" for p in ["target_update_tau", "gradient_clipping"]},
    "IDQNAgent.gradient_clipping": "IDQNConfig.gradient_clipping",
}


def _runner_fields(runner: str, config: str, fields: list[str]) -> dict[str, str]:
    return {f"{runner}.{p}": f"{config}.{p}" for p in fields}


_ONLINE = ["K", "refreshes", "train_steps_per_refresh", "jit_compile"]
#: ``algorithm builder: {old: new}``, where the runner's parameter is that algorithm's config field.
BY_ALGORITHM: dict[str, dict[str, str]] = {
    "ProFQI": _runner_fields("Experiment", "ProFQIConfig", ["K", "extra_iterations", "w_size"]),
    "FQI": _runner_fields("Experiment", "FQIConfig", ["K", "extra_iterations"]),
    "FitOptimum": _runner_fields("Experiment", "FQIConfig", ["K", "extra_iterations"]),
    "IFQI": _runner_fields("Experiment", "IFQIConfig", ["K", "extra_iterations"]),
    "Oracle": _runner_fields("Experiment", "OracleConfig", ["K", "extra_iterations"]),
    "ProDQN": _runner_fields("OnlineExperiment", "ProDQNConfig", _ONLINE),
    "DQN": _runner_fields("OnlineExperiment", "DQNConfig", ["K", "train_steps_per_refresh", "jit_compile"]),
    "IDQN": _runner_fields("OnlineExperiment", "IDQNConfig", _ONLINE),
}
_ANY = object()
_GIVEN = "the online runner gives the agent its own"
#: ``old: (values that may be dropped, or _ANY; what to bind instead)``, for a parameter that an
#: algorithm's `BY_ALGORITHM` entry does not take.
RETIRED: dict[str, tuple[Any, str]] = {
    "ProFQITrainer.optimizer": (("@AnnealedAdam()",), "ProFQI trains with AnnealedAdam: bind AnnealedAdam.*"),
    "FQITrainer.optimizer": (
        ("@AnnealedAdam()", "@fqi/AnnealedAdam()"),
        "FQI trains with AnnealedAdam: bind AnnealedAdam.* (W's FQI members: fqi/AnnealedAdam.*)",
    ),
    "IFQITrainer.optimizer": (("@AnnealedAdam()",), "i-FQI trains with AnnealedAdam: bind AnnealedAdam.*"),
    "Experiment.w_size": (("1", "None"), "only ProFQI trains on a set W (ProFQIConfig.w_size)"),
    "OnlineExperiment.refreshes": (("None",), "DQN's refreshes are its K target updates (DQNConfig.K)"),
    "ProDQNAgent.policy_k": (("None",), "the policy acts at K (ProDQNConfig.K)"),
    **{
        f"ProDQNAgent.{p}": (_ANY, _GIVEN)
        for p in [
            "lr_schedule_steps",
            "epsilon_start",
            "epsilon_end",
            "epsilon_decay_train_steps",
            "target_pbo",
            "name",
            "debug_summaries",
            "summarize_grads_and_vars",
            "enable_summaries",
        ]
    },
    **{
        f"IDQNAgent.{p}": (_ANY, _GIVEN)
        for p in ["epsilon_start", "epsilon_end", "epsilon_decay_train_steps"]
    },
    **{
        f"{agent}.{p}": ((value,), f"{p} only held its default")
        for agent in ("make_dqn_agent", "IDQNAgent")
        for p, value in [
            ("lr_schedule_steps", "None"),
            ("name", "None"),
            ("debug_summaries", "False"),
            ("summarize_grads_and_vars", "False"),
        ]
    },
    "IDQNAgent.enable_summaries": (("True",), "enable_summaries only held its default"),
}

#: The loss's options, ``old parameter: (term parameter, its default as gin writes it)``.
_LOSS_PARAMETERS = {
    "normalisation": ("BellmanTerm.normalisation", "'mean'"),
    "stop_gradient_between": ("BellmanTerm.stop_gradient_between", "False"),
    "fixed_point_weight": ("FixedPointTerm.weight", "1.0"),
    "fixed_point_balance": ("FixedPointTerm.balance", "False"),
    "fixed_point_iterations": ("FixedPointTerm.iterations", "0"),
    "fixed_point_radius": ("FixedPointTerm.radius", "None"),
    "fixed_point_from": ("FixedPointTerm.start", "'omega0'"),
    "fixed_point_at": ("FixedPointTerm.at", "'last'"),
    "fixed_point_warmup": ("FixedPointTerm.warmup", "0.0"),
}
#: ``old owner: the config whose loss_terms lists the terms``.
_LOSS_OWNERS = {
    "ProFQITrainer": "ProFQIConfig",
    "ProFQIConfig": "ProFQIConfig",
    "ProDQNAgent": "ProDQNConfig",
    "ProDQNConfig": "ProDQNConfig",
}
#: ``old binding: (new binding, its default's text or None for fixed_point_term)``.
LOSS_OPTIONS: dict[str, tuple[str, str | None]] = {
    **{f"{owner}.fixed_point_term": (f"{config}.loss_terms", None) for owner, config in _LOSS_OWNERS.items()},
    **{f"{owner}.{old}": new for owner in _LOSS_OWNERS for old, new in _LOSS_PARAMETERS.items()},
}
_TERMS = {True: "[@BellmanTerm(), @FixedPointTerm()]", False: "[@BellmanTerm()]"}


def _same_value(text: str, default: str) -> bool:
    """Whether the gin value ``text`` is ``default`` (numbers compared as numbers, strings either quote)."""
    text = text.split("#")[0].strip()
    if text.replace('"', "'") == default:
        return True
    try:
        return float(text) == float(default)
    except ValueError:
        return False


def migrate_loss_option(key: str, value_text: str, where: str) -> tuple[str, str] | None:
    """``(new binding, value text)`` of one old loss option (`LOSS_OPTIONS`), or None when it held the
    default (it is then dropped).

    Raises:
      MigrationError: ``fixed_point_term`` bound to something else than True or False.
    """
    new, default = LOSS_OPTIONS[key]
    value = value_text.split("#")[0].strip()
    if default is None:
        if value not in ("True", "False"):
            raise MigrationError(f"{where}: {key} = {value} is not a binding; list the terms in {new}")
        return new, _TERMS[value == "True"]
    return None if _same_value(value, default) else (new, value)


_ALGORITHM = re.compile(r"^\s*(?:Experiment\.algorithm|OnlineExperiment\.agent)\s*=\s*@(\w+)", re.M)
_BINDING = re.compile(r"^(\s*)((?:[\w.]+/)?)((?:\w+\.)*)(\w+)\.(\w+)(\s*=\s*)(.*)$")


class MigrationError(ValueError):
    """An old binding whose value the runs never had: it cannot be read as today's bindings."""


def algorithm_of(text: str, algorithm: str | None = None) -> str | None:
    """The builder the last ``Experiment.algorithm`` / ``OnlineExperiment.agent`` line of ``text`` binds
    (``ProFQI``), else ``algorithm``."""
    found = _ALGORITHM.findall(text)
    return found[-1] if found else algorithm


def new_name(key: str, algorithm: str | None) -> str:
    """The binding ``key`` (``Configurable.param``) is read as (itself when nothing renamed it)."""
    return BY_ALGORITHM.get(algorithm or "", {}).get(key) or RENAMED.get(key, key)


def retired(key: str, algorithm: str | None) -> bool:
    """Whether ``key`` no longer exists for ``algorithm``: in `RETIRED` and not taken by its config."""
    return key in RETIRED and key not in BY_ALGORITHM.get(algorithm or "", {})


def _retired(key: str, value_text: str, where: str) -> None:
    allowed, instead = RETIRED[key]
    if allowed is not _ANY and value_text.strip() not in allowed:
        raise MigrationError(f"{where}: {key} = {value_text.strip()} is not a binding; {instead}")


def migrate_text(text: str, algorithm: str | None, where: str = "gin") -> tuple[str, list[str]]:
    """``text`` with its old names read as today's (same line count: a retired binding becomes blank
    lines) and the ``old -> new`` notes.

    Raises:
      MigrationError: a retired binding with a value the runs never had.
    """
    lines, notes, out, i = text.split("\n"), [], [], 0
    while i < len(lines):
        match = _BINDING.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        indent, scope, module, name, param, eq, rest = match.groups()
        key = f"{name}.{param}"
        if key in LOSS_OPTIONS:
            moved = migrate_loss_option(key, rest, where)
            notes.append(f"{key} -> {moved[0] if moved else '(default, dropped)'}")
            out.append("" if moved is None else f"{indent}{scope}{moved[0]}{eq}{moved[1]}")
            i += 1
            continue
        if retired(key, algorithm):
            extent = [rest]
            while _open_brackets("\n".join(extent)) > 0 and i + len(extent) < len(lines):
                extent.append(lines[i + len(extent)])
            _retired(key, "\n".join(extent).split("#")[0], where)
            notes.append(f"{key} (dropped)")
            out += [""] * len(extent)
            i += len(extent)
            continue
        new = new_name(key, algorithm)
        if new != key:
            notes.append(f"{key} -> {new}")
            out.append(f"{indent}{scope}{new}{eq}{rest}")
        else:
            out.append(lines[i])
        i += 1
    return "\n".join(out), notes


#: ``binding: value`` the runs had before the gin files bound it (see the module docstring).
ADDED: dict[str, Any] = {"OnlineExperiment.num_seeds": 1}


def migrate_bindings(bindings: dict[str, Any]) -> dict[str, Any]:
    """A fingerprint's resolved bindings (`pbo_tf.experiments.config.resolved_bindings`) under today's names.

    Raises:
      MigrationError: a retired binding with a value the runs never had.
    """
    algorithm = None
    for key in ("Experiment.algorithm", "OnlineExperiment.agent"):
        if isinstance(bindings.get(key), str):
            algorithm = bindings[key].lstrip("@").split("(")[0]
    out = {}
    for full, value in bindings.items():
        scope, _, key = full.rpartition("/")
        prefix = f"{scope}/" if scope else ""
        if key in LOSS_OPTIONS:
            moved = migrate_loss_option(key, repr(value), "the run folder's fingerprint")
            if moved is not None:
                new, text = moved
                out[prefix + new] = _loss_value(text, value)
            continue
        if retired(key, algorithm):
            _retired(key, str(value), "the run folder's fingerprint")
            continue
        out[prefix + new_name(key, algorithm)] = value
    for key, value in ADDED.items():
        owner = key.split(".")[0] + "."
        if key not in out and any(k.startswith(owner) for k in out):
            out[key] = value
    return out


def _loss_value(text: str, value: Any) -> Any:
    """A migrated loss option's value as `pbo_tf.experiments.config.resolved_bindings` gives it: the terms'
    list as their references' texts, any other value unchanged."""
    if text in _TERMS.values():
        return [f"@{name}()" for name in re.findall(r"@(\w+)\(\)", text)]
    return value


def _open_brackets(text: str) -> int:
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "", text.split("#")[0])
    return sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")
