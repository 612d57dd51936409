"""Planning: a Portrait and Constraints in, a Plan out (``loadprobe.recommend``).

``constraints`` parses what the user asks for; ``planner`` runs the steps: ``context`` reads the
portrait (the stages, the host's CPU), ``placement`` says which engines can run each stage and at
what precision, ``sizing`` sets batches, windows, timeouts and limits, ``search`` finds the
hybrid's line-up, ``options`` assembles, simulates, judges and prices each option, ``choice``
picks the recommendation and says why; ``result`` holds Decision, Option and Plan.
``servicetime`` and ``queueing`` estimate each option, ``simulation`` replays it through the
simulator, ``tco`` prices it; ``files`` writes pipeline.yaml and plans.json.
"""


def __getattr__(name: str):
    if name == "Constraints":
        from .constraints import Constraints

        return Constraints
    if name in ("recommend", "Plan"):
        from .planner import Plan, recommend

        return {"Plan": Plan, "recommend": recommend}[name]
    raise AttributeError(f"module 'loadprobe.plan' has no attribute {name!r}")
