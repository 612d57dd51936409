"""Planning: a Portrait and Constraints in, a Plan out (``loadprobe.recommend``).

``constraints`` parses what the user asks for; ``planner`` runs the steps: ``context`` reads the
portrait (the stages, the host's CPU), ``placement`` says which engines can run each stage and at
what precision, ``sizing`` sets batches, windows, timeouts and limits, ``search`` finds the
hybrid's line-up, ``options`` assembles, simulates, judges and prices each option, ``choice``
picks the recommendation and says why; ``result`` holds Decision, Option and Plan.
``loadprobe.estimate`` gives each option's service times, queueing and cost, ``simulation``
replays it through the simulator; ``files`` writes pipeline.yaml and plans.json.
"""

from .._imports import forward

__getattr__ = forward(__name__, {"Constraints": "constraints", "Plan": "result", "recommend": "planner"})
