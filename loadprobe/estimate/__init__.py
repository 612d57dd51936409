"""Analytic estimates that both the planner and the simulator rest on.

``servicetime`` scales a stage's measured service time to an engine it never ran on (along
the roofline); ``queueing`` estimates waits, capacity and power of a placement (M/M/c);
``tco`` prices a plan over years, bought or rented (purchase or rent, electricity, operations);
``hostpower`` says what the host CPU draws (given, RAPL, catalog, or a stated assumption). Pure
functions of their inputs: no files, no recordings, no simulation.
"""
