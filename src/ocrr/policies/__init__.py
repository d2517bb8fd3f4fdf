"""Correction policies (who corrects what) and realistic feedback (noise, delay, budget)."""

from ocrr.policies.basic import Policy, make_policy
from ocrr.policies.feedback import Feedback

__all__ = ["Feedback", "Policy", "make_policy"]
