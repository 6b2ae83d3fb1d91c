"""Shared test set-up: the legacy-Keras switch before TensorFlow loads, gin cleared around each test."""

import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import gin  # noqa: E402
import pytest  # noqa: E402

import pbo_tf  # noqa: E402,F401


@pytest.fixture(autouse=True)
def _clear_gin():
    gin.clear_config()
    yield
    gin.clear_config()
