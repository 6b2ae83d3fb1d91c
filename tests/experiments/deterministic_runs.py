"""Run by test_determinism.py in a subprocess (op determinism is process-wide): with
`pbo_tf.experiments.config.set_determinism`, a small offline and a small online run, each twice into its own
folder; prints ``{"enabled": ..., "offline": [curve, curve], "online": [curve, curve]}`` as JSON."""

import json
import os
import sys
import time

from tensorflow.python.framework import config as tf_config

from pbo_tf.experiments import run_experiment
from pbo_tf.experiments.config import parse_config, set_determinism

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_online import HIDDEN  # noqa: E402
from test_online import TINY as ONLINE_TINY  # noqa: E402

OFFLINE = ("lqr/profqi.gin", ["K=2", "REFRESHES=2", "PASSES_PER_REFRESH=1", "EXTRA_ITERATIONS=1"])
ONLINE = ("bicycle_online/prodqn.gin", [*ONLINE_TINY, HIDDEN["bicycle_online"]])

if __name__ == "__main__":
    root = sys.argv[1]
    set_determinism()
    out = {"enabled": tf_config.is_op_determinism_enabled()}
    for name, (gin_file, bindings) in (("offline", OFFLINE), ("online", ONLINE)):
        out[name] = []
        for i in range(2):
            parse_config([gin_file], bindings)
            t0 = time.time()
            metrics = run_experiment(os.path.join(root, f"{name}_{i}"), log=lambda _: None)
            out[name].append(metrics["curve"])
            print(f"{name} {i}: {time.time() - t0:.1f} s", file=sys.stderr)
    print(json.dumps(out))
