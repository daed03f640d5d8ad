"""``TTRLModule``: test-time RL on unlabeled questions, rewarded by pseudo-labels (TTRL, Zuo et al. 2025;
Self-Harmony; VisConf; Pixelis sec. 3.2.3 and appendix 6).

One step is GRPO's (:class:`~ttrl_lightning.modules.grpo.GRPOModule`), with three hooks overridden:

    rollout(batch)   M = num_votes samples per question (plus M fused Reframe-and-Solve samples for
                     ``self_harmony``: prompt ``fused_prompt_template.format(prompt=...)``, one generation
                     each, view "reframed"); each question's votes -> pool-schema rollouts
                     (``records_from_rollouts``, no gold) -> ``pseudo_label(pseudo_labeler, ...)``;
                     returns the first N = num_generations rows of every prompt (the rows trained on; the
                     samples are i.i.d., so the first N are a uniform draw: TTRL's 64 votes / 32 trained)
    rewards(...)     the pseudo-label's rewards of those rows; a question whose labeler abstains is left out
                     of the loss (``group_mask``) and counted
    group_advantages "group": GRPO's group-relative advantages; "ema_baseline" (Pixelis appendix 6):
                     A_j = vbar [r_j - b] with b an EMA (``baseline_momentum``) of the mean reward of accepted
                     questions, vbar = 1 (the neighbourhood value is neutral until retrieval exists; logged),
                     normalised within the batch (the appendix's practical note ii); rows a labeler rejects
                     from the update (``info["update_mask"]``: Pixelis' near-duplicate rollouts) get 0 and
                     leave the loss (``RolloutRewards.row_mask``: no policy or KL term, no weight)

**Gold never reaches a reward**: the pseudo-labels are computed from the rollouts alone; the batch's ``gold``
column is read afterwards by :meth:`TTRLModule.monitor`, for the logged metrics only (TTRL's names):

* ``label_accuracy``: labelled questions whose pseudo-label equals gold (answer equivalence);
* ``reward_accuracy``: trained rollouts whose reward agrees with gold correctness (``reward > 0`` iff the
  answer is right; most wrong rollouts correctly get 0, so it is high even when labels are often wrong);
* ``majority_ratio``: the most frequent answer's share of the votes (all labelers);
* ``coverage`` / ``abstention_rate``: questions labelled / abstained; ``err_at_sel``: error of the labels on
  the labelled (selected) questions (Pixelis' Err@Sel); ``accepted_per_1k``: accepted updates (questions that
  contributed gradient) per 1,000 processed questions, cumulative over the run;
* ``kl_p50``, ``kl_p95``: quantiles of the token KL to the reference over the trained tokens; ``beta``;
* ``online_accuracy``: the original view's majority vote vs gold when a question is seen (the pre-update
  accuracy on an online stream; Pixelis' "before" on the stream); ``label_vs_majority`` counts, over the
  run, over the labelled questions, those whose pseudo-label is right where that majority is wrong
  (``recovered``) and the reverse (``lost``), and the abstained ones apart: Self-Harmony's claim, counted.

Labeler-specific inputs (``LABELER_INPUTS``, by labeler name): ``pixel`` gets each rollout's decisive-token
mask (tool calls and the final answer step, from the completion ids), Dawid-Skene reliabilities of the
rollout slots over the batch's questions, and its temperature / conformal threshold fitted on a labelled
dev-cal split at the start of training (``calibrate``; the datamodule's ``calibration_questions()``).
Labeler signals (``LABELER_SIGNALS``) are recorded while sampling.

Regimes: TTRL's epochs over a fixed unlabeled set (``QuestionDataModule(shuffle=True)``, ``max_epochs``) or
Pixelis' online stream (``shuffle=False``, one epoch: each question seen once; ``online_accuracy`` is the
"before", ``ttrl eval`` on the stream file after training the "after").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar, Sequence

import torch

from ttrl_lightning.answers import ANSWER_EXTRACTORS, NO_ANSWER, answers_equal
from ttrl_lightning.consensus import aggregate
from ttrl_lightning.data.pool import TOKEN_FIELDS, VIEWS
from ttrl_lightning.errors import UserError
from ttrl_lightning.modules.base import Bounds, PolicySpec, check_bounds
from ttrl_lightning.modules.grpo import GRPOModule, RolloutRewards
from ttrl_lightning.modules.perturbations import VOTE_PERTURBATIONS
from ttrl_lightning.pseudo_labels import PSEUDO_LABELERS, PseudoLabel, pseudo_label
from ttrl_lightning.pseudo_labels.rollouts import canonical_answers
from ttrl_lightning.registry import Registry
from ttrl_lightning.rollout.base import Rollouts, SamplingParams
from ttrl_lightning.rollout.records import records_from_rollouts
from ttrl_lightning.seeding import derive_seed

__all__ = ["TTRLModule", "LABELER_SIGNALS", "LABELER_INPUTS", "LABELER_CALIBRATIONS", "ADVANTAGES",
           "FUSED_LABELERS", "StepLabels"]

#: labeler -> per-token signals its rollouts need (recorded while sampling); a labeler not listed gets none
#: unless ``TTRLModule(signals=...)`` names them
LABELER_SIGNALS: dict[str, tuple[str, ...]] = {
    "majority": (),
    "self_harmony": (),
    "visconf": ("self_certainty",),
    "self_certainty": ("self_certainty",),
    "entropy": ("entropy",),
    "pixel": ("entropy", "logprob"),
}
#: labelers that vote over the original and the fused Reframe-and-Solve view
FUSED_LABELERS = ("self_harmony",)
#: advantage rules: "group" (GRPO) or "ema_baseline" (Pixelis)
ADVANTAGES = ("group", "ema_baseline")
#: the advantage rule of a labeler when ``advantage`` is not given
DEFAULT_ADVANTAGE = {"pixel": "ema_baseline"}

#: labeler -> ``fn(module, votes, records) -> [per-question extra labeler kwargs]`` (inputs that need the
#: token ids, the whole batch or the module's calibration)
LABELER_INPUTS: Registry[Callable[..., list[dict]]] = Registry("pseudo-labeler input")
#: labeler -> ``fn(module, groups, golds, choices) -> dict`` fitted on a labelled dev-cal split, merged into
#: the labeler's kwargs
LABELER_CALIBRATIONS: Registry[Callable[..., dict]] = Registry("pseudo-labeler calibration")

TTRL_RULES: dict[str, Bounds] = {
    "num_votes": Bounds(low=1, integer=True),
    "warmup_majority_steps": Bounds(low=0, integer=True),
    "baseline_momentum": Bounds(low=0, high=1, high_open=True),
    "eval_k": Bounds(low=1, integer=True),
    "eval_temperature": Bounds(low=0),
    "eval_top_p": Bounds(low=0, high=1, low_open=True),
}


@dataclass
class StepLabels:
    """What one step's voting decided (rows of the training rollouts: prompt-major, N per prompt).

    labels: one ``PseudoLabel`` per question; rewards [rows]; group_mask [prompts] (False: abstained);
    update_mask [rows] (False: rejected from the update by the labeler); answers: each question's canonical
    vote answers (for monitoring); ids: question ids; completion_mask [rows, C] of the trained rows.
    """

    labels: list[PseudoLabel]
    rewards: torch.Tensor
    group_mask: torch.Tensor
    update_mask: torch.Tensor
    answers: list[list[str]]
    ids: list[str]
    completion_mask: torch.Tensor | None = None


class TTRLModule(GRPOModule):
    """Test-time RL with pseudo-labels (see the module docstring).

    Args beyond ``GRPOModule``'s (``num_generations`` is N, the rows trained on per prompt):
      pseudo_labeler: a name in ``PSEUDO_LABELERS`` (majority, self_harmony, visconf, pixel, self_certainty,
        entropy); labeler_kwargs: its options (e.g. ``{"delta": 0.1}`` for pixel);
      num_votes: M >= N samples per prompt for the label (TTRL: 64 votes, 32 trained);
      answer_extractor: how a completion's answer is read (``answers.ANSWER_EXTRACTORS``: ``final_answer``,
        ``last_number``), the same in the labels and in the monitoring;
      fused_prompt_template: the fused Reframe-and-Solve prompt, ``{prompt}`` replaced by the question
        (``self_harmony`` only; required there);
      warmup_majority_steps: ``self_harmony``'s warm-up: its first steps label by majority over both views
        (``warmup_majority=True``; the public implementation's default is 20);
      signals: per-token signals recorded while sampling (default: the labeler's, ``LABELER_SIGNALS``);
      perturbation: ``{"name": <VOTE_PERTURBATIONS name>, <options>}`` applied to the votes before labelling,
        for robustness studies (``modules.perturbations``: ``flip_answers``; None: off);
      advantage: "group" or "ema_baseline" (default: "ema_baseline" for pixel, else "group");
      baseline_momentum: rho of the EMA baseline (Pixelis: 0.99);
      calibrate: fit the labeler's calibration (pixel: temperature and conformal threshold) on the
        datamodule's labelled dev-cal questions at the start of training;
      eval_k, eval_temperature, eval_top_p: validation samples per question and their decoding (avg@k, maj@k,
        pass@k; TTRL evaluates avg@16 at T 0.6, top-p 0.95);
      agent: roll out as a tool-using agent (``rollout.agent.AgentEngine``): its options, e.g.
        ``{"max_steps": 4, "max_turn_tokens": 160}``; the prompts are ``AgentPrompt`` s carrying their pixels
        (``data.cota.AgentPromptDataModule``), the labeler's signals are replayed over the trajectories and
        ``pixel`` scores each vote's tool steps (VisFid); use ``answer_extractor: agent_answer``.
    Batch: ``{"prompt": [...], "id"?: [...], "gold"?: [...] (monitoring only), "choices"?: [...]}``.
    """

    unsaved_init_args: ClassVar[tuple[str, ...]] = ("rewards", "engine")

    def __init__(
        self,
        policy: PolicySpec = PolicySpec(lr=1e-5),
        pseudo_labeler: str = "majority",
        labeler_kwargs: dict[str, Any] | None = None,
        num_votes: int = 8,
        num_generations: int = 4,
        answer_extractor: str = "final_answer",
        fused_prompt_template: str | None = None,
        warmup_majority_steps: int = 0,
        signals: Sequence[str] | None = None,
        perturbation: dict[str, Any] | None = None,
        advantage: str | None = None,
        baseline_momentum: float = 0.99,
        calibrate: bool = True,
        eval_k: int = 4,
        eval_temperature: float = 0.6,
        eval_top_p: float = 0.95,
        agent: dict[str, Any] | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int = 8,
        stop: Sequence[str] = (),
        scale_rewards: bool = True,
        eps_low: float = 0.2,
        eps_high: float = 0.2,
        kl_coef: float = 0.0,
        reference: str = "initial",
        loss_aggregation: str = "seq_mean",
        num_iterations: int = 1,
        max_grad_norm: float | None = 1.0,
        engine: str | dict[str, Any] | None = None,
        logprob_impl: str = "auto",
        tis_cap: float | None = 2.0,
    ):
        where = f"{type(self).__name__} argument "
        check_bounds(locals(), TTRL_RULES, where)
        if pseudo_labeler not in PSEUDO_LABELERS:
            raise UserError(f"{where}pseudo_labeler must be one of {', '.join(PSEUDO_LABELERS.names())}, "
                            f"got {pseudo_labeler!r}")
        if isinstance(num_generations, int) and isinstance(num_votes, int) and num_generations > num_votes:
            raise UserError(f"{where}num_generations (N={num_generations}, the rows trained on) must be <= "
                            f"num_votes (M={num_votes}, the rows voting)")
        if pseudo_labeler in FUSED_LABELERS and (not fused_prompt_template
                                                 or "{prompt}" not in fused_prompt_template):
            raise UserError(f"{where}fused_prompt_template must be a string holding '{{prompt}}' for "
                            f"{pseudo_labeler} (the fused Reframe-and-Solve prompt), got "
                            f"{fused_prompt_template!r}")
        if answer_extractor not in ANSWER_EXTRACTORS:
            raise UserError(f"{where}answer_extractor must be one of {', '.join(ANSWER_EXTRACTORS.names())}, "
                            f"got {answer_extractor!r}")
        if perturbation is not None and (not isinstance(perturbation, dict)
                                         or perturbation.get("name") not in VOTE_PERTURBATIONS):
            raise UserError(f"{where}perturbation must be {{'name': one of "
                            f"{', '.join(VOTE_PERTURBATIONS.names())}, <options>}}, got {perturbation!r}")
        if agent is not None and (engine is not None or pseudo_labeler in FUSED_LABELERS):
            raise UserError(f"{where}agent builds its own engine and has no fused view: not with engine= or "
                            f"{pseudo_labeler}")
        if warmup_majority_steps and pseudo_labeler != "self_harmony":
            raise UserError(f"{where}warmup_majority_steps is an option of self_harmony, not {pseudo_labeler}")
        advantage = advantage or DEFAULT_ADVANTAGE.get(pseudo_labeler, "group")
        if advantage not in ADVANTAGES:
            raise UserError(f"{where}advantage must be one of {', '.join(ADVANTAGES)}, got {advantage!r}")
        signals = tuple(LABELER_SIGNALS.get(pseudo_labeler, ()) if signals is None else signals)
        unknown = [x for x in signals if x not in TOKEN_FIELDS[:3]]
        if unknown:
            raise UserError(f"{where}signals: {unknown} cannot be recorded while sampling; known: "
                            f"{', '.join(TOKEN_FIELDS[:3])}")
        super().__init__(
            policy=policy, num_generations=num_generations, temperature=temperature, top_p=top_p, top_k=top_k,
            max_new_tokens=max_new_tokens, stop=stop, rewards=("exact_answer",), scale_rewards=scale_rewards,
            eps_low=eps_low, eps_high=eps_high, kl_coef=kl_coef, reference=reference,
            loss_aggregation=loss_aggregation, num_iterations=num_iterations, max_grad_norm=max_grad_norm,
            record_signals=bool(signals), engine=engine, logprob_impl=logprob_impl, tis_cap=tis_cap)
        self.save_hyperparameters({"advantage": advantage})
        if agent is not None:
            from ttrl_lightning.models import load_processor
            from ttrl_lightning.rollout.agent import AgentEngine

            try:
                self.engine = AgentEngine(self.tokenizer, record_signals=bool(signals),
                                          processor=load_processor(self.policy_spec.model), **dict(agent))
            except (TypeError, ValueError) as err:
                raise UserError(f"{where}agent: {err}") from None
        self.labeler_kwargs = dict(labeler_kwargs or {})
        self.signal_names = tuple(signals)
        self.calibration: dict[str, Any] | None = None
        self.baseline: float | None = None  # the EMA baseline b of "ema_baseline"
        self.questions_seen = 0
        self.questions_accepted = 0
        #: labelled questions with gold, by (pseudo-label right, the original view's majority right):
        #: "recovered" counts labels right where the majority was wrong, "lost" the reverse (Self-Harmony's
        #: claim); abstained questions are counted apart ("abstained")
        self.label_vs_majority = dict.fromkeys((*_AGREEMENT.values(), "abstained"), 0)
        self.label_history: list[tuple[int, str, str | None]] = []  # (step, question id, label)
        self._step_labels: StepLabels | None = None
        self._token_kl: torch.Tensor | None = None

    # ------------------------------------------------------------------ state
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["ttrl"] = {"calibration": self.calibration, "baseline": self.baseline,
                              "questions_seen": self.questions_seen,
                              "questions_accepted": self.questions_accepted,
                              "label_vs_majority": dict(self.label_vs_majority),
                              "label_history": [list(x) for x in self.label_history]}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("ttrl", {})
        self.calibration = state.get("calibration")
        self.baseline = state.get("baseline")
        self.questions_seen = int(state.get("questions_seen", 0))
        self.questions_accepted = int(state.get("questions_accepted", 0))
        self.label_vs_majority.update(state.get("label_vs_majority", {}))
        self.label_history = [tuple(x) for x in state.get("label_history", [])]

    def on_fit_start(self) -> None:
        super().on_fit_start()
        name = self.hparams.pseudo_labeler
        if self.hparams.calibrate and self.calibration is None and name in LABELER_CALIBRATIONS:
            questions = self._calibration_questions()
            if questions:
                self.calibration = self.fit_calibration(questions)

    def _calibration_questions(self) -> list[dict]:
        dm = getattr(self.trainer, "datamodule", None)
        get = getattr(dm, "calibration_questions", None)
        return list(get()) if get is not None else []

    # ------------------------------------------------------------------ voting
    @property
    def uses_fused_view(self) -> bool:
        return self.hparams.pseudo_labeler in FUSED_LABELERS

    def vote_prompts(self, prompts: Sequence[str]) -> tuple[list[str], list[str]]:
        """The prompts sampled for voting and their views: the questions, then (``self_harmony``) their fused
        Reframe-and-Solve prompts."""
        prompts = list(prompts)
        if not self.uses_fused_view:
            return prompts, [VIEWS[0]] * len(prompts)
        fused = [self.hparams.fused_prompt_template.format(prompt=p) for p in prompts]
        return prompts + fused, [VIEWS[0]] * len(prompts) + [VIEWS[1]] * len(prompts)

    def sample_votes(self, prompts: Sequence[str], seed: int | None) -> tuple[Rollouts, list[str]]:
        """M samples of every vote prompt of ``prompts`` (and its views)."""
        all_prompts, views = self.vote_prompts(prompts)
        params = replace(self.sampling_params(seed), n=self.hparams.num_votes)
        return self.engine.generate(self.policy, all_prompts, params), views

    def label_votes(self, votes: Rollouts, batch: dict[str, list], views: Sequence[str]) -> StepLabels:
        """Pseudo-label every question of ``batch`` from its votes (never from gold) and lay the rewards out
        on the rows trained on (the first N of every prompt)."""
        Q = len(batch["prompt"])
        ids = _question_ids(batch)
        choices = batch.get("choices") or [None] * Q
        prompt_ids = ids * (len(views) // Q)
        records = self.vote_records(votes, prompt_ids, views, choices)
        extra = (LABELER_INPUTS[self.hparams.pseudo_labeler](self, votes, records)
                 if self.hparams.pseudo_labeler in LABELER_INPUTS else [{} for _ in records])
        kwargs = dict(self.labeler_kwargs)
        if self.calibration:
            kwargs.update(self.calibration.get("labeler_kwargs", {}))
        if self.global_step < self.hparams.warmup_majority_steps:
            kwargs["warmup_majority"] = True
        labels, answers = [], []
        for q, rec in enumerate(records):
            labels.append(pseudo_label(self.hparams.pseudo_labeler, rec["rollouts"], choices=choices[q],
                                       **kwargs, **extra[q]))
            answers.append(canonical_answers(rec["rollouts"], choices[q]))
        M, N = self.hparams.num_votes, self.hparams.num_generations
        num_views = len(views) // Q
        rewards = torch.zeros(num_views * Q, N)
        update = torch.ones(num_views * Q, N, dtype=torch.bool)
        keep = torch.ones(num_views * Q, dtype=torch.bool)
        for v in range(num_views):
            for q, lab in enumerate(labels):
                if len(lab.rewards) != num_views * M:
                    raise RuntimeError(f"{self.hparams.pseudo_labeler} returned {len(lab.rewards)} rewards for "
                                       f"{num_views * M} rollouts of question {ids[q]!r}")
                g = v * Q + q
                rewards[g] = torch.tensor(lab.rewards[v * M: v * M + N], dtype=torch.float32)
                mask = lab.info.get("update_mask")
                if mask is not None:
                    update[g] = torch.tensor(list(mask)[v * M: v * M + N], dtype=torch.bool)
                keep[g] = not lab.abstain
        if not all(math.isfinite(float(r)) for r in rewards.flatten()):
            raise RuntimeError(f"{self.hparams.pseudo_labeler} returned a non-finite reward")
        return StepLabels(labels, rewards.reshape(-1), keep, update.reshape(-1), answers, ids)

    def vote_records(self, votes: Rollouts, prompt_ids: Sequence[str], views: Sequence[str],
                     choices: Sequence) -> list[dict]:
        """Pool-schema records of the votes (one per question, no gold), each rollout's ``answer`` read with
        ``answer_extractor``."""
        records = records_from_rollouts(votes, prompt_ids, views=views, signals=self.signal_names)
        extract = ANSWER_EXTRACTORS[self.hparams.answer_extractor]
        for rec, ch in zip(records, choices):
            for ro in rec["rollouts"]:
                ro["answer"] = extract(ro["text"], ch)
        return records

    # ------------------------------------------------------------------ GRPO hooks
    def rollout(self, batch: dict[str, list]) -> Rollouts:
        """M votes per question (and fused view), labelled; returns the first N rows of each prompt.

        Questions with images are refused (``UserError``): the rollout engine samples text only, and training
        a vision-language model on its prompts without their images would be a silent wrong result."""
        with_images = [qid for qid, imgs in zip(_question_ids(batch), batch.get("images") or []) if imgs]
        if with_images:
            raise UserError(f"{type(self).__name__}: question {with_images[0]!r} has images, but the rollout "
                            "engine samples text only (test-time RL on images is not supported yet)")
        votes, views = self.sample_votes(batch["prompt"], self.rollout_seed())
        if self.hparams.perturbation:
            options = {k: v for k, v in self.hparams.perturbation.items() if k != "name"}
            votes = VOTE_PERTURBATIONS[self.hparams.perturbation["name"]](self, votes, batch, **options)
        step = self.label_votes(votes, batch, views)
        trained = votes.first_per_group(self.hparams.num_generations)
        step.completion_mask = trained.completion_mask.detach()
        self._step_labels = step
        return trained

    def rewards(self, rollouts: Rollouts, batch: dict[str, list]) -> RolloutRewards:
        """The pseudo-labels' rewards of the trained rows; abstained questions masked (see ``label_votes``),
        rows rejected from the update dropped (``row_mask``)."""
        step = self._step_labels
        if step is None or step.rewards.numel() != rollouts.completion_ids.shape[0]:
            raise RuntimeError("TTRLModule.rewards needs the labels of this step's rollout (call rollout first)")
        device = rollouts.completion_ids.device
        # rows the labeler rejected from the update (Pixelis' near-duplicates) leave the loss whole: no
        # policy or KL term, no weight in the aggregation (issue 21, D9)
        return RolloutRewards(step.rewards.to(device), step.group_mask.to(device),
                              step.update_mask.to(device).bool())

    @classmethod
    def resolved_hparams(cls, init_args: dict) -> dict:
        """``advantage: None`` is saved as the labeler's default rule (``DEFAULT_ADVANTAGE``, else "group")."""
        out = super().resolved_hparams(init_args)
        if out.get("advantage") is None:
            import inspect

            labeler = out.get("pseudo_labeler", inspect.signature(cls.__init__).parameters["pseudo_labeler"].default)
            out["advantage"] = DEFAULT_ADVANTAGE.get(labeler, "group")
        return out

    def group_advantages(self, rollouts: Rollouts, scored: RolloutRewards) -> torch.Tensor:
        """GRPO's advantages (``"group"``) or Pixelis' EMA-baseline advantages (``"ema_baseline"``); rows the
        labeler rejected from the update get 0."""
        if self.hparams.advantage == "group":
            adv = super().group_advantages(rollouts, scored)
        else:
            adv = self.ema_baseline_advantages(rollouts, scored)
        step = self._step_labels
        return adv * step.update_mask.to(adv.device) if step is not None else adv

    def ema_baseline_advantages(self, rollouts: Rollouts, scored: RolloutRewards) -> torch.Tensor:
        """Pixelis appendix 6: ``A_j = vbar [r_j - b]``, ``b <- rho b + (1 - rho) mean(r of accepted
        questions)`` (updated after use; the first step's b is that step's mean), vbar = 1 (neutral: no
        neighbourhood value without retrieval); A normalised by its standard deviation over the accepted
        rows of the batch. Abstained questions' rows get 0."""
        R, n = rollouts.completion_ids.shape[0], rollouts.n
        keep = scored.mask(R // n).repeat_interleave(n)
        r = scored.rewards.float()
        accepted = r[keep]
        if accepted.numel() == 0:
            return torch.zeros_like(r)
        batch_mean = float(accepted.mean())
        b = batch_mean if self.baseline is None else self.baseline
        adv = r - b
        std = adv[keep].std() if int(keep.sum()) > 1 else torch.zeros(())
        if float(std) > 1e-6:
            adv = adv / std
        rho = self.hparams.baseline_momentum
        self.baseline = batch_mean if self.baseline is None else rho * self.baseline + (1 - rho) * batch_mean
        return torch.where(keep, adv, torch.zeros_like(adv))

    def kl_penalty(self, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
        kl = super().kl_penalty(logp, ref_logp)
        self._token_kl = kl.detach()
        return kl

    # ------------------------------------------------------------------ monitoring (gold read here only)
    def training_step(self, batch, batch_idx):
        """GRPO's step, then this step's monitoring (before any callback saves a checkpoint of the batch)."""
        step_index = int(self.global_step)
        loss = super().training_step(batch, batch_idx)
        step = self._step_labels
        metrics = self.monitor(step, batch)
        self.log_dict({f"train/{k}": torch.tensor(float(v)) for k, v in metrics.items()})
        self.label_history.extend((step_index, qid, lab.label) for qid, lab in zip(step.ids, step.labels))
        self._step_labels = None
        self._token_kl = None
        return loss

    def monitor(self, step: StepLabels, batch: dict[str, list]) -> dict[str, float]:
        """This step's TTRL metrics (module docstring); gold from ``batch["gold"]`` (or ``"answer"``) where
        present."""
        Q = len(step.labels)
        self.questions_seen += Q
        accepted = [not lab.abstain for lab in step.labels]
        self.questions_accepted += sum(accepted)
        out: dict[str, float] = {
            "coverage": sum(accepted) / Q,
            "abstention_rate": 1 - sum(accepted) / Q,
            "accepted_per_1k": 1000.0 * self.questions_accepted / max(self.questions_seen, 1),
            "majority_ratio": sum(_majority_ratio(a) for a in step.answers) / Q,
        }
        kl = self._token_kl
        if kl is not None and step.completion_mask is not None and step.completion_mask.shape == kl.shape:
            rows = step.group_mask.repeat_interleave(self.hparams.num_generations).to(kl.device)
            mask = rows[:, None] & step.completion_mask.to(kl.device).bool()
            vals = kl[mask].float()
            if vals.numel():
                out["kl_p50"] = float(torch.quantile(vals, 0.5))
                out["kl_p95"] = float(torch.quantile(vals, 0.95))
        golds = batch.get("gold") or batch.get("answer")  # the agent tasks' batches name it "answer"
        if not golds or all(g is None for g in golds):
            return out
        choices = batch.get("choices") or [None] * Q
        labelled, right, online = 0, 0, []
        rew_agree, rew_total = 0, 0
        N, M = self.hparams.num_generations, self.hparams.num_votes
        rewards = step.rewards.view(-1, N)
        for q, (lab, gold) in enumerate(zip(step.labels, golds)):
            if gold is None:
                continue
            correct = _correct_classes(step.answers[q], str(gold), choices[q])
            majority_right = aggregate(step.answers[q][:M], "majority").answer in correct  # the original view's majority
            online.append(majority_right)
            label_right = lab.label is not None and not lab.abstain and _same(lab.label, str(gold), choices[q])
            if lab.abstain:
                self.label_vs_majority["abstained"] += 1
            elif lab.label is not None:
                self.label_vs_majority[_AGREEMENT[(label_right, majority_right)]] += 1
            if lab.label is not None and not lab.abstain:
                labelled += 1
                right += int(label_right)
            if lab.abstain:
                continue
            for v in range(rewards.shape[0] // Q):
                for j in range(N):
                    ans = step.answers[q][v * M + j]
                    rew_agree += int((float(rewards[v * Q + q, j]) > 0) == (ans in correct))
                    rew_total += 1
        if online:
            out["online_accuracy"] = sum(online) / len(online)
        if labelled:
            out["label_accuracy"] = right / labelled
            out["err_at_sel"] = 1 - right / labelled
        if rew_total:
            out["reward_accuracy"] = rew_agree / rew_total
        return out


    # ------------------------------------------------------------------ calibration
    def fit_calibration(self, questions: list[dict]) -> dict[str, Any]:
        """Sample M votes on the labelled dev-cal ``questions`` and fit the labeler's calibration
        (``LABELER_CALIBRATIONS``); returns ``{"labeler_kwargs": {...}, "num_questions": n}``."""
        missing = [q.get("id", i) for i, q in enumerate(questions) if q.get("gold") is None]
        if missing:
            raise UserError(f"calibration questions need a gold answer; missing for {missing[:5]}")
        batch = {"prompt": [q["prompt"] for q in questions], "id": [str(q.get("id", i)) for i, q in
                                                                     enumerate(questions)],
                 "choices": [q.get("choices") for q in questions]}
        seed = derive_seed(self.policy_spec.seed, "calibration", 0, self.global_rank)
        votes, views = self.sample_votes(batch["prompt"], seed)
        records = self.vote_records(votes, batch["id"] * (len(views) // len(questions)), views, batch["choices"])
        fitted = LABELER_CALIBRATIONS[self.hparams.pseudo_labeler](
            self, votes, records, [str(q["gold"]) for q in questions], batch["choices"])
        return {"labeler_kwargs": fitted, "num_questions": len(questions)}

    # ------------------------------------------------------------------ validation: avg@k, maj@k, pass@k
    def validation_step(self, batch, batch_idx):
        from ttrl_lightning.eval.sampled import sampled_metrics

        h = self.hparams
        params = SamplingParams(n=h.eval_k, temperature=h.eval_temperature, top_p=h.eval_top_p,
                                max_new_tokens=h.max_new_tokens, stop=tuple(h.stop),
                                seed=derive_seed(self.policy_spec.seed, "rollout", batch_idx, self.global_rank))
        rollouts = self.engine.generate(self.policy, batch["prompt"], params)
        texts = [rollouts.texts[i * h.eval_k:(i + 1) * h.eval_k] for i in range(len(batch["prompt"]))]
        golds = batch.get("gold") or batch.get("answer")
        if golds is None:
            return
        m = sampled_metrics(texts, [str(g) for g in golds], choices=batch.get("choices"),
                            extract=ANSWER_EXTRACTORS[h.answer_extractor])
        k = h.eval_k
        n = len(texts)
        self.log_dict({f"val/avg@{k}": m.avg_at_k, f"val/maj@{k}": m.maj_at_k, f"val/pass@{k}": m.pass_at_k},
                      batch_size=n, on_epoch=True, prog_bar=False)


def _question_ids(batch: dict[str, list]) -> list[str]:
    ids = batch.get("id")
    if ids is None:
        return [f"q{i}" for i in range(len(batch["prompt"]))]
    ids = [str(i) for i in ids]
    if len(set(ids)) != len(ids):
        raise UserError(f"question ids repeat within a batch: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
    return ids


#: (label right, original-view majority right) -> the counter of ``TTRLModule.label_vs_majority``
_AGREEMENT = {(True, True): "both_right", (True, False): "recovered", (False, True): "lost",
              (False, False): "both_wrong"}


def _majority_ratio(answers: Sequence[str]) -> float:
    """The winning answer's share of the votes (``consensus`` majority, its tie rule)."""
    decision = aggregate(answers, "majority")
    return decision.support[decision.answer] / len(answers)


def _same(answer: str, gold: str, choices) -> bool:
    return answer != NO_ANSWER and answers_equal(answer, gold)


def _correct_classes(answers: Sequence[str], gold: str, choices) -> set[str]:
    """The canonical answers among ``answers`` equal to ``gold``."""
    return {a for a in set(answers) if _same(a, gold, choices)}


# ---------------------------------------------------------------------- pixel: inputs and calibration
@LABELER_INPUTS.register("pixel")
def _pixel_inputs(module: TTRLModule, votes: Rollouts, records: list[dict]) -> list[dict]:
    """Decisive-token masks (from the completion ids), Dawid-Skene slot reliabilities over the batch and,
    for agent rollouts with tool steps, each rollout's VisFid against the question's other answered rollouts
    (``fidelity.group_visfid``; a rollout nothing scores counts as 1, a question with none as neutral)."""
    from ttrl_lightning.pseudo_labels.pixel import batch_reliability, decisive_token_mask
    from ttrl_lightning.tools.protocol import CALL_END, CALL_START, OBSERVATION_END

    tok = module.tokenizer
    ids = [tok.convert_tokens_to_ids(t) for t in (CALL_START, CALL_END, OBSERVATION_END)]
    # a tokenizer without the tool tokens: distinct ids no token has, so no step is a tool call
    ids = [i if i is not None and i != tok.unk_token_id else -1 - k for k, i in enumerate(ids)]
    masks = []
    for row, m in zip(votes.completion_ids.tolist(), votes.completion_mask.tolist()):
        n = int(sum(m))
        masks.append(decisive_token_mask(row[:n], *ids))
    per_q = len(votes.texts) // len(records)
    answers = [canonical_answers(rec["rollouts"]) for rec in records]
    reliability = batch_reliability([[None if a == NO_ANSWER else a for a in row] for row in answers])
    out = [{"decisive_masks": masks[q * per_q:(q + 1) * per_q], "reliability": reliability[q]}
           for q in range(len(records))]
    trajectories = getattr(votes, "trajectories", None)
    if trajectories:
        from ttrl_lightning.fidelity import group_visfid

        for q, extra in enumerate(out):
            group = trajectories[q * per_q:(q + 1) * per_q]
            vis = group_visfid([t.evidence for t in group],
                               [t.answer is not None and not t.truncated for t in group])
            if any(v is not None for v in vis):
                extra["visual_fidelity"] = [1.0 if v is None else v for v in vis]
    return out


@LABELER_CALIBRATIONS.register("pixel")
def _pixel_calibration(module: TTRLModule, votes: Rollouts, records: list[dict], golds: list[str],
                       choices: list) -> dict:
    """Pixel TTRL's temperature (Cal_j) and conformal threshold fitted on the dev-cal split."""
    from ttrl_lightning.pseudo_labels.pixel import calibrate_pixel

    extra = _pixel_inputs(module, votes, records)
    groups = [rec["rollouts"] for rec in records]
    kwargs = {k: v for k, v in module.labeler_kwargs.items() if k not in ("temperature", "conformal_qhat")}
    cal = calibrate_pixel(groups, golds, choices=list(choices), decisive_masks=[e["decisive_masks"] for e in extra],
                          reliability=[e["reliability"] for e in extra], **kwargs)
    return {"temperature": float(cal.temperature), "conformal_qhat": float(cal.conformal_qhat)}
