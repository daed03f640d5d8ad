"""Rollouts of an engine as rollout-pool records (``ttrl_lightning.data.pool`` schema), in one call.

One record per question: the prompts that share a question id (its original and its reframed view,
Self-Harmony) are merged; the rows of each prompt are ``Rollouts.group == prompt index``, n per prompt.
A rollout's per-token arrays are its ``Rollouts.signals`` over its completion tokens (the completion mask
included the end-of-sequence token), so ``records_to_pool`` sees what the engine measured; its answer is
left null and extracted from the text when the pool is built (``extract_answer(text, choices)``).
"""
from __future__ import annotations

from typing import Sequence

from ttrl_lightning.data.pool_schema import TOKEN_FIELDS, VIEWS, validate_record
from ttrl_lightning.rollout.base import Rollouts

__all__ = ["records_from_rollouts"]


def _per_prompt(name: str, values: Sequence | None, num_prompts: int, default) -> list:
    if values is None:
        return [default] * num_prompts
    values = list(values)
    if len(values) != num_prompts:
        raise ValueError(f"{name} has {len(values)} entries for {num_prompts} prompts")
    return values


def records_from_rollouts(
    rollouts: Rollouts,
    ids: Sequence[str],
    golds: Sequence[str | None] | None = None,
    choices: Sequence[dict[str, str] | None] | None = None,
    views: Sequence[str] | None = None,
    signals: Sequence[str] | None = None,
) -> list[dict]:
    """Pool records (validated, ``data.pool.validate_record``) from the rollouts of P prompts.

    ids, golds, choices, views: one entry per prompt (P = rows / ``rollouts.n``): the question id, its gold
    answer (default None), its multiple-choice options (default None) and the prompt's view (``"original"``
    or ``"reframed"``, default ``"original"``). Prompts with the same id become one record (in the order
    of first appearance) and must agree on gold and choices. ``signals``: the names of
    ``rollouts.signals`` to write (default: all of them); each must be a per-token field of the pool
    schema (``TOKEN_FIELDS``). Every rollout also gets ``text`` and ``num_tokens`` (its completion length).
    """
    rows = len(rollouts.texts)
    if rows == 0 or rows % rollouts.n:
        raise ValueError(f"{rows} rollout rows is not a positive multiple of n={rollouts.n}")
    num_prompts = rows // rollouts.n
    ids = _per_prompt("ids", ids, num_prompts, None)
    golds = _per_prompt("golds", golds, num_prompts, None)
    choices = _per_prompt("choices", choices, num_prompts, None)
    views = _per_prompt("views", views, num_prompts, VIEWS[0])
    names = list(rollouts.signals) if signals is None else list(signals)
    for name in names:
        if name not in TOKEN_FIELDS:
            raise ValueError(f"signal {name!r} is not a per-token field of the pool schema {TOKEN_FIELDS}")
        if name not in rollouts.signals:
            raise ValueError(f"signal {name!r} was not recorded; the rollouts have {sorted(rollouts.signals)}")
    mask = rollouts.completion_mask.bool().cpu()
    values = {name: rollouts.signals[name].float().cpu() for name in names}
    group = rollouts.group.cpu().tolist()

    records: dict[str, dict] = {}
    for r in range(rows):
        p = group[r]
        qid = ids[p]
        rec = records.get(qid)
        if rec is None:
            rec = records[qid] = {"id": qid, "gold": golds[p], "choices": choices[p], "rollouts": []}
        elif rec["gold"] != golds[p] or rec["choices"] != choices[p]:
            raise ValueError(f"prompts of question {qid!r} disagree on its gold answer or choices")
        length = int(mask[r].sum())
        ro = {"answer": None, "text": rollouts.texts[r], "view": views[p], "num_tokens": length or None}
        for name in names:
            ro[name] = values[name][r][mask[r]].tolist()
        rec["rollouts"].append(ro)
    return [validate_record(rec, i) for i, rec in enumerate(records.values())]
