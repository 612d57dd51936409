"""Helpers shared by tests of several folders: HTTP servers on 127.0.0.1, small ONNX models, a headless browser."""
