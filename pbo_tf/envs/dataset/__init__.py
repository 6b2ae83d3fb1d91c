"""A user's own offline dataset (an ``.npz`` of arrays or a Minari dataset) as an offline problem.

* `source`: reading and checking the file (`read_source`, `NPZ_KEYS`, `DatasetFileError`);
* `problem`: `DatasetProblem`, named ``dataset`` in the registry (``Experiment.problem = 'dataset'``).
"""

from pbo_tf.envs.dataset.source import MINARI_PREFIX, NPZ_KEYS, DatasetFileError, SourceData, read_source

__all__ = ["MINARI_PREFIX", "NPZ_KEYS", "DatasetFileError", "SourceData", "read_source"]
