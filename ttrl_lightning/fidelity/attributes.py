"""Property fidelity (PROP): F1 over the ``(attribute, value)`` pairs two descriptions state.

Pixelis scores property tools with "F1-style scores": the predicted pairs ``P`` and reference pairs ``R``
over :data:`ATTRIBUTES` (only attributes a side states count) give ``F1 = 2 |P ∩ R| / (|P| + |R|)``.
"""

from __future__ import annotations

from typing import Any, Mapping

#: the attributes PROP reports
ATTRIBUTES = ("colour", "shape", "size")


def attribute_f1(
    predicted: Mapping[str, Any], reference: Mapping[str, Any], attributes: tuple[str, ...] = ATTRIBUTES
) -> float:
    """F1 of the stated ``(attribute, value)`` pairs; two descriptions stating nothing score 1."""
    p = {(a, predicted[a]) for a in attributes if predicted.get(a) is not None}
    r = {(a, reference[a]) for a in attributes if reference.get(a) is not None}
    if not p and not r:
        return 1.0
    return 2 * len(p & r) / (len(p) + len(r))
