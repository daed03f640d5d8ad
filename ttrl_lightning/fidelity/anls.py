"""ANLS, the Average Normalized Levenshtein Similarity of ST-VQA / DocVQA / InfoVQA (Biten et al. 2019).

For a prediction ``p`` and the references ``g_1..g_k`` of one question::

    NL(p, g) = lev(p, g) / max(|p|, |g|)
    s(p)     = max_k ( 1 - NL(p, g_k)  if NL(p, g_k) < tau  else 0 ),   tau = 0.5

and ANLS is the mean of ``s`` over questions. Strings are compared after :func:`normalise_text` (NFKC,
lower case, whitespace collapsed; the official scorer lower-cases and strips); Pixelis' OCR audit also strips
punctuation (``strip_punctuation=True``).
"""

from __future__ import annotations

import string
import unicodedata
from typing import Sequence

#: the ANLS threshold of the benchmarks
TAU = 0.5
_PUNCT = str.maketrans("", "", string.punctuation)


def normalise_text(text: str, *, strip_punctuation: bool = False) -> str:
    """NFKC, lower case, single spaces, stripped (and ASCII punctuation removed when asked)."""
    text = unicodedata.normalize("NFKC", text).lower()
    if strip_punctuation:
        text = text.translate(_PUNCT)
    return " ".join(text.split())


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions of one character each)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls_score(
    prediction: str, references: Sequence[str] | str, *, tau: float = TAU, strip_punctuation: bool = False
) -> float:
    """``s(p)`` of one question (see the module docstring); two empty strings score 1."""
    refs = [references] if isinstance(references, str) else list(references)
    if not refs:
        raise ValueError("ANLS needs at least one reference")
    p = normalise_text(prediction, strip_punctuation=strip_punctuation)
    best = 0.0
    for ref in refs:
        g = normalise_text(ref, strip_punctuation=strip_punctuation)
        longest = max(len(p), len(g))
        nl = levenshtein(p, g) / longest if longest else 0.0
        best = max(best, 1.0 - nl if nl < tau else 0.0)
    return best


def anls(
    predictions: Sequence[str],
    references: Sequence[Sequence[str] | str],
    *,
    tau: float = TAU,
    strip_punctuation: bool = False,
) -> float:
    """Mean :func:`anls_score` over questions (``references[i]`` the answers of question ``i``)."""
    if len(predictions) != len(references) or not predictions:
        raise ValueError(
            f"ANLS needs one reference list per prediction; got {len(predictions)} predictions "
            f"and {len(references)} reference lists"
        )
    return sum(
        anls_score(p, r, tau=tau, strip_punctuation=strip_punctuation)
        for p, r in zip(predictions, references)
    ) / len(predictions)
