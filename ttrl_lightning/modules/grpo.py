"""``GRPOModule``: group-relative policy optimisation with a token-level k3 KL to a reference.

One training step (``training_step``) reads top to bottom; each stage is a short overridable hook and hands
the next one a returned record (torchtune's ``GRPOTrajectory`` / ``GRPOStats``), never a stashed attribute:

    rollouts   = self.rollout(batch)                  # samples (N per prompt; TTRL: its M votes)
    scored     = self.scored(rollouts, batch)         # self.score, checked: RolloutRewards of the rows
                                                      # trained on (scored.rollouts), group_mask, row_mask
    advantages = self.group_advantages(scored)        # compute_advantages per group; 0 where masked
    stats      = self.optimize(scored, advantages)    # StepStats; num_iterations updates of
                 #   aggregate(w_tis * policy_loss(logp, old_logp, A) + beta * kl_penalty(logp, ref),
                 #             the completion tokens of the kept groups and rows)
    self.engine.sync_weights(self.policy)             # an engine with its own weights gets the new ones
    self.log_dict(self.step_metrics(batch, scored, stats))   # train/<name>; subclasses add their own
                                                      # (NaN where an earlier step had one: ``with_gaps``)

The rollout engine is ``engine``: a ``rollout.ROLLOUT_ENGINES`` name (``"hf"``, the default; ``"vllm"``), a
mapping ``{name: vllm, <options>}`` or an engine object. An engine that samples from its own copy of the
weights (``owns_weights``: vLLM) returns its sampler's log-probs (``Rollouts.sampler_logprobs``, raw logits); the
policy's own log-probs stay PPO's "old" log-probs, and the sampler's give the truncated importance weight
``w_tis = min(exp(logp_policy - logp_sampler), tis_cap)`` per token (TIS; verl's and TRL's rollout
importance-sampling correction), and ``train/sampler_logprob_gap = mean |logp_policy - logp_sampler|`` is
logged every step (stale weights show up there). Both compare the two models under the raw logits (the
pool's ``logprob``; the policy's come from the training forward itself, no second pass). The HF engine fills
``sampler_logprobs`` too when it sampled under a lower-precision autocast (a ``bf16-mixed`` trainer,
``cli.precision``): its cached bf16 decode and the trainer's bf16 full forward round differently, and the same
weight and gap cover that.

Precision: under a ``bf16-mixed`` trainer the model passes run in bf16 autocast and the weights stay fp32;
scoring (labels, rewards, their model passes) runs in fp32 (``base.full_precision``). Lightning's autocast
keeps no weight-cast cache: a cache would hold the bf16 copies of the weights for the whole ``training_step``,
and a second iteration would train on the copies the first one's update left behind
(``tests/modules/test_precision.py`` checks it).

Our reading of TIS at a sampling temperature T != 1: the weight is the ratio of the raw-logit probabilities,
softmax(z_policy) / softmax(z_sampler), not of the distributions the tokens were drawn from,
softmax(z_policy / T) / softmax(z_sampler / T), which the policy loss's log-probs are (``sequence_logprobs``
scores at the sampling temperature, as TRL and verl do). The two ratios are equal at T = 1 only; at T != 1
the raw ratio is a proxy of the sampler/learner mismatch, not the exact importance weight of the tempered
policy. It is kept because ``Rollouts.sampler_logprobs`` are the sampler's raw log-probs, the same values the
signal consumers read as the ``logprob`` signal (VisConf's self-certainty, the pool files); an exact tempered
weight needs the sampler's tempered log-probs (vLLM's ``logprobs_mode="processed_logprobs"``) as well.

CC-RFT and TTRL subclass it and override ``score`` (curiosity/coherence rewards, pseudo-labels; a group
without a pseudo-label abstains through ``group_mask``; TTRL scores M votes and trains on N of them through
``RolloutRewards.rollouts``) or ``compute_advantages`` (value-weighted baselines) without copying the step.
The KL reference is a frozen copy of the initial policy (``reference="initial"``), or the EMA policy set by the
``EMAAnchor`` callback; ``beta`` (``self.kl_coef``) is fixed or driven by the ``PIDKLController`` callback,
which reads ``self.kl_observation`` after every batch: the mean token KL of the last step over the tokens
that carry loss (kept groups, kept rows), logged as ``train/kl``; an abstained group or a dropped row adds no
KL term to the loss and none to the observation (``observed_kl``).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, replace
from typing import Any, ClassVar, Sequence

import torch
from torchmetrics import MeanMetric

from ttrl_lightning.errors import Bounds, UserError, check_bounds
from ttrl_lightning.masking import masked_token_mean
from ttrl_lightning.modules.base import PolicyModule, PolicySpec, full_precision
from ttrl_lightning.modules.disk_weights import DiskWeights, claim_reference_version, reference_file_name
from ttrl_lightning.modules.logprobs import LogprobPath, fused_logprobs
from ttrl_lightning.modules.step_records import RolloutRewards, SamplerCorrection, StepStats
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec, spec_of
from ttrl_lightning.prompt_format import resolve_prompt_format
from ttrl_lightning.modules.losses import (
    LOSS_AGGREGATIONS,
    clipped_policy_loss,
    completion_logprobs,
    group_advantages,
    k3_kl,
    truncated_importance_weights,
)
from ttrl_lightning.modules.fsdp import (
    checkpoint_entry,
    frozen_copy,
    is_sharded,
    load_full_state_dict_,
    pop_copy_entries,
    restore_checkpoint_entry,
)
from ttrl_lightning.rewards.base import RewardFn, call_reward, resolve_reward
from ttrl_lightning.rollout.base import RolloutEngine, Rollouts, SamplingParams, build_engine
from ttrl_lightning.rollout.requests import PromptRenderer, SamplingRequest, as_requests, question_where
from ttrl_lightning.seeding import derive_seed

#: bounds of GRPOModule's own numeric arguments (the grouped specs check theirs: ``modules.specs``)
GRPO_RULES: dict[str, Bounds] = {
    "num_generations": Bounds(low=1, integer=True),
}


def with_gaps(metrics: dict[str, Any], logged: set[str]) -> dict[str, Any]:
    """``metrics`` and NaN for every key in ``logged`` (the step metrics logged earlier) that this step lacks;
    ``logged`` gains this step's keys.

    Lightning hands its loggers, at every step until the epoch ends, the last value of every ``on_step`` metric
    logged so far in the epoch, logged this step or not: without the gap a step that labelled no question
    would log the previous step's label accuracy as its own. NaN says "no value this step" (CSV ``nan``,
    skipped by the curve readers, ``study.runs.logged_curves``); ``last_step_metrics`` keeps the step's own
    keys only."""
    gaps = {key: torch.tensor(float("nan")) for key in logged if key not in metrics}
    logged.update(metrics)
    return {**gaps, **metrics}


class GRPOModule(PolicyModule):
    """GRPO (DeepSeekMath; Pixelis 3.2.2 and appendix 6).

    Args: ``policy`` (``PolicySpec``; GRPO's default learning rate is 1e-4); ``num_generations`` N samples
    per prompt; ``sampling`` (``SamplingSpec``: temperature, top-p, top-k, max new tokens, stop); ``grpo``
    (``GRPOSpec``: reward scaling, clip range, KL coefficient and reference, loss aggregation, iterations,
    gradient norm, TIS cap, log-prob path); ``rewards`` (registry names or callables) with
    ``reward_weights``; ``record_signals``: record the engine's per-token signals while sampling; ``engine``:
    the rollout engine (module docstring: a name, ``{name: ..., <options>}`` or an engine object);
    ``prompt_format``: ``auto`` (default), ``chat`` or ``plain``, how a text prompt becomes the model input,
    the rule ``ttrl eval`` and ``ttrl generate`` apply too (``rollout.requests.PromptRenderer``: the chat
    template when the model has one under ``auto``, never twice).
    The specs are taken and kept whole (``self.sampling``, ``self.grpo``) and saved as mappings.
    Batch: ``{"prompt": [str], <other columns>: [...]}``; other columns are passed to the rewards.
    """

    unsaved_init_args: ClassVar[tuple[str, ...]] = ("rewards", "engine")

    def __init__(
        self,
        policy: PolicySpec = PolicySpec(lr=1e-4),
        num_generations: int = 4,
        sampling: SamplingSpec = SamplingSpec(),
        grpo: GRPOSpec = GRPOSpec(),
        rewards: Sequence[str | RewardFn] = ("exact_answer",),
        reward_weights: Sequence[float] | None = None,
        record_signals: bool = False,
        engine: str | dict[str, Any] | None = None,
        prompt_format: str = "auto",
    ):
        check_bounds(locals(), GRPO_RULES, f"{type(self).__name__} argument ")
        self.sampling = spec_of(SamplingSpec, sampling, "sampling")
        self.grpo = spec_of(GRPOSpec, grpo, "grpo")
        if reward_weights is not None and any(w not in Bounds() for w in reward_weights):
            raise UserError(f"{type(self).__name__} argument reward_weights must be finite numbers, "
                            f"got {list(reward_weights)}")
        super().__init__(policy)
        self.save_hyperparameters({"sampling": asdict(self.sampling), "grpo": asdict(self.grpo)})
        self.num_generations = int(num_generations)  # N samples per prompt (TTRL: voting.num_trained)
        self.automatic_optimization = False
        self.reward_fns: list[RewardFn] = [resolve_reward(r) for r in rewards]
        if not self.reward_fns:
            raise UserError(f"{type(self).__name__} argument rewards: at least one reward is needed")
        w = list(reward_weights) if reward_weights is not None else [1.0] * len(self.reward_fns)
        if len(w) != len(self.reward_fns):
            raise UserError(f"{type(self).__name__}: {len(w)} reward_weights for "
                            f"{len(self.reward_fns)} rewards")
        self.register_buffer("reward_weights", torch.tensor(w, dtype=torch.float32), persistent=False)
        self.engine: RolloutEngine = build_engine(engine, self.tokenizer, **self.engine_defaults(record_signals))
        resolve_prompt_format(prompt_format, self.tokenizer)  # "chat" without a chat template: refused here
        self.kl_coef = float(self.grpo.kl_coef)
        self.kl_observation: torch.Tensor | None = None
        self.kl_observation_tokens: torch.Tensor | None = None
        self._reference: list[torch.nn.Module] = []  # a list keeps it out of this module's parameters
        self._pending_reference_state: dict | None = None
        self._disk_reference: DiskWeights | None = None  # grpo.reference_storage: disk
        self._pending_reference_file: dict | None = None
        self.train_reward = MeanMetric()
        self.val_accuracy = MeanMetric()
        self.logged_metric_keys: set[str] = set()  # every step metric logged so far in the run (``with_gaps``)
        self.logprob_path = LogprobPath(self.grpo.logprob_impl, type(self).__name__)

    # ------------------------------------------------------------------ reference model
    def set_reference_model(self, model: torch.nn.Module | None) -> None:
        """Use ``model`` (frozen, not trained, not checkpointed here) as the KL reference."""
        self._reference = [] if model is None else [model]

    @property
    def reference_model(self) -> torch.nn.Module | None:
        return self._reference[0] if self._reference else None

    def on_fit_start(self) -> None:
        self.check_fit_questions()
        ref = self.grpo.reference
        if ref == "external" and self.reference_model is None:
            raise UserError("grpo.reference='external' but no callback set a reference model: add the EMAAnchor "
                            "callback (trainer.callbacks) or use grpo.reference 'initial'")
        if ref == "initial" and self.reference_model is None:
            frozen = frozen_copy(self.policy)  # sharded like the policy under FSDP2
            if self._pending_reference_state is not None:
                load_full_state_dict_(frozen, self._pending_reference_state)
                self._pending_reference_state = None
            if self.grpo.reference_storage == "disk":
                self._disk_reference = self._reference_on_disk(frozen)
            self.set_reference_model(frozen)

    def _reference_on_disk(self, frozen: torch.nn.Module) -> DiskWeights:
        """``frozen``'s parameters in a file under the run's folder (or the file a resumed checkpoint names)."""
        if is_sharded(frozen):
            raise UserError("grpo.reference_storage='disk' keeps a whole copy of the reference in one file; the "
                            "policy is sharded (FSDP): use reference_storage 'memory'")
        if self._pending_reference_file is not None:
            found, self._pending_reference_file = self._pending_reference_file, None
            return self._adopt_reference(frozen, found)
        folder = self._reference_folder()
        # versioned per run, never overwritten: rank 0 claims the version, every rank writes its file of it
        version = claim_reference_version(folder) if self.trainer.global_rank == 0 else None
        version = self.trainer.strategy.broadcast(version, src=0)
        return DiskWeights.write(frozen, os.path.join(folder, reference_file_name(version, self.trainer.global_rank)))

    def _reference_folder(self) -> str:
        """Where the run's reference files are: ``reference/`` under its log folder (or root folder)."""
        return os.path.join(self.trainer.log_dir or self.trainer.default_root_dir, "reference")

    def _adopt_reference(self, model: torch.nn.Module, found: dict) -> DiskWeights:
        """The reference file a checkpoint names (``found``: path and sha256); when that path is gone, the file
        of that name in this run's reference folder (a run folder moved or copied whole), checked by its digest
        as well."""
        path = found["path"]
        if not os.path.isfile(path):
            here = os.path.join(self._reference_folder(), os.path.basename(path))
            path = here if os.path.isfile(here) else path
        return DiskWeights.adopt(model, path, found["sha256"])

    @contextlib.contextmanager
    def reference_weights(self):
        """The KL reference with its parameters in memory: read from its file for the block under
        ``grpo.reference_storage: disk``, as it is otherwise."""
        if self._disk_reference is None:
            yield self.reference_model
        else:
            with self._disk_reference.loaded() as model:
                yield model

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["grpo"] = {"kl_coef": self.kl_coef}
        ref = self.reference_model
        if self._disk_reference is not None:  # the file, named and hashed, not a copy of it
            checkpoint["grpo"]["reference_file"] = self._disk_reference.state()
        elif self.grpo.reference == "initial" and ref is not None:
            if is_sharded(ref):  # its shards join the distributed checkpoint, or its full tensors this entry
                checkpoint["grpo"]["sharded_reference"] = checkpoint_entry(ref, checkpoint, "reference")
            else:
                checkpoint["grpo"]["reference_state"] = ref.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("grpo", {})
        self.kl_coef = float(state.get("kl_coef", self.kl_coef))
        copies = pop_copy_entries(checkpoint.get("state_dict", {}))  # present in consolidated checkpoints
        sharded = state.get("sharded_reference")
        if sharded is not None and self.reference_model is not None:
            restore_checkpoint_entry(self.reference_model, sharded, self.trainer.ckpt_path)
        elif sharded is not None:
            full = sharded.get("full_state") or pop_copy_entries(copies, "reference.")
            if not full:
                raise RuntimeError("the reference's shards are in the distributed checkpoint folder: restore "
                                   "it with the same sharded strategy, or consolidate the folder first")
            self._pending_reference_state = full
        if "reference_file" in state:
            if self.grpo.reference_storage != "disk":
                raise UserError(f"this checkpoint keeps its KL reference in {state['reference_file']['path']} "
                                "(grpo.reference_storage: disk); resume it with that setting")
            if self.reference_model is not None:
                self._disk_reference = self._adopt_reference(self.reference_model, state["reference_file"])
            else:
                self._pending_reference_file = state["reference_file"]
        if "reference_state" in state:
            if self._disk_reference is not None:  # a memory checkpoint resumed on disk: a new file of its state
                frozen = frozen_copy(self.policy)
                load_full_state_dict_(frozen, state["reference_state"])
                self._disk_reference = self._reference_on_disk(frozen)
                self.set_reference_model(frozen)
            elif self.reference_model is not None:
                load_full_state_dict_(self.reference_model, state["reference_state"])
            else:
                self._pending_reference_state = state["reference_state"]

    # ------------------------------------------------------------------ hooks
    def sampling_params(self, seed: int | None) -> SamplingParams:
        s = self.sampling
        return SamplingParams(n=self.num_generations, temperature=s.temperature, top_p=s.top_p,
                              top_k=s.top_k, max_new_tokens=s.max_new_tokens, stop=s.stop, seed=seed)

    def rollout_seed(self) -> int:
        """Seed of this step's sampling: ``derive_seed(seed, "rollout", global_step, global_rank)``, so
        resumes replay it."""
        return derive_seed(self.policy_spec.seed, "rollout", self.global_step, self.global_rank)

    def engine_defaults(self, record_signals: bool) -> dict[str, Any]:
        """What the module gives the engine it builds, unless the engine spec sets it (``rollout.build_engine``
        passes each to an engine whose constructor takes it): ``record_signals`` and the policy's processor."""
        return {"record_signals": record_signals, "processor": self.processor}

    @property
    def engine_takes_text_prompts(self) -> bool:
        """Whether the engine samples a command's text prompts (``RolloutEngine.takes_text_prompts``; an engine
        object that does not say is taken to): the agent engine does not, it templates its ``AgentPrompt`` s
        itself."""
        return bool(getattr(self.engine, "takes_text_prompts", True))

    def batch_prompts(self, batch: dict[str, list], source: str | None = None) -> list:
        """The requests of ``batch`` as written: each question's prompt with its images (``batch["images"]``,
        paths) and id (``batch["id"]``) where the batch has them; for an engine that takes no text prompts (the
        agent engine, which templates its ``AgentPrompt`` s itself), the prompts as they are.

        The agent engine takes its pixels from its ``AgentPrompt`` s only: a question whose images come as
        paths (a question file's ``images``) is one ``UserError`` naming it (``source``: where the batch
        comes from, the module by default), as an engine without images is for the other modules, rather
        than a prompt sampled as text with its images dropped."""
        prompts = batch["prompt"]
        images = batch.get("images") or [()] * len(prompts)
        ids = batch.get("id") or [None] * len(prompts)
        if not self.engine_takes_text_prompts:
            for i, (imgs, q) in enumerate(zip(images, ids)):
                if imgs:
                    where = question_where(source or self.renderer.source, i, q)
                    raise UserError(f"{where}: has an image, but the rollout engine {type(self.engine).__name__} "
                                    "does not sample a question's images (its pixels come with its AgentPrompts: "
                                    "AgentPromptDataModule); use engine hf")
            return list(prompts)
        return [SamplingRequest(p, tuple(imgs or ()), question_id=None if q is None else str(q))
                for p, imgs, q in zip(prompts, images, ids)]

    def uniform_images(self) -> str | None:
        """Why every question of a run must show images or none (``PromptRenderer.check``'s
        ``uniform_images``), None when they may mix; TTRL's ``visconf`` says so."""
        return None

    def check_fit_questions(self) -> None:
        """Refuse, before the first step, every question of the data module's splits that this module cannot
        sample (``datamodule.train_questions`` / ``val_questions`` where it has them, as ``QuestionDataModule``
        does): an image for the agent engine (``batch_prompts``), or for a text-only model, an engine without
        images, the ``plain`` prompt format, a model without a chat template, and for the training split a mix
        of questions with and without images where ``uniform_images`` says why not (``PromptRenderer.check``).
        Each would otherwise be refused at the step that meets it, after earlier steps trained and saved; this
        is the check ``ttrl generate`` runs before it samples. One ``UserError`` naming the split's file and the
        question."""
        dm = getattr(self.trainer, "datamodule", None)
        for split, getter in (("training", "train_questions"), ("validation", "val_questions")):
            get = getattr(dm, getter, None)
            questions = list(get()) if callable(get) else []
            if not questions:
                continue
            path = getattr(dm, "hparams", {}).get("path" if split == "training" else "val_path")
            source = f"{path} ({split} questions)" if path else f"the {split} questions"
            batch = {key: [q.get(key) for q in questions] for key in ("prompt", "images", "id")}
            requests = self.batch_prompts(batch, source)
            if not self.engine_takes_text_prompts:
                continue
            renderer = PromptRenderer(self.tokenizer, self.processor, self.hparams.get("prompt_format", "auto"),
                                      model=str(self.policy_spec.model), source=source)
            renderer.check(requests, self.engine, uniform_images=self.uniform_images() if split == "training"
                           else None)

    @property
    def renderer(self) -> PromptRenderer:
        """The policy's prompt rule (``rollout.requests.PromptRenderer``: ``prompt_format``, the chat template of
        its tokenizer or processor), the one ``ttrl eval`` and ``ttrl generate`` apply too."""
        if "_renderer" not in self.__dict__:
            self.__dict__["_renderer"] = PromptRenderer(self.tokenizer, self.processor,
                                                        self.hparams.get("prompt_format", "auto"),
                                                        model=str(self.policy_spec.model), source=type(self).__name__)
        return self.__dict__["_renderer"]

    def model_prompts(self, prompts: Sequence) -> list:
        """The requests ``prompts`` as the model reads them (``PromptRenderer.check`` then ``render``); for an
        engine that takes no text prompts (the agent engine), the prompts as they are."""
        if not self.engine_takes_text_prompts:
            return list(prompts)
        requests = as_requests(prompts)
        self.renderer.check(requests, self.engine)
        return self.renderer.render(requests)

    def rollout(self, batch: dict[str, list]) -> Rollouts:
        """Sample N completions per prompt of ``batch`` (``batch_prompts``, ``model_prompts``)."""
        return self.engine.generate(self.policy, self.model_prompts(self.batch_prompts(batch)),
                                    self.sampling_params(self.rollout_seed()))

    def score(self, rollouts: Rollouts, batch: dict[str, list]) -> RolloutRewards:
        """Rewards [R]: weighted sum of the reward callables, batch columns repeated N times per prompt;
        every group kept (a subclass that abstains on a group returns its ``group_mask``)."""
        n = rollouts.n
        # the rewards read prompt strings: a record's (an agent's AgentPrompt, a SamplingRequest) text
        prompts = [getattr(p, "text", p) for p in batch["prompt"] for _ in range(n)]
        columns = {k: [v for v in vals for _ in range(n)] for k, vals in batch.items() if k != "prompt"}
        ids = [row[: int(m.sum())].tolist() for row, m in zip(rollouts.completion_ids, rollouts.completion_mask)]
        per_fn = torch.stack([call_reward(fn, prompts, rollouts.texts, completion_ids=ids, **columns)
                              for fn in self.reward_fns], dim=1)  # [R, F]
        return RolloutRewards((per_fn.to(self.reward_weights.device) * self.reward_weights).sum(1))

    def scored(self, rollouts: Rollouts, batch: dict[str, list]) -> RolloutRewards:
        """``self.score(rollouts, batch)``, checked: a ``RolloutRewards`` of R rewards and G group flags for
        the rows it scores (``rollouts`` filled in when the hook scored all the sampled rows)."""
        with full_precision(self.device):  # labels and rewards in fp32 under a bf16-mixed trainer too
            out = self.score(rollouts, batch)
        if not isinstance(out, RolloutRewards):
            raise TypeError(f"{type(self).__name__}.score must return RolloutRewards, "
                            f"got {type(out).__name__}")
        if out.rollouts is None:
            out = replace(out, rollouts=rollouts)
        return out.check(out.num_rows, out.num_groups)

    def compute_advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """rewards [G, N] -> advantages [G, N] (group-relative)."""
        return group_advantages(rewards, scale=self.grpo.scale_rewards)

    def group_advantages(self, scored: RolloutRewards) -> torch.Tensor:
        """Advantages [R] of the rows ``scored.rollouts``: ``compute_advantages`` of the [G, N] rewards, exactly
        0 on the rows of groups that ``scored.group_mask`` leaves out."""
        advantages = self.compute_advantages(scored.by_group(scored.rewards))
        keep = scored.kept_groups().to(advantages.device)
        return torch.where(keep[:, None], advantages, torch.zeros_like(advantages)).reshape(scored.num_rows)

    def policy_loss(self, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor) -> dict:
        """Token-level clipped surrogate [R, C] (+ the clip indicator)."""
        loss, clipped = clipped_policy_loss(logp, old_logp, advantages, self.grpo.eps_low, self.grpo.eps_high)
        return {"pg": loss, "clipped": clipped}

    def kl_penalty(self, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
        """Token-level KL(pi_theta || pi_ref), k3 estimator, [R, C]."""
        return k3_kl(logp, ref_logp)

    # ------------------------------------------------------------------ log-probs
    def sequence_logprobs(self, model: torch.nn.Module, rollouts: Rollouts, temperature: float | None = None,
                          raw: bool = False):
        """log pi(completion token | prefix) [R, C] float32 under ``model`` (sampling temperature applied, or
        ``temperature`` when given: 1 for the raw logits). ``raw``: also the log-probs under the raw logits,
        without gradient, from the same forward: ``(logp, raw_logp)``.

        Fused (``modules.logprobs``: final hidden states, then ``ops.linear_logprobs`` on the LM head, no
        [R, C, V] logits) when ``logprob_impl`` allows it and the head is a plain linear layer; otherwise the
        logits of the last C + 1 positions, divided by the temperature, through ``completion_logprobs``. The
        inputs are ``rollouts.forward_inputs()`` (with the pixel inputs of a vision-language agent rollout)."""
        inputs = rollouts.forward_inputs()
        C = rollouts.completion_ids.shape[1]
        t = self.sampling.temperature if temperature is None else temperature
        if self.logprob_path.fused(model):
            return fused_logprobs(model, rollouts.completion_ids, t if t > 0 else 1.0, raw=raw, **inputs)
        logits = model(**inputs, logits_to_keep=C + 1).logits[:, :-1]
        out = completion_logprobs(logits / t if t > 0 else logits, rollouts.completion_ids)
        if not raw:
            return out
        with torch.no_grad():
            return out, completion_logprobs(logits.detach(), rollouts.completion_ids)

    # ------------------------------------------------------------------ the step
    def training_step(self, batch, batch_idx):
        rollouts = self.rollout(batch)
        scored = self.scored(rollouts, batch)
        advantages = self.group_advantages(scored)
        stats = self.optimize(scored, advantages)
        self.engine.sync_weights(self.policy)
        with torch.no_grad():
            self.kl_observation, self.kl_observation_tokens = self.observed_kl(stats)
            kept = scored.rewards.to(self.device)[scored.kept_rows().to(self.device)]
            if kept.numel():  # the epoch's mean over every kept row; the step's own is in step_metrics
                self.train_reward(kept)
                self.log("train/reward_epoch", self.train_reward, on_step=False, on_epoch=True, prog_bar=True)
            # this step's scalars, kept for callbacks that must tell a metric logged now from an earlier one
            self.last_step_metrics = self.step_metrics(batch, scored, stats)
            self.log_dict(with_gaps(self.last_step_metrics, self.logged_metric_keys))
        return stats.loss

    def observed_kl(self, stats: StepStats) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's KL observation and the number of tokens it averages: the mean token KL over the tokens
        that carry loss (``stats.kept_tokens``: the kept groups' kept rows), the rows the update trained on.
        An abstained group or a dropped row adds no KL term to the loss, so it adds none to the observation
        either (nor to ``train/kl``, ``train/kl_p95``). 0 tokens (every group abstained): the observation is 0
        and the controller holds beta (``PIDKLController``). Without a KL term (``reference: none``) the
        observation is 0."""
        tokens = stats.kept_tokens.sum()
        if stats.token_kl is None:
            return torch.zeros((), device=self.device), tokens
        return masked_token_mean(stats.token_kl, stats.kept_tokens), tokens

    def optimize(self, scored: RolloutRewards, advantages: torch.Tensor) -> StepStats:
        """``num_iterations`` optimizer steps on the rows ``scored.rollouts`` (module docstring), then the
        learning-rate schedule's step; the loss is aggregated over the completion tokens of the kept rows
        only (``scored.kept_rows``)."""
        rollouts = scored.rollouts
        advantages = advantages.to(self.device)
        kept_tokens = rollouts.completion_mask.float() * scored.kept_rows().to(self.device)[:, None]
        use_kl = self.grpo.reference != "none"
        with torch.no_grad():
            if use_kl:
                with self.reference_weights() as reference:
                    ref_logp = self.sequence_logprobs(reference, rollouts)
            else:
                ref_logp = None
            old_logp = self.sequence_logprobs(self.policy, rollouts) if self.grpo.num_iterations > 1 else None
        # an engine with its own weights (vLLM), or one that sampled under a lower-precision autocast (hf)
        sampler_logp = rollouts.sampler_logprobs
        tis = kl = None
        agg = LOSS_AGGREGATIONS[self.grpo.loss_aggregation]
        opt = self.optimizers()
        for it in range(self.grpo.num_iterations):
            if it == 0 and sampler_logp is not None:  # the policy before this batch's updates vs the sampler
                logp, raw = self.sequence_logprobs(self.policy, rollouts, raw=True)
                tis = self.sampler_correction(raw, sampler_logp.to(logp.device), rollouts)
            else:
                logp = self.sequence_logprobs(self.policy, rollouts)
            parts = self.policy_loss(logp, logp.detach() if old_logp is None else old_logp, advantages)
            token_loss = parts["pg"] if tis is None or tis.weights is None else parts["pg"] * tis.weights
            if use_kl:
                kl = self.kl_penalty(logp, ref_logp)
                token_loss = token_loss + self.kl_coef * kl
            loss = agg(token_loss, kept_tokens)
            opt.zero_grad()
            self.manual_backward(loss)
            if self.grpo.max_grad_norm:
                self.clip_gradients(opt, gradient_clip_val=self.grpo.max_grad_norm, gradient_clip_algorithm="norm")
            opt.step()
            opt.zero_grad()  # set to None: the gradients' memory is not held through the next sampling
        schedule = self.lr_schedulers()
        if schedule is not None:  # once per training batch (PolicySpec.lr_schedule), manual optimisation
            schedule.step()
        return StepStats(loss.detach(), None if kl is None else kl.detach(), parts["clipped"].detach(),
                         kept_tokens, tis)

    def step_metrics(self, batch: dict[str, list], scored: RolloutRewards, stats: StepStats) -> dict[str, Any]:
        """This step's ``train/<name>`` scalars (GRPO's, the reward stage's ``scored.metrics``); a subclass adds
        its own to ``super().step_metrics(...)``."""
        rollouts = scored.rollouts
        completion_mask = rollouts.completion_mask.float()
        kept = scored.rewards.to(self.device)[scored.kept_rows().to(self.device)]
        out = {
            "train/loss": stats.loss,
            "train/beta": torch.tensor(self.kl_coef),
            "train/clip_frac": masked_token_mean(stats.clipped.float(), stats.kept_tokens),
            "train/completion_len": completion_mask.sum(1).mean(),
            "train/rollout_tokens": torch.tensor(float(rollouts.num_completion_tokens)),
            "train/abstained_groups": (~scored.kept_groups()).sum().float(),
            "train/dropped_rows": (~scored.rows(scored.num_rows)).sum().float(),
        }
        if kept.numel():  # the kept rows' reward; a step that keeps none has no value (a gap), not the last one
            out["train/reward"] = kept.mean()
        if kept.numel() > 1:
            out["train/reward_std"] = kept.std()
        if self.kl_observation_tokens is not None and self.kl_observation_tokens > 0:
            out["train/kl"] = self.kl_observation  # a mean over no token is not 0: not logged then
        if stats.sampler is not None:
            out.update(stats.sampler.metrics(stats.kept_tokens))
        out.update({f"train/{k}": v for k, v in scored.metrics.items()})
        return out

    def sampler_correction(self, raw: torch.Tensor, sampler_logp: torch.Tensor,
                           rollouts: Rollouts) -> "SamplerCorrection":
        """TIS weights and the log-prob gap of this batch (module docstring): ``raw`` is the policy's [R, C]
        log-probs under the raw logits before any update (from the training forward itself)."""
        mask = rollouts.completion_mask.to(raw.device).bool()
        weights, gap = truncated_importance_weights(raw, sampler_logp, mask, self.grpo.tis_cap)
        return SamplerCorrection(weights, gap)

    def validation_step(self, batch, batch_idx):
        params = SamplingParams(n=1, temperature=0.0, max_new_tokens=self.sampling.max_new_tokens,
                                stop=self.sampling.stop)
        rollouts = self.engine.generate(self.policy, self.model_prompts(self.batch_prompts(batch)), params)
        scored = self.scored(rollouts, batch)
        kept = scored.rewards[scored.mask(len(batch["prompt"]))]
        if kept.numel():
            self.val_accuracy(kept)
            self.log("val/reward", self.val_accuracy, on_epoch=True, prog_bar=True)
