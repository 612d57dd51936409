"""Renderers of a load portrait, installed as ``loadprobe.reports``: the HTML report and the terminal summary.

Generated output never lands here: reports are written to ``./loadprobe-report/`` in the
user's working directory by default.
"""
