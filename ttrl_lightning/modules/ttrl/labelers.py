"""What test-time RL needs to know about each pseudo-labeler, in one spec registered once by labeler name.

A pseudo-labeler itself (``pseudo_labels.PSEUDO_LABELERS``) labels one question's rollouts. Its
``LabelerSpec`` says what ``TTRLModule`` must supply around it:

* ``signals``: per-token signals its rollouts need, recorded while sampling (``visconf``: self-certainty;
  ``pixel``: entropy and log-prob);
* ``image_signals``: per-token signals it reads on questions with images, recorded while sampling them
  (``visconf``: VisConf sec. 3.1's ``visual_engagement``, so its score is the full ``Z = V * C`` with RWC;
  on text questions it reads ``signals`` alone, ``Z = C``, and says so in its label's
  ``info["signal"]``). A batch that mixes questions with and without images is refused for such a
  labeler: one batch would be scored by two rules;
* ``views``: the views it votes over (``self_harmony``: the question and its fused Reframe-and-Solve
  prompt, Self-Harmony sec. 3);
* ``advantage``: its advantage rule when ``AdvantageSpec.rule`` is None (``pixel``: Pixelis appendix 6's
  EMA baseline; the others GRPO's group-relative one);
* ``inputs``: ``fn(context, votes, groups) -> [per-question kwargs]`` (``context`` a :class:`LabellingContext`,
  ``votes`` the engine's ``Rollouts``, ``groups`` each question's ``QuestionVotes``) for inputs that need the
  token ids, the whole batch or the trajectories (``pixel``: decisive-token masks, Dawid-Skene reliabilities,
  VisFid);
* ``calibration``: ``fn(context, votes, groups, golds, choices) -> kwargs`` fitted once on a labelled dev-cal
  split and merged into the labeler's kwargs (``pixel``: Cal_j's temperature and the conformal threshold);
* ``options``: the ``VotingSpec`` fields that belong to this labeler alone (``warmup_majority_steps``);
* ``calibration_options``: ``voting.options`` read by its calibration only, never handed to the labeler
  (``pixel``: the conformal miscoverage ``alpha``, or the dev-cal ``target_coverage`` that fits it);
* ``check_options``: ``fn(options)`` raising ``PseudoLabelError`` for a ``voting.options`` value out of its
  range, called when the ``VotingSpec`` is built, so a bad value stops the run before the model loads, not at
  its first step or its calibration (``majority``: its guards' shares; ``pixel``: ``alpha``, ``target_coverage``);
* ``reads_gold``: the labeler is handed each question's gold answer (``gold=``). Only the ``gold_reward``
  control does: it is RLVR's upper bound, not a test-time method (``pseudo_labels.controls``);
* ``labels``: its rewards say whether a vote agrees with a pseudo-label (1[answer = label], gated or not), so
  ``train/reward_accuracy`` (reward > 0 iff the vote is right) means something. False for the continuous
  rewards (``self_certainty``, ``entropy``) and the random control, for which that metric is not logged.

A labeler registered without a spec (e.g. a user's own) votes over the original view, needs no signals and
takes GRPO's advantage.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ttrl_lightning.answers import NO_ANSWER
from ttrl_lightning.consensus import aggregate
from ttrl_lightning.data.pool_schema import VIEWS
from ttrl_lightning.pseudo_labels.question_votes import QuestionVotes
from ttrl_lightning.registry import Registry
from ttrl_lightning.rollout.agent import AgentRollouts
from ttrl_lightning.rollout.base import Rollouts

__all__ = ["LabelerSpec", "LabellingContext", "TTRL_LABELERS", "labeler_spec"]


@dataclass(frozen=True)
class LabellingContext:
    """What a labeler's hooks read besides the votes (never the module): the policy's ``tokenizer``, the run's
    ``seed`` (``PolicySpec.seed``), the labelling call's ``step`` (``global_step * world_size + rank``: every
    call of a run and rank its own), and ``options`` (``voting.options``)."""

    tokenizer: Any = None
    seed: int = 0
    step: int = 0
    options: Mapping[str, Any] = None

    def __post_init__(self):
        object.__setattr__(self, "options", dict(self.options or {}))


@dataclass(frozen=True)
class LabelerSpec:
    """What ``TTRLModule`` supplies around one pseudo-labeler (module docstring)."""

    signals: tuple[str, ...] = ()
    image_signals: tuple[str, ...] = ()
    views: tuple[str, ...] = (VIEWS[0],)
    advantage: str = "group"
    inputs: Callable[..., list[dict]] | None = None
    calibration: Callable[..., dict] | None = None
    options: tuple[str, ...] = ()
    calibration_options: tuple[str, ...] = ()
    check_options: Callable[[Mapping[str, Any]], Any] | None = None
    reads_gold: bool = False
    labels: bool = True

    @property
    def fused(self) -> bool:
        """Whether it votes over the fused Reframe-and-Solve view too."""
        return VIEWS[1] in self.views


#: labeler name -> its spec
TTRL_LABELERS: Registry[LabelerSpec] = Registry("pseudo-labeler spec")


def labeler_spec(name: str) -> LabelerSpec:
    """The spec of labeler ``name`` (the default spec for a labeler registered without one)."""
    return TTRL_LABELERS[name] if name in TTRL_LABELERS else LabelerSpec()


# ---------------------------------------------------------------------- pixel: inputs and calibration
def pixel_inputs(context: LabellingContext, votes: Rollouts, groups: list[QuestionVotes]) -> list[dict]:
    """Decisive-token masks, Dawid-Skene slot reliabilities over the batch and, for agent rollouts with tool
    steps, each rollout's VisFid (``fidelity.group_visfid``; a rollout nothing scores counts as 1, a question
    with none as neutral).

    VisFid's pseudo-references are Pixelis sec. 3.2.3's successful set S, found in two passes: first the
    unweighted majority answer of the question's votes (``consensus`` majority, its tie rule), then S = the
    other votes that predict it (an unextractable majority leaves S empty: no VisFid). The paper takes that
    majority "under a low-entropy majority (< 0.2)"; that gate is pixel's ``majority_entropy_max`` option of
    the label, and S is formed without it.

    The decisive steps (Pixelis sec. 3.2.3: H_j is "token entropy on decisive steps", and only "decisive tool
    steps (SEG/ZOOM, TRK, OCR, TEMP, PROP)" are scored; our reading adds the final answer turn) are found on the
    model's own tokens, the indices the entropy and log-prob signals are laid on: for agent rollouts from
    the trajectory's step spans (``AgentRollouts.decisive_token_masks``: successful tool calls only, as VisFid counts
    them), for text rollouts from the completion ids (``decisive_token_mask``; a text completion records no
    tool results, so every call in it counts)."""
    from ttrl_lightning.pseudo_labels.pixel.labeler import batch_reliability, decisive_token_mask
    from ttrl_lightning.tools.protocol import CALL_END, CALL_START, OBSERVATION_END

    if isinstance(votes, AgentRollouts):
        masks = votes.decisive_token_masks()
    else:
        tok = context.tokenizer
        ids = [tok.convert_tokens_to_ids(t) for t in (CALL_START, CALL_END, OBSERVATION_END)]
        # a tokenizer without the tool tokens: distinct ids no token has, so no step is a tool call
        ids = [i if i is not None and i != tok.unk_token_id else -1 - k for k, i in enumerate(ids)]
        masks = []
        for row, m in zip(votes.completion_ids.tolist(), votes.completion_mask.tolist()):
            masks.append(decisive_token_mask(row[:int(sum(m))], *ids))
    per_q = len(votes.texts) // len(groups)
    answers = [list(group.answers) for group in groups]
    reliability = batch_reliability([[None if a == NO_ANSWER else a for a in row] for row in answers])
    out = [{"decisive_masks": masks[q * per_q:(q + 1) * per_q], "reliability": reliability[q]}
           for q in range(len(groups))]
    trajectories = getattr(votes, "trajectories", None)
    if trajectories:
        from ttrl_lightning.fidelity import group_visfid

        for q, extra in enumerate(out):
            group = trajectories[q * per_q:(q + 1) * per_q]
            majority = aggregate(answers[q], "majority").answer  # pass 1: the unweighted majority
            in_s = [a == majority != NO_ANSWER for a in answers[q]]  # pass 2: the votes that predict it
            vis = group_visfid([t.evidence for t in group], in_s)
            if any(v is not None for v in vis):
                extra["visual_fidelity"] = [1.0 if v is None else v for v in vis]
    return out


def pixel_calibration(context: LabellingContext, votes: Rollouts, groups: list[QuestionVotes], golds: list[str],
                      choices: list) -> dict:
    """Pixel TTRL's temperature (Cal_j) and conformal threshold fitted on the dev-cal split, on the score the
    training steps apply: the same :func:`pixel_inputs` (decisive masks, reliabilities and, for agent rollouts
    with tool steps, VisFid), so the weights w_j = exp(-H_j) Cal_j VisFid_j r_j whose conformal coverage is
    fitted are the weights the labels use (split conformal covers only the score it was fitted on)."""
    from ttrl_lightning.pseudo_labels.pixel.labeler import calibrate_pixel

    extra = pixel_inputs(context, votes, groups)
    kwargs = {k: v for k, v in context.options.items() if k not in ("temperature", "conformal_qhat")}
    fidelity = [e.get("visual_fidelity") for e in extra]
    if any(v is not None for v in fidelity):
        kwargs["visual_fidelity"] = fidelity
    cal = calibrate_pixel(groups, golds, choices=list(choices), decisive_masks=[e["decisive_masks"] for e in extra],
                          reliability=[e["reliability"] for e in extra], **kwargs)
    from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

    rank_zero_info(f"pixel: fitted on {len(golds)} dev-cal questions: temperature {cal.temperature:.4g}, conformal "
                   f"qhat {cal.conformal_qhat:.4g} (alpha {cal.alpha:.4g}), dev-cal coverage {cal.coverage:.3f}")
    if cal.conformal_qhat >= 1:  # every voted answer is in every prediction set: only unanimous votes label
        rank_zero_warn(f"pixel: the conformal threshold fitted on the {len(golds)} dev-cal questions is qhat = "
                       f"{cal.conformal_qhat:g} (the gold answer got no vote on too many of them), so every "
                       "prediction set holds every voted answer and pixel abstains on every question whose "
                       "votes give more than one answer (it labels only unanimous ones). Use a larger or "
                       "easier dev-cal split, more votes, a larger voting.options alpha, or a "
                       "voting.options target_coverage (the paper's operating point: about 0.9)")
    return {"temperature": float(cal.temperature), "conformal_qhat": float(cal.conformal_qhat)}


def pixel_option_values(options: Mapping[str, Any]) -> None:
    """Refuses (``PseudoLabelError``) pixel's calibration targets out of range or given together."""
    from ttrl_lightning.pseudo_labels.pixel.labeler import calibration_targets

    calibration_targets(options.get("alpha"), options.get("target_coverage"))


