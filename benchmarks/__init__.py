"""Measurement and XLA export/replay tools (``python benchmarks/<tool>.py``), not part of the library."""
