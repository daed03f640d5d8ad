"""``TTRLModule``: test-time RL on unlabeled questions, rewarded by pseudo-labels (TTRL, Zuo et al. 2025;
Self-Harmony; VisConf; Pixelis sec. 3.2.3 and appendix 6).

One step is GRPO's (:class:`~ttrl_lightning.modules.grpo.GRPOModule`); its stages hand each other returned
records, as TTRL-on-verl labels in its reward stage:

    rollout(batch)      samples only: M = voting.num_votes votes per question (plus M fused Reframe-and-Solve
                        samples for a labeler whose spec votes over the reframed view, ``self_harmony``:
                        prompt ``voting.fused_prompt_template.format(prompt=...)``, one generation each)
    score(votes, batch) labels: the votes are put in question order by one stable sort of their prompt index
                        and cut into one columnar ``QuestionVotes`` per question (canonical answers, texts, views,
                        the engine's [N, T] signal tensors; no gold, no per-token lists) ->
                        ``pseudo_label(voting.labeler, ...)`` -> the labels' [Q, V * M] rewards and row masks
                        laid out on the rows trained on in one view/transpose (``labelling``): the
                        ``RolloutRewards`` of the first N = voting.num_trained rows of every prompt (the
                        samples are i.i.d., so the first N are a uniform draw: TTRL's 64 votes / 32 trained),
                        a question whose labeler abstains left out (``group_mask``), rows a labeler rejects
                        from the update (``PseudoLabel.row_mask``: Pixelis' near-duplicate rollouts) dropped
                        whole (no policy or KL term, no weight, advantage 0); its ``detail`` is the
                        ``VoteStep`` (votes, labels, answers, ids)
    group_advantages    "group": GRPO's group-relative advantages; "ema_baseline" (Pixelis appendix 6):
                        A_j = vbar [r_j - b] with b an EMA (``advantage.baseline_momentum``) of the mean reward
                        of accepted questions and vbar = 1, or, with ``advantage.retrieval``, vbar(N(q)) and the
                        per-query b(q) of the question's retrieved neighbours (``ttrl.retrieval``); normalised
                        within the batch (the appendix's practical note ii)
    step_metrics        GRPO's metrics plus ``ttrl.monitor.ttrl_metrics`` of the ``RolloutRewards`` and the
                        step's token KL (``StepStats``)

**Gold never reaches a reward**: the pseudo-labels are computed from the rollouts alone; the batch's ``gold``
column is read afterwards by ``ttrl_metrics``, for the logged metrics only (its docstring lists them). The one
exception is a control, not a test-time method: the ``gold_reward`` labeler (RLVR's upper bound), whose spec
``reads_gold``, is handed each question's gold answer.

What the module supplies around each labeler (its per-token signals, views, default advantage, extra inputs
and calibration) is the labeler's ``LabelerSpec`` (``modules.ttrl.labelers.TTRL_LABELERS``): ``pixel`` gets
each rollout's decisive-token mask, Dawid-Skene reliabilities of the rollout slots over the batch's questions,
and its temperature / conformal threshold fitted on a labelled dev-cal split at the start of training
(``calibrate``; the datamodule's ``calibration_questions()``).

Regimes: TTRL's epochs over a fixed unlabeled set (``QuestionDataModule(shuffle=True)``, ``max_epochs``) or
Pixelis' online stream (``shuffle=False``, one epoch: each question seen once; ``online_accuracy`` is the
"before", ``ttrl eval`` on the stream file after training the "after").
"""
from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any, ClassVar, Sequence

import torch

