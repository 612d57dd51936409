"""Helpers shared by tests of several folders, and by benchmarks/: HTTP servers on 127.0.0.1, small ONNX
models, a headless browser, a synthetic span dataset and a synthetic fleet portrait."""
