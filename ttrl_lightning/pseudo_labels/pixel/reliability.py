"""Dawid-Skene reliabilities of Pixel TTRL's rollout slots over a batch of questions (Pixelis appendix S2)."""
from __future__ import annotations

import logging
from typing import Sequence

from ttrl_lightning.answers import NO_ANSWER, canonical_answer_classes
from ttrl_lightning.consensus import dawid_skene, dawid_skene_reliability, rollout_annotator_labels

__all__ = ["batch_reliability"]

log = logging.getLogger(__name__)


def batch_reliability(answers_per_query: Sequence[Sequence[str | None]], *, return_reason: bool = False):
    """Dawid-Skene reliability ``r_j`` of each rollout slot over a batch of queries (Pixelis appendix S2).

    Items = queries, annotators = rollout slots (the j-th rollout of every query), classes = per-query
    answer ranks (``consensus.rollout_annotator_labels``); ``consensus.dawid_skene`` with the paper's start
    (hard majority labels, smoothed-identity confusions), then the prior-weighted reliability
    ``r_j = sum_c prior[c] confusion[j, c, c]`` (``consensus.dawid_skene_reliability(conf, prior)``),
    rescaled so that the mean over slots is 1 (the Pixelis weights keep their scale).

    Answers are compared through the answer-equivalence classes of their query; ``None`` and
    :data:`~ttrl_lightning.answers.NO_ANSWER` are missing labels. Queries with no answer at all carry no
    information and are left out of the fit. With fewer than 2 informative queries there is nothing to
    estimate: every ``r_j`` is 1.0 and the reason is logged (and returned with ``return_reason=True``).

    Returns:
        one list per query with one ``r_j`` per rollout (slot ``j``'s reliability); with
        ``return_reason=True`` a pair ``(reliabilities, reason or None)``.
    """
    if isinstance(answers_per_query, (str, bytes)) or not isinstance(answers_per_query, Sequence):
        raise TypeError(f"answers_per_query must be a list of lists of answers, got "
                        f"{type(answers_per_query).__name__}")
    rows: list[list[str | None]] = []
    for q, row in enumerate(answers_per_query):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise TypeError(f"answers_per_query[{q}] must be a list of answers, got {type(row).__name__}")
        for j, a in enumerate(row):
            if a is not None and not isinstance(a, str):
                raise TypeError(f"answers_per_query[{q}][{j}] must be a str or None, got {type(a).__name__}")
        ids, reps = canonical_answer_classes([NO_ANSWER if a is None else a for a in row])
        rows.append([None if reps[c] == NO_ANSWER else reps[c] for c in ids])
    out = [[1.0] * len(row) for row in rows]
    informative = [q for q, row in enumerate(rows) if any(a is not None for a in row)]
    reason = None
    if len(informative) < 2:
        queries = "query" if len(informative) == 1 else "queries"
        reason = (f"batch_reliability: {len(informative)} {queries} with an extractable answer"
                  " (Dawid-Skene needs at least 2); every reliability is 1.0")
        log.warning(reason)
        return (out, reason) if return_reason else out
    labels, num_classes = rollout_annotator_labels([rows[q] for q in informative])
    _, confusion, prior = dawid_skene(labels, num_classes)
    r = dawid_skene_reliability(confusion, prior)
    r = r / r.mean()
    slot = r.tolist()
    out = [[slot[j] for j in range(len(row))] for row in rows]
    return (out, reason) if return_reason else out
