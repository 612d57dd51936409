"""Analytic estimates that both the planner and the simulator rest on.

``servicetime`` scales a stage's measured service time to an engine it never ran on (along
the roofline); ``queueing`` estimates waits, capacity and power of a placement (M/M/c);
``tco`` prices a plan over years (purchase, electricity, operations). Pure functions of their
inputs: no files, no recordings, no simulation.
"""