from ttrl_lightning.answers import ANSWER_EXTRACTORS
from ttrl_lightning.data.pool_schema import TOKEN_FIELDS
from ttrl_lightning.errors import UserError
from ttrl_lightning.modules.base import PolicySpec
from ttrl_lightning.modules.grpo import GRPOModule
from ttrl_lightning.modules.step_records import RolloutRewards, StepStats, VoteStep
from ttrl_lightning.modules.perturbations import VOTE_PERTURBATIONS
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec, spec_of
from ttrl_lightning.modules.ttrl.specs import AdvantageSpec, EvalSpec, VotingSpec
from ttrl_lightning.modules.ttrl.labelers import TTRL_LABELERS, LabelerSpec, LabellingContext, labeler_spec
from ttrl_lightning.modules.ttrl.labelling import label_votes, vote_signal_names, vote_views, votes_by_question
from ttrl_lightning.modules.ttrl.monitor import TTRLCounters, ttrl_metrics
from ttrl_lightning.rollout.base import Rollouts, SamplingParams
from ttrl_lightning.rollout.requests import as_requests
from ttrl_lightning.seeding import derive_seed

__all__ = ["TTRLModule", "VoteStep", "TTRL_LABELERS", "LabelerSpec"]

class TTRLModule(GRPOModule):
    """Test-time RL with pseudo-labels (see the module docstring).

    Args (the grouped ones are specs that check themselves: ``modules.specs``):
      policy: the ``PolicySpec`` (TTRL's learning rate 1e-5 by default);
      voting: the ``VotingSpec``: the labeler and its options, M votes and N trained per prompt, the answer
        extractor, the fused template, the warm-up;
      signals: per-token signals recorded while sampling (default: the labeler's, ``LabelerSpec.signals``);
      perturbation: ``{"name": <VOTE_PERTURBATIONS name>, <options>}`` applied to the votes before labelling,
        for robustness studies (``modules.perturbations``: ``flip_answers``; None: off);
      advantage: the ``AdvantageSpec``: "group" or "ema_baseline" (default: the labeler's), the EMA's
        momentum, the retrieval of Pixelis supp. S6;
      calibrate: fit the labeler's calibration (pixel: temperature and conformal threshold) on the
        datamodule's labelled dev-cal questions at the start of training;
      eval: the ``EvalSpec`` of validation (k samples per question, their temperature and top-p);
      sampling, grpo, engine, prompt_format: as ``GRPOModule``'s (``grpo.kl_coef`` 0 by default, the TTRL
        recipe's). GRPO's ``num_generations`` is ``voting.num_trained``. ``engine={"name": "agent", <options>}``
        rolls out as a tool-using agent (``rollout.agent.AgentEngine``; options e.g. ``"max_steps": 4,
        "max_turn_tokens": 160``): the prompts are ``AgentPrompt`` s with their pixels
        (``data.cota.AgentPromptDataModule``), the labeler's signals are replayed over the trajectories and
        ``pixel`` scores each vote's tool steps (VisFid); use ``voting.answer_extractor: agent_answer``. An
        agent has no fused view.
    Batch: ``{"prompt": [...], "id"?: [...], "gold"?: [...] (monitoring only), "choices"?: [...]}``.
    """

    unsaved_init_args: ClassVar[tuple[str, ...]] = ("rewards", "engine")

    def __init__(
        self,
        policy: PolicySpec = PolicySpec(lr=1e-5),
        voting: VotingSpec = VotingSpec(),
        signals: Sequence[str] | None = None,
        perturbation: dict[str, Any] | None = None,
        advantage: AdvantageSpec = AdvantageSpec(),
        calibrate: bool = True,
        eval: EvalSpec = EvalSpec(),
        sampling: SamplingSpec = SamplingSpec(),
        grpo: GRPOSpec = GRPOSpec(kl_coef=0.0),
        engine: str | dict[str, Any] | None = None,
        prompt_format: str = "auto",
    ):
        voting = spec_of(VotingSpec, voting, "voting")
        evaluation = spec_of(EvalSpec, eval, "eval")
        advantage = spec_of(AdvantageSpec, advantage, "advantage").resolved(voting.labeler)
        _check_negative_branch(voting, advantage)
        signals = _checked_options(f"{type(self).__name__} argument ", voting, signals, perturbation)
        super().__init__(policy=policy, num_generations=voting.num_trained, sampling=sampling, grpo=grpo,
                         record_signals=bool(signals), engine=engine, prompt_format=prompt_format)
        self.voting, self.evaluation, self.advantage = voting, evaluation, advantage
        self.save_hyperparameters({"voting": asdict(voting), "eval": asdict(evaluation),
                                   "advantage": asdict(advantage)})
        self.neighbourhoods = None  # ttrl.retrieval.QueryNeighbourhoods, built with the policy
        self._pending_neighbourhoods: dict | None = None
        self.refuse_a_fused_view_without_text_prompts()
        self.signal_names = tuple(signals)
        self.calibration: dict[str, Any] | None = None
        self.baseline: float | None = None  # the EMA baseline b of "ema_baseline"
        self.counters = TTRLCounters()  # the run's cumulative counts (ttrl.monitor), checkpointed

    def refuse_a_fused_view_without_text_prompts(self) -> None:
        """A fused labeler (Self-Harmony) samples a reframed view of each text prompt; an engine that takes no
        text prompts (the agent engine's ``AgentPrompt`` s) has none: one ``UserError``."""
        if self.labeler.fused and not self.engine_takes_text_prompts:
            raise UserError(f"{type(self).__name__}: {self.voting.labeler} samples a reframed view, which the "
                            f"prompts of {type(self.engine).__name__} do not have; use a one-view labeler with it")

    # ------------------------------------------------------------------ state
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["ttrl"] = {"calibration": self.calibration, "baseline": self.baseline,
                              **self.counters.state_dict()}
        if self.query_neighbourhoods() is not None:
            checkpoint["ttrl"]["retrieval"] = self.neighbourhoods.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("ttrl", {})
        self.calibration = state.get("calibration")
        if self.calibration and "labeler_kwargs" in self.calibration:  # a checkpoint of the flat options' time
            self.calibration = {"options": self.calibration.pop("labeler_kwargs"), **self.calibration}
        self.baseline = state.get("baseline")
        self.counters.load_state_dict(state)
        self._pending_neighbourhoods = state.get("retrieval")

    def on_fit_start(self) -> None:
        super().on_fit_start()
        if self.hparams.calibrate and self.calibration is None and self.labeler.calibration is not None:
            questions = self._calibration_questions()
            if questions:
                self.calibration = self.fit_calibration(questions)

    def _calibration_questions(self) -> list[dict]:
        dm = getattr(self.trainer, "datamodule", None)
        get = getattr(dm, "calibration_questions", None)
        return list(get()) if get is not None else []

    # ------------------------------------------------------------------ voting
    @property
    def labeler(self) -> LabelerSpec:
        """The pseudo-labeler's ``LabelerSpec`` (``TTRL_LABELERS``; the default spec when it has none)."""
        return labeler_spec(self.voting.labeler)

    def vote_views(self, num_questions: int) -> list[str]:
        """The view of every vote prompt (``labelling.vote_views``)."""
        return vote_views(self.labeler, num_questions)

    def vote_prompts(self, prompts: Sequence) -> list:
        """The requests sampled for voting: the questions, then (a fused labeler) their fused prompts
        (``PromptRenderer.fused`` with ``voting.fused_prompt_template``, the reframed view, its images kept),
        each given to the model by ``prompt_format`` (``model_prompts``), so the fused instruction lies inside
        the user turn of a chat template, never in the assistant's (Self-Harmony sec. 3: the Reframer and the
        Solver are one model prompted in its own format).

        Departure from Self-Harmony, which gives the reframe instruction as a system prompt: here it is text
        of the user turn, around the question. The template wraps each question (``{prompt}``) rather than
        standing apart from it; the ``plain`` format (the tiny models, whose SFT traces show the instruction
        after the question) has no system turn, and chat templates differ in theirs (some refuse a system
        role, some add a default system prompt when none is given), so one placement that holds for every
        model is the user turn; and every view's instruction is placed by the same rule, so the two views
        differ in the instruction only. A chat model tuned to follow system prompts may follow the instruction
        less well in the user turn (docs/ttrl.md, the prompt rule)."""
        self.refuse_a_fused_view_without_text_prompts()  # an engine set after construction
        if not self.labeler.fused:
            return self.model_prompts(prompts)
        requests = as_requests(prompts)
        template = self.voting.fused_prompt_template
        return self.model_prompts(requests + [self.renderer.fused(r, template) for r in requests])

    def sample_votes(self, prompts: Sequence[str], seed: int | None) -> Rollouts:
        """M samples of every vote prompt of ``prompts`` (``vote_prompts``; the requests of ``batch_prompts``, a
        question's images with it)."""
        params = replace(self.sampling_params(seed), n=self.voting.num_votes)
        return self.engine.generate(self.policy, self.vote_prompts(prompts), params)

    def label_votes(self, votes: Rollouts, batch: dict[str, list]) -> RolloutRewards:
        """Pseudo-label every question of ``batch`` from its votes (never from gold) and lay the labels'
        rewards and row masks out on the rows trained on (``labelling.label_votes``, with this module's voting
        spec, labelling context, recorded signals, calibration, step and negative shift)."""
        return label_votes(votes, batch, self.voting, self.labelling_context(), signal_names=self.signal_names,
                           calibration=self.calibration, global_step=self.global_step,
                           negative_shift=self.advantage.negative_shift)

    def labelling_context(self) -> LabellingContext:
        """What the labeler's hooks read (``LabellingContext``): the tokenizer, the policy seed, this call's step
        (``global_step * world_size + global_rank``; no trainer, as in a unit test: one process) and
        ``voting.options``."""
        world = self._trainer.world_size if self._trainer is not None else 1
        return LabellingContext(self.tokenizer, self.policy_spec.seed, self.global_step * world + self.global_rank,
                                self.voting.options)

    # ------------------------------------------------------------------ GRPO hooks
    def uniform_images(self) -> str | None:
        """A labeler that reads image signals (``LabelerSpec.image_signals``: ``visconf``) scores image questions
        by their visual engagement: the questions it labels show images, all of them or none."""
        if self.labeler.image_signals:
            return f"{self.voting.labeler} scores image questions by their visual engagement"
        return None

    def rollout(self, batch: dict[str, list]) -> Rollouts:
        """The M votes of every question (and its fused prompt), prompt-major; perturbed when
        ``perturbation`` is set (a robustness study rewrites votes before they are labelled).

        Questions with images are sampled with them (``SamplingRequest.images``: the HF engine,
        ``rollout.image_sampling``) and trained on with them (``Rollouts.images``). For a labeler that reads
        image signals (``LabelerSpec.image_signals``: ``visconf``) a batch mixing questions with and without
        images is one ``UserError`` (``PromptRenderer.check``); a run refuses such a training split before its
        first step (``check_fit_questions``)."""
        prompts = self.batch_prompts(batch)
        if self.uniform_images():
            self.renderer.check(prompts, self.engine, uniform_images=self.uniform_images())
        votes = self.sample_votes(prompts, self.rollout_seed())
        if self.hparams.perturbation:
            options = {k: v for k, v in self.hparams.perturbation.items() if k != "name"}
            votes = VOTE_PERTURBATIONS[self.hparams.perturbation["name"]](self, votes, batch, **options)
        return votes

    def score(self, votes: Rollouts, batch: dict[str, list]) -> RolloutRewards:
        """The rewards of the rows trained on, the first N of every prompt (``label_votes``): the
        pseudo-labels' rewards, abstained questions masked (``group_mask``), rows a labeler rejects from the
        update dropped (``row_mask``: no policy or KL term, no weight in the aggregation, advantage 0); the
        ``VoteStep`` is the record's ``detail``."""
        return self.label_votes(votes, batch)

    @classmethod
    def resolved_hparams(cls, init_args: dict) -> dict:
        """``advantage.rule: None`` is saved as the labeler's default rule (``LabelerSpec.advantage``)."""
        out = super().resolved_hparams(init_args)
        voting = spec_of(VotingSpec, out.get("voting"), "voting")
        advantage = spec_of(AdvantageSpec, out.get("advantage"), "advantage")
        out["advantage"] = asdict(advantage.resolved(voting.labeler))
        return out

    def group_advantages(self, scored: RolloutRewards) -> torch.Tensor:
        """GRPO's advantages (``"group"``), Pixelis' EMA-baseline advantages (``"ema_baseline"``) or DDRL's fixed
        ones (``"fixed"``: ``sign(r - mean_g r)``); rows the labeler rejected from the update
        (``scored.row_mask``) get 0; the rows of a question on RESTRAIN's negative branch
        (``advantage.negative_shift`` delta, ``PseudoLabel.negative``) get ``-delta``, and take no part in the
        other questions' advantages (the EMA baseline's batch mean)."""
        negative = self.negative_groups(scored, scored.num_groups)
        if negative is not None:
            scored = replace(scored, group_mask=scored.kept_groups() & ~negative)
        if self.advantage.rule == "group":
            adv = super().group_advantages(scored)
        elif self.advantage.rule == "fixed":
            adv = fixed_advantages(scored.by_group(scored.rewards), scored.kept_groups()).reshape(scored.num_rows)
        else:
            adv = self.ema_baseline_advantages(scored)
        if negative is not None:
            shift = torch.full_like(adv, -float(self.advantage.negative_shift))
            adv = torch.where(negative.to(adv.device).repeat_interleave(scored.group_size), shift, adv)
        return adv * scored.rows(adv.shape[0]).to(adv.device)

    def negative_groups(self, scored: RolloutRewards, num_groups: int) -> torch.Tensor | None:
        """[G] bool: the trained groups (prompt-major, ``v * Q + q``) of questions on RESTRAIN's negative
        branch; None when the branch is off or no question is on it."""
        if self.advantage.negative_shift <= 0 or not isinstance(scored.detail, VoteStep):
            return None
        labels = scored.detail.labels
        flags = torch.tensor([lab.negative for lab in labels], dtype=torch.bool)
        if not bool(flags.any()):
            return None
        return flags.repeat(num_groups // len(labels)).to(scored.rewards.device)

    def ema_baseline_advantages(self, scored: RolloutRewards) -> torch.Tensor:
        """Pixelis appendix 6: ``A_j = vbar [r_j - b]``, ``b <- rho b + (1 - rho) mean(r of accepted
        questions)`` (updated after use; the first step's b is that step's mean), vbar = 1; with ``retrieval``
        a question with neighbours takes its own ``vbar(N(q))`` and ``b(q)`` instead (``ttrl.retrieval``). A
        is normalised by its standard deviation over the accepted rows of the batch. Abstained questions' rows
        get 0."""
        keep = scored.kept_groups().repeat_interleave(scored.group_size)
        r = scored.rewards.float()
        accepted = r[keep]
        if accepted.numel() == 0:
            return torch.zeros_like(r)
        batch_mean = float(accepted.mean())
        b = batch_mean if self.baseline is None else self.baseline
        adv = r - b
        if self.query_neighbourhoods() is not None:
            adv = self.neighbourhood_advantages(scored, adv)
        std = adv[keep].std() if int(keep.sum()) > 1 else torch.zeros(())
        if float(std) > 1e-6:
            adv = adv / std
        rho = self.advantage.baseline_momentum
        self.baseline = batch_mean if self.baseline is None else rho * self.baseline + (1 - rho) * batch_mean
        return torch.where(keep, adv, torch.zeros_like(adv))

    def query_neighbourhoods(self):
        """The run's ``QueryNeighbourhoods`` (``retrieval``; None without), built once the policy exists."""
        options = self.advantage.retrieval
        if options is None or self.policy is None:
            return None
        if self.neighbourhoods is None:
            from ttrl_lightning.modules.ttrl.retrieval import QueryNeighbourhoods

            dim = int(self.policy.config.get_text_config().hidden_size)
            self.neighbourhoods = QueryNeighbourhoods(dict(options), dim)
        if self._pending_neighbourhoods is not None:
            self.neighbourhoods.load_state_dict(self._pending_neighbourhoods)
            self._pending_neighbourhoods = None
        return self.neighbourhoods

    def neighbourhood_advantages(self, scored: RolloutRewards, fallback: torch.Tensor) -> torch.Tensor:
        """``vbar(N(q)) [r_j - b(q)]`` on the rows of each question with neighbours (``fallback``, the global
        rule's ``r_j - b``, elsewhere); the accepted questions are then appended as exemplars, valued by their
        rows' mean reward (``ttrl.retrieval``)."""
        from ttrl_lightning.modules.ttrl.retrieval import prompt_keys
        from ttrl_lightning.retrieval import neighbourhood_advantages

        hood = self.neighbourhoods
        rollouts, n, G = scored.rollouts, scored.group_size, scored.num_groups
        ids = list(scored.detail.ids) * (G // len(scored.detail.ids))
        first = torch.arange(G, device=rollouts.prompt_ids.device) * n
        keys = prompt_keys(self.policy, rollouts.prompt_ids[first], rollouts.prompt_mask[first])
        values = hood.neighbourhood_values(ids, keys)
        r = scored.rewards.float().view(G, n)
        adv = fallback.clone().view(G, n)
        kept = scored.mask(G).tolist()
        for g, (qid, v) in enumerate(zip(ids, values)):
            if kept[g] and v is not None:
                b_q = hood.baseline.update(qid, v)
                adv[g] = torch.as_tensor(neighbourhood_advantages(r[g].tolist(), v, b_q), dtype=adv.dtype)
        accepted = [g for g in range(G) if kept[g]]
        hood.append([ids[g] for g in accepted], keys[accepted], [float(r[g].mean()) for g in accepted])
        return adv.view(-1)

    # ------------------------------------------------------------------ monitoring (gold read here only)
    def step_metrics(self, batch: dict[str, list], scored: RolloutRewards, stats: StepStats) -> dict[str, Any]:
        """GRPO's metrics and TTRL's (``ttrl.monitor.ttrl_metrics`` of the ``VoteStep``; gold from
        ``batch["gold"]`` where present), counted into ``self.counters``."""
        out = super().step_metrics(batch, scored, stats)
        metrics = ttrl_metrics(scored, batch.get("gold"), batch.get("choices"), self.counters,
                               step_index=int(self.global_step), token_kl=stats.token_kl,
                               completion_mask=scored.rollouts.completion_mask,
                               rewards_are_labels=self.labeler.labels,
                               negative_branch=self.advantage.negative_shift > 0)
        out.update({f"train/{k}": torch.tensor(float(v)) for k, v in metrics.items()})
        return out

    # ------------------------------------------------------------------ calibration
    def fit_calibration(self, questions: list[dict]) -> dict[str, Any]:
        """Sample M votes on the labelled dev-cal ``questions`` and fit the labeler's calibration
        (``LabelerSpec.calibration``); returns ``{"options": {...}, "num_questions": n}`` (fitted labeler options)."""
        missing = [q.get("id", i) for i, q in enumerate(questions) if q.get("gold") is None]
        if missing:
            raise UserError(f"calibration questions need a gold answer; missing for {missing[:5]}")
        batch = {"prompt": [q["prompt"] for q in questions], "id": [str(q.get("id", i)) for i, q in
                                                                     enumerate(questions)],
                 "choices": [q.get("choices") for q in questions],
                 "images": [q.get("images") or () for q in questions]}
        seed = derive_seed(self.policy_spec.seed, "calibration", 0, self.global_rank)
        votes = self.sample_votes(self.batch_prompts(batch), seed)
        groups = votes_by_question(votes, len(questions), self.vote_views(len(questions)), batch["choices"],
                                   vote_signal_names(self.labeler, self.signal_names, votes),
                                   self.voting.answer_extractor)
        fitted = self.labeler.calibration(self.labelling_context(), votes, groups,
                                          [str(q["gold"]) for q in questions], batch["choices"])
        return {"options": fitted, "num_questions": len(questions)}

    # ------------------------------------------------------------------ validation: avg@k, maj@k, pass@k
    def validation_step(self, batch, batch_idx):
        from ttrl_lightning.eval.sampled import sampled_metrics

        e = self.evaluation
        params = SamplingParams(n=e.k, temperature=e.temperature, top_p=e.top_p,
                                max_new_tokens=self.sampling.max_new_tokens, stop=self.sampling.stop,
                                seed=derive_seed(self.policy_spec.seed, "rollout", batch_idx, self.global_rank))
        rollouts = self.engine.generate(self.policy, self.model_prompts(self.batch_prompts(batch)), params)
        texts = [rollouts.texts[i * e.k:(i + 1) * e.k] for i in range(len(batch["prompt"]))]
        golds = batch.get("gold")
        if golds is None:
            return
        m = sampled_metrics(texts, [str(g) for g in golds], choices=batch.get("choices"),
                            extract=ANSWER_EXTRACTORS[self.voting.answer_extractor])
        self.log_dict({f"val/avg@{e.k}": m.avg_at_k, f"val/maj@{e.k}": m.maj_at_k, f"val/pass@{e.k}": m.pass_at_k},
                      batch_size=len(texts), on_epoch=True, prog_bar=False)


def fixed_advantages(rewards: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """DDRL's fixed advantages, [G, N] rewards -> [G, N]: ``sign(r_ij - mean_j r_ij)`` (+1 / -1, 0 for a reward
    within 1e-6 of its group's mean, so a group of equal rewards gets 0 whatever the rounding of its mean); groups
    not in ``keep`` [G] get 0."""
    gap = rewards - rewards.mean(dim=1, keepdim=True)
    adv = torch.where(gap.abs() <= 1e-6, torch.zeros_like(gap), torch.sign(gap))
    return torch.where(keep.to(adv.device)[:, None], adv, torch.zeros_like(adv))


def _check_negative_branch(voting: VotingSpec, advantage: AdvantageSpec) -> None:
    """``advantage.negative_shift`` (RESTRAIN's negative branch) trains the questions that fail ``majority``'s
    consensus gate (``PseudoLabel.negative``): without such a gate (another labeler, or majority without a
    ``min_share`` above 0 or a ``min_margin``) it can never act, and a run configured with it is refused in one
    line rather than run as if the guard were on."""
    if advantage.negative_shift <= 0:
        return
    from ttrl_lightning.pseudo_labels.majority import has_consensus_gate

    if voting.labeler == "majority" and has_consensus_gate(voting.options):
        return
    raise UserError(f"advantage.negative_shift {advantage.negative_shift:g} trains the questions that fail "
                    f"majority's consensus gate (voting.options min_share above 0 or min_margin), and voting "
                    f"({voting.labeler}, options {dict(voting.options) or 'none'}) has none: it could never act; "
                    "set a gate, or negative_shift 0")


def _checked_options(where: str, voting: VotingSpec, signals, perturbation) -> tuple[str, ...]:
    """The signals to record (the labeler's by default), after refusing (``UserError`` naming the argument) a
    perturbation that is not registered and signals that cannot be recorded while sampling. The voting
    options checked themselves (``VotingSpec``)."""
    if perturbation is not None and (not isinstance(perturbation, dict)
                                     or perturbation.get("name") not in VOTE_PERTURBATIONS):
        raise UserError(f"{where}perturbation must be {{'name': one of "
                        f"{', '.join(VOTE_PERTURBATIONS.names())}, <options>}}, got {perturbation!r}")
    spec = labeler_spec(voting.labeler)
    signals = tuple(spec.signals if signals is None else signals)
    unknown = [x for x in signals if x not in TOKEN_FIELDS[:3]]
    if unknown:
        raise UserError(f"{where}signals: {unknown} cannot be recorded while sampling; known: "
                        f"{', '.join(TOKEN_FIELDS[:3])}")
    return signals
