"""Experiments: the offline runner, the online loop, their gin configs and run folders.

`run_experiment` and `make_experiment` (`pbo_tf.experiments.run`) run or build the experiment the parsed
gin config describes; they are imported on first use, so that the light modules of this package (config,
run folders) do not import TensorFlow. Reading finished runs is `pbo_tf.analysis`.
"""

__all__ = ["make_experiment", "run_experiment"]


def __getattr__(name: str):
    if name in __all__:
        from pbo_tf.experiments import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