def majority_option_values(options: Mapping[str, Any]) -> None:
    """Refuses (``PseudoLabelError``) a collapse guard of ``majority`` that is not a share in [0, 1], or guards
    that together can never label a question (``min_share`` above ``max_share``; ``checked_majority_options``)."""
    from ttrl_lightning.pseudo_labels.majority import checked_majority_options

    checked_majority_options(**options)


def random_reward_inputs(context: LabellingContext, votes: Rollouts, groups: list[QuestionVotes]) -> list[dict]:
    """Each question's ``random_reward`` seed, derived from the policy seed, the step (with the rank), and the
    question's place in the batch: the same run draws the same rewards, every step and question new ones."""
    from ttrl_lightning.seeding import derive_seed

    return [{"seed": derive_seed(context.seed, "random_reward", context.step, q)} for q in range(len(groups))]


TTRL_LABELERS.register("majority", LabelerSpec(check_options=majority_option_values))
TTRL_LABELERS.register("self_harmony", LabelerSpec(views=VIEWS[:2], options=("warmup_majority_steps",)))
TTRL_LABELERS.register("visconf", LabelerSpec(signals=("self_certainty",), image_signals=("visual_engagement",)))
TTRL_LABELERS.register("self_certainty", LabelerSpec(signals=("self_certainty",), labels=False))
TTRL_LABELERS.register("entropy", LabelerSpec(signals=("entropy",), labels=False))
TTRL_LABELERS.register("pixel", LabelerSpec(signals=("entropy", "logprob"), advantage="ema_baseline",
                                           inputs=pixel_inputs, calibration=pixel_calibration,
                                           calibration_options=("alpha", "target_coverage"),
                                           check_options=pixel_option_values))
TTRL_LABELERS.register("random_reward", LabelerSpec(inputs=random_reward_inputs, labels=False))
TTRL_LABELERS.register("gold_reward", LabelerSpec(reads_gold=True))
TTRL_LABELERS.register("null_reward", LabelerSpec(labels=False))
TTRL_LABELERS.register("format_reward", LabelerSpec(labels=False))
