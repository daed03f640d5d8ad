"""The fused Reframe-and-Solve output format and its format score (Self-Harmony, "Fused reframe-and-solve").

One fused generation holds three sections, each introduced by its header at the start of a line
(case-insensitive, optional markdown ``#``/``*`` before it)::

    STRATEGY: <name of the reframing strategy>
    REWRITTEN PROBLEM: <the reframed question>
    SOLUTION: <the solution of the reframed question, ending in its final answer>

``format_score = (#sections present with real content) / 3``; a section's content runs to the next header.
Content is a placeholder when it is empty, only dots / dashes / an ellipsis, wholly in square or angle
brackets (``[strategy name]``, ``<...>``) or contains the word "placeholder". (The public implementation
also rejects any content holding a bracket; math such as ``[0, 1]`` is real content here.)
``format_penalty = 1 - format_score``.
"""
from __future__ import annotations

import re

__all__ = ["FUSED_SECTIONS", "fused_format_score", "fused_template"]

#: section name -> header text (order of the fused output).
FUSED_SECTIONS = {"strategy": "STRATEGY", "rewritten": "REWRITTEN PROBLEM", "solution": "SOLUTION"}

_HEADER = re.compile(r"^[ \t#*]*(" + "|".join(re.escape(h) for h in FUSED_SECTIONS.values()) + r")[ \t*]*:",
                     re.IGNORECASE | re.MULTILINE)
_PLACEHOLDER = re.compile(r"^(?:[.\-\u2026\s]*|\[[^\[\]]*\]|<[^<>]*>)$|placeholder", re.IGNORECASE)


def _is_content(text: str) -> bool:
    text = text.strip()
    return bool(text) and _PLACEHOLDER.search(text) is None


def fused_format_score(text: str | None) -> float:
    """Share of the three fused sections present with real content, in ``{0, 1/3, 2/3, 1}``."""
    if not text:
        return 0.0
    heads = list(_HEADER.finditer(text))
    by_header = {h.upper(): name for name, h in FUSED_SECTIONS.items()}
    good: set[str] = set()
    for k, m in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(text)
        name = by_header[re.sub(r"\s+", " ", m.group(1).upper())]
        if _is_content(text[m.end():end]):
            good.add(name)
    return len(good) / len(FUSED_SECTIONS)


def fused_template(strategy: str, rewritten: str, solution: str) -> str:
    """A fused output in the format above (for data generators and tests)."""
    parts = dict(strategy=strategy, rewritten=rewritten, solution=solution)
    return "\n".join(f"{FUSED_SECTIONS[k]}: {parts[k]}" for k in FUSED_SECTIONS)
