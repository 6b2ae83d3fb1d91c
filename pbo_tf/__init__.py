"""pbo_tf: projected Bellman operators (Vincent et al., AAAI 2024) in TensorFlow / tf_keras.

Importing the package:

* sets ``TF_USE_LEGACY_KERAS=1`` (unless the user already set it) *before* TensorFlow is imported, so
  that ``tf.keras`` is the Keras 2 API of ``tf_keras``, the only Keras TF-Agents 0.19 networks accept;
* sets ``TF_CPP_MIN_LOG_LEVEL=2`` (unless the user already set it): TensorFlow's C++ errors are printed, its
  INFO and WARNING lines are not; and then (unless ``PBO_TF_VERBOSE`` is set too) makes the process's first
  import of TensorFlow drop the few start-up lines that level does not silence and, on a machine where
  TensorFlow cannot use a GPU, its ``failed call to cuInit`` error (`pbo_tf.tf_startup`);
* registers the gymnasium environments of `pbo_tf.envs.registry`: ``pbo_tf/ChainWalk-v0``,
  ``pbo_tf/LQR-v0``, ``pbo_tf/CarOnHill-v0`` and ``pbo_tf/Bicycle-v0``.

If TensorFlow was imported before ``pbo_tf`` without the variable set, ``tf.keras`` may be Keras 3; the
library itself always uses ``tf_keras`` directly, so only user code relying on ``tf.keras`` is affected.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
if "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if os.environ.get("PBO_TF_VERBOSE", "") in ("", "0"):
        from pbo_tf import tf_startup as _tf_startup

        _tf_startup.install_import_hook()

from pbo_tf import envs as _envs  # noqa: E402  (registers the gymnasium ids)

__version__ = "0.1.0"

_envs.register_all()

__all__ = ["__version__"]
