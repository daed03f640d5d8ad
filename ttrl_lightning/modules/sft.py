"""``SFTModule``: supervised fine-tuning on chain-of-thought-action traces (Pixelis 3.2.1)."""
from __future__ import annotations

import torch
from torchmetrics import MeanMetric

from ttrl_lightning.errors import Bounds, UserError, check_bounds
from ttrl_lightning.models import VISION_INPUTS
from ttrl_lightning.modules.base import PolicyModule, PolicySpec
from ttrl_lightning.modules.logprobs import LogprobPath, fused_logprobs
from ttrl_lightning.modules.losses import action_weighted_ce, action_weighted_nll, feedback_dropout
from ttrl_lightning.seeding import derived_generator
from ttrl_lightning.tools.protocol import HIDDEN_OBSERVATION_TOKEN

#: bounds of SFTModule's numeric arguments, checked when it is built
SFT_RULES: dict[str, Bounds] = {
    "w_act": Bounds(low=0, low_open=True),
    "feedback_dropout": Bounds(low=0, high=1, high_open=True),
}


class SFTModule(PolicyModule):
    """Teacher-forced next-token CE with action tokens weighted by ``w_act`` (default 2) and feedback
    dropout: each earlier observation (tool output) is hidden (its tokens replaced by ``hide_token``) with
    probability ``feedback_dropout`` (default 0.05) during training.

    Args beyond ``policy`` (``PolicySpec``): ``w_act`` (> 0), ``feedback_dropout`` (in [0, 1)),
    ``hide_token``; checked when the module is built (``SFT_RULES``; a ``UserError`` names the argument);
    ``logprob_impl`` (``"auto"``, ``"fused"``, ``"materialized"``): how ``loss`` gets the labels' log-probs.
    Batch (from ``SFTDataModule``): ``input_ids, attention_mask, labels, action_mask, observation_span``,
    all [B, T]. The dropout draws come from a generator seeded by
    ``derive_seed(seed, "feedback_dropout", global_step * a + batch_idx % a, global_rank)`` (``a`` =
    ``accumulate_grad_batches``: each micro-batch of a step draws its own mask), so a resumed run draws the same.
    """

    def __init__(
        self,
        policy: PolicySpec = PolicySpec(),
        w_act: float = 2.0,
        feedback_dropout: float = 0.05,
        hide_token: str = HIDDEN_OBSERVATION_TOKEN,
        logprob_impl: str = "auto",
    ):
        check_bounds(locals(), SFT_RULES, f"{type(self).__name__} argument ")
        super().__init__(policy)
        hide_id = self.tokenizer.convert_tokens_to_ids(hide_token)
        if hide_id is None or hide_id == self.tokenizer.unk_token_id:
            raise UserError(f"{type(self).__name__} argument hide_token {hide_token!r} is not in the "
                            "tokenizer's vocabulary")
        self.hide_id = int(hide_id)
        self.train_loss = MeanMetric()
        self.val_loss = MeanMetric()
        self.logprob_path = LogprobPath(logprob_impl, type(self).__name__)

    def _accumulation(self) -> int:
        trainer = self._trainer
        return max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1)) if trainer is not None else 1

    def _dropout_generator(self, batch_idx: int = 0) -> torch.Generator:
        """Generator of the hiding mask of micro-batch ``batch_idx`` (the training step's batch index).

        Under gradient accumulation (``a`` micro-batches per optimizer step) ``global_step`` stays put within
        a step, so the micro-batch index enters the step term:
        ``derive_seed(seed, "feedback_dropout", global_step * a + batch_idx % a, global_rank)``; with ``a = 1``
        this is the plain ``global_step``. A pure function of (seed, global_step, micro-batch, rank), all
        restored on resume, so a resumed run draws the same masks."""
        a = self._accumulation()
        return derived_generator(self.policy_spec.seed, "feedback_dropout",
                                 self.global_step * a + int(batch_idx) % a, self.global_rank)

    def loss(self, batch: dict[str, torch.Tensor], train: bool, batch_idx: int = 0) -> tuple[torch.Tensor, dict]:
        """Action-weighted CE of the batch (``losses.action_weighted_ce``) and its text/action parts.

        Fused (``modules.logprobs``: CE_t = -``linear_logprobs`` of the label, no [B, T, V] logits) when
        ``logprob_impl`` allows it and the LM head is a plain linear layer, else from the full logits."""
        ids = batch["input_ids"]
        if train and self.hparams.feedback_dropout > 0:
            ids = feedback_dropout(ids, batch["observation_span"], self.hparams.feedback_dropout,
                                   self.hide_id, self._dropout_generator(batch_idx))
        labels, action_mask, w_act = batch["labels"], batch["action_mask"], self.hparams.w_act
        vision = {k: batch[k] for k in VISION_INPUTS if k in batch}  # a VLM's traces with images
        if self.logprob_path.fused(self.policy):
            logprobs = fused_logprobs(self.policy, labels[:, 1:], input_ids=ids,
                                      attention_mask=batch["attention_mask"], **vision)
            return action_weighted_nll(logprobs, labels, action_mask, w_act)
        logits = self.policy(input_ids=ids, attention_mask=batch["attention_mask"], **vision).logits
        return action_weighted_ce(logits, labels, action_mask, w_act)

    def training_step(self, batch, batch_idx):
        loss, stats = self.loss(batch, train=True, batch_idx=batch_idx)
        self.train_loss(loss.detach())
        self.log("train/loss", loss.detach(), prog_bar=True)
        self.log("train/loss_epoch", self.train_loss, on_step=False, on_epoch=True)
        self.log_dict({f"train/{k}": v for k, v in stats.items()})
        return loss

    def validation_step(self, batch, batch_idx):
        loss, _ = self.loss(batch, train=False)
        self.val_loss(loss)
        self.log("val/loss", self.val_loss, on_epoch=True, prog_bar=True)
