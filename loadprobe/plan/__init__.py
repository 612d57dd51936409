"""Planning: a Portrait and Constraints in, a Plan out (``loadprobe.recommend``).

``constraints`` parses what the user asks for; ``planner`` places stages on engines, with
``loadprobe.estimate``'s service times, queueing and costs for each option; ``simulation``
replays the options through the simulator; ``files`` writes pipeline.yaml and plans.json.
"""


def __getattr__(name: str):
    if name == "Constraints":
        from .constraints import Constraints

        return Constraints
    if name in ("recommend", "Plan"):
        from .planner import Plan, recommend

        return {"Plan": Plan, "recommend": recommend}[name]
    raise AttributeError(f"module 'loadprobe.plan' has no attribute {name!r}")
