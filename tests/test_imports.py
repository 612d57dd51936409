"""Optional backends (the C map kernel, the compiled simulator loop): loaded once, with the reason when not."""

from __future__ import annotations

import sys

import pytest

from loadprobe._imports import load_once


def test_a_backend_that_cannot_load_is_none_with_why_and_is_not_tried_again(tmp_path, monkeypatch):
    state: dict = {}
    assert load_once(state, "loadprobe_no_such_backend") is None
    assert state["error"] == "ModuleNotFoundError: No module named 'loadprobe_no_such_backend'"
    (tmp_path / "loadprobe_no_such_backend.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "loadprobe_no_such_backend", raising=False)
    assert load_once(state, "loadprobe_no_such_backend") is None  # decided once: the file appearing changes nothing
    state.clear()  # as in a fresh process
    assert load_once(state, "loadprobe_no_such_backend").VALUE == 7 and state["error"] is None


def test_only_the_given_errors_mean_unavailable(tmp_path, monkeypatch):
    (tmp_path / "loadprobe_broken_backend.py").write_text("raise ValueError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="broken on purpose"):
        load_once({}, "loadprobe_broken_backend", errors=(ImportError, OSError))
    state: dict = {}
    assert load_once(state, "loadprobe_broken_backend") is None  # any Exception, by default
    assert state["error"] == "ValueError: broken on purpose"
