"""The ranges of CEL's integer types, as the ``cel`` package converts a Python ``int``.

Within ``int64`` it is a CEL ``int``; above that and within ``uint64`` a ``uint``, which
compares with an ``int`` differently; beyond both it does not convert at all. The engine's
check that a request converts, the rule index and the native conditions each decide
only for values they are sure of, and read these bounds from here. Pure.
"""

from __future__ import annotations

INT_MIN = -(2**63)  # the least CEL int
INT_END = 2**63  # one past the greatest CEL int: from here an int converts to a uint
UINT_END = 2**64  # one past the greatest CEL uint: from here an int does not convert
