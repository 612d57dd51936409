"""``loadprobe.route.canary.CanarySplit``: the canary split's documented name; the rule is ``loadprobe.route.policy``'s.

Usage::

    from loadprobe.route.canary import CanarySplit
    split = CanarySplit(0.05)
"""

from .policy.canary import CanarySplit

__all__ = ["CanarySplit"]
