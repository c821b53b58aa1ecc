"""Policy: the document model, its validation, CEL compilation and evaluation.

Pure: nothing here reads the clock, the environment, a database or the network.
"""

from execauth.policy.decision import Decision, Outcome, Reason
from execauth.policy.document import PolicyDocument, parse_policy_document
from execauth.policy.engine import CompiledPolicy, PolicySet, compile_policy, evaluate

__all__ = [
    "CompiledPolicy",
    "Decision",
    "Outcome",
    "PolicyDocument",
    "PolicySet",
    "Reason",
    "compile_policy",
    "evaluate",
    "parse_policy_document",
]
