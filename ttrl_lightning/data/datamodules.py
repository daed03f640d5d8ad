"""Lightning DataModules over generated tasks.

* ``SFTDataModule``: tokenised traces with the masks ``SFTModule`` needs (``labels``, ``action_mask``,
  ``observation_span``).
* ``PromptDataModule``: batches of ``{"prompt": [...], "gold": [...]}`` for GRPO-style modules; the
  module tokenises and rolls out.

The tokenizer comes from the LightningModule (``trainer.lightning_module.tokenizer``) unless one is given,
so a config names the model once.
"""
from __future__ import annotations

from typing import Any, Sequence

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from ttrl_lightning.data.loaders import EpochSeededSampler, ResumableDataLoader, collate_prompts
from ttrl_lightning.data.tasks import Segment, generate_prompts, generate_traces
from ttrl_lightning.masking import IGNORE_INDEX
from ttrl_lightning.tools.protocol import split_observation

#: segment kind -> (its tokens are labels (trained on), its tokens are action tokens); observations are
#: neither and get an observation span id instead (``encode_trace``)
SEGMENT_ROLES: dict[str, tuple[bool, bool]] = {
    "prompt": (False, False),
    "text": (True, False),
    "action": (True, True),
    "observation": (False, False),
    "image": (False, False),
}


def encode_trace(tokenizer, segments: Sequence[Segment], processor=None) -> dict[str, list]:
    """Token ids, labels and per-token masks of one trace, tokenising segment by segment.

    Returns lists of equal length T:
      ``input_ids``;
      ``labels``: the token id on text/action tokens, ``IGNORE_INDEX`` on prompt and observation tokens
      (the tokens that carry no loss; there is no separate loss mask: ``labels != IGNORE_INDEX`` is it);
      ``action_mask``: 1 on action (tool call) tokens;
      ``observation_span``: k >= 1 on the content tokens of the k-th observation (tool output), 0
      elsewhere; the observation delimiters stay visible (``tools.protocol.split_observation``), so the
      model still sees that a call returned.
    ``image`` segments: with a vision-language ``processor``, the image's vision tokens
    (``models.vision_block``: no loss, not an action, not dropped) and ``images`` (the blocks, in order);
    without one they are left out (a text model does not see the pixels).
    """
    ids: list[int] = []
    labels: list[int] = []
    act: list[int] = []
    span: list[int] = []
    n_obs = 0

    def add(text: str, labelled: bool, action: bool, span_id: int) -> None:
        if not text:
            return
        t = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids.extend(t)
        labels.extend(t if labelled else [IGNORE_INDEX] * len(t))
        act.extend([int(action)] * len(t))
        span.extend([span_id] * len(t))

    images = []
    for seg in segments:
        if seg.kind not in SEGMENT_ROLES:
            raise ValueError(f"unknown segment kind {seg.kind!r}")
        labelled, action = SEGMENT_ROLES[seg.kind]
        if seg.kind == "image":
            if processor is not None:
                from ttrl_lightning.models import vision_block

                block = vision_block(processor, seg.image)
                images.append(block)
                ids.extend(block.ids)
                labels.extend([IGNORE_INDEX] * len(block.ids))
                act.extend([0] * len(block.ids))
                span.extend([0] * len(block.ids))
        elif seg.kind == "observation":
            n_obs += 1
            start, content, end = split_observation(seg.text)
            add(start, False, False, 0)
            add(content, False, False, n_obs)
            add(end, False, False, 0)
        else:
            add(seg.text, labelled, action, 0)
    if not ids:
        raise ValueError("empty trace")
    out = {"input_ids": ids, "labels": labels, "action_mask": act, "observation_span": span}
    if images:
        out["images"] = images
    return out


def collate_traces(items: list[dict[str, list[int]]], pad_id: int, max_length: int | None = None) -> dict:
    """Right-pad encoded traces into a batch (cut at ``max_length``).

    Returns ``input_ids, attention_mask, labels, action_mask, observation_span``: all ``[B, T]``; padding
    gets ``pad_id`` / 0 / ``IGNORE_INDEX`` / False / 0 (the module shifts the labels by one). Traces with
    ``images`` (``encode_trace`` with a processor) add their pixel inputs (``models.vision_inputs``); such a
    trace longer than ``max_length`` is an error (cutting it would cut its images' tokens).
    """
    if not items:
        raise ValueError("empty batch")
    T = max(len(x["input_ids"]) for x in items)
    if max_length is not None:
        T = min(T, max_length)
    B = len(items)
    out = {
        "input_ids": torch.full((B, T), pad_id, dtype=torch.long),
        "attention_mask": torch.zeros(B, T, dtype=torch.long),
        "labels": torch.full((B, T), IGNORE_INDEX, dtype=torch.long),
        "action_mask": torch.zeros(B, T, dtype=torch.bool),
        "observation_span": torch.zeros(B, T, dtype=torch.long),
    }
    for i, x in enumerate(items):
        n = min(len(x["input_ids"]), T)
        out["input_ids"][i, :n] = torch.tensor(x["input_ids"][:n])
        out["attention_mask"][i, :n] = 1
        out["labels"][i, :n] = torch.tensor(x["labels"][:n])
        out["action_mask"][i, :n] = torch.tensor(x["action_mask"][:n], dtype=torch.bool)
        out["observation_span"][i, :n] = torch.tensor(x["observation_span"][:n])
    blocks = [b for x in items for b in x.get("images", ())]
    if blocks:
        too_long = [len(x["input_ids"]) for x in items if x.get("images") and len(x["input_ids"]) > T]
        if too_long:
            raise ValueError(f"a trace with images has {too_long[0]} tokens, more than max_length={max_length}: "
                             "raise max_length (cutting it would cut its vision tokens)")
        from ttrl_lightning.models import vision_inputs

        out.update(vision_inputs(blocks, out["input_ids"]))
    return out


class _TokenizerFromModule:
    tokenizer: Any

    def _get_tokenizer(self):
        if self.tokenizer is not None:
            return self.tokenizer
        trainer = getattr(self, "trainer", None)
        module = getattr(trainer, "lightning_module", None) if trainer is not None else None
        tok = getattr(module, "tokenizer", None)
        if tok is None:
            raise RuntimeError("no tokenizer: pass `tokenizer=` or attach the datamodule to a trainer whose "
                               "LightningModule has a `.tokenizer`")
        return tok


class ProcessorFromModule:
    """A datamodule's vision-language processor: the one it was given, else its trained module's."""

    processor: Any

    def _get_processor(self):
        """The given processor, else the trained module's (``PolicyModule.processor``: None for a text model)."""
        if self.processor is not None:
            return self.processor
        module = getattr(getattr(self, "trainer", None), "lightning_module", None)
        return getattr(module, "processor", None)


class SFTDataModule(_TokenizerFromModule, pl.LightningDataModule):
    """SFT traces of a generated task (``data.tasks.TASKS``), tokenised with the module's tokenizer.

    ``exclude``: questions the traces must never show answered, so that a test-time RL run on them trains on
    questions its SFT never saw (the demo: configs/sft/tiny_ttrl.yaml). Each entry is a question file's path, or
    a generated split ``{"task": name, "n": count, "task_kwargs": {...}, "seed": int}`` (its first ``n``
    distinct questions, ``seed`` defaulting to this module's: ``QuestionDataModule``'s training, validation and
    calibration splits of one task are the first ``n + n_val + n_calibration`` of them). A trace is left out
    when any question it shows answered (``data.tasks.trace_problems``: its prompt, and a fused trace's
    rewritten problem) has the split key (``data.splits.question_key``) of an excluded question: keyed by problem,
    so a trace of ``7+12=`` is left out for an excluded ``12+7=`` (its reordered twin answered gives the answer
    away, the fused format teaching the swap); the stream is read on until ``n_train`` (``n_val``) traces are kept, and a task that cannot give them is a ``UserError``.

    Training order: a permutation per epoch seeded by (seed, epoch); loaders resumable mid-epoch."""

    def __init__(
        self,
        task: str = "arith3",
        task_kwargs: dict[str, Any] | None = None,
        n_train: int = 512,
        n_val: int = 64,
        batch_size: int = 16,
        max_length: int | None = 128,
        seed: int = 0,
        num_workers: int = 0,
        tokenizer: Any = None,
        exclude: Sequence[str | dict] = (),
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["tokenizer"])
        self.tokenizer = tokenizer
        self._train: list | None = None
        self._val: list | None = None
        self._excluded = excluded_keys(exclude, seed)  # checked (one line for a bad entry) before any training

    def traces(self, n: int, seed: int) -> list[list[Segment]]:
        """``n`` traces of the task's stream under ``seed``, none showing an excluded question answered."""
        h = self.hparams
        return kept_traces(h.task, n, seed, self._excluded, **(h.task_kwargs or {}))

    def setup(self, stage: str | None = None) -> None:
        tok = self._get_tokenizer()
        h = self.hparams
        self._train = [encode_trace(tok, t) for t in self.traces(h.n_train, h.seed)]
        self._val = [encode_trace(tok, t) for t in self.traces(h.n_val, h.seed + 1)]
        self._pad = tok.pad_token_id

    def _loader(self, data, shuffle: bool) -> DataLoader:
        return ResumableDataLoader(
            data,
            batch_size=self.hparams.batch_size,
            sampler=EpochSeededSampler(len(data), self.hparams.seed) if shuffle else None,
            num_workers=self.hparams.num_workers,
            collate_fn=lambda b: collate_traces(b, self._pad, self.hparams.max_length),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._val, shuffle=False)


def excluded_keys(exclude: Sequence[str | dict], seed: int) -> frozenset[str]:
    """The split keys (``data.splits.question_key``: problems, a sum's terms in any order one key) of the questions
    ``exclude`` names: question files' paths and
    generated splits ``{"task", "n", "task_kwargs", "seed"}`` (``SFTDataModule``); a bad entry is a ``UserError``."""
    from ttrl_lightning.data.questions import read_questions, task_splits
    from ttrl_lightning.data.splits import keys_of
    from ttrl_lightning.errors import UserError

    if isinstance(exclude, (str, dict)):
        exclude = [exclude]
    keys: set[str] = set()
    for k, entry in enumerate(exclude):
        where = f"exclude[{k}]"
        if isinstance(entry, str):
            keys |= keys_of(read_questions(entry))
            continue
        if not isinstance(entry, dict) or not {"task", "n"} <= set(entry) or set(entry) - {"task", "n",
                                                                                           "task_kwargs", "seed"}:
            raise UserError(f"{where}: a question file's path or a generated split {{task, n, task_kwargs, seed}}, "
                            f"got {entry!r}")
        n, split_seed = entry["n"], entry.get("seed", seed)
        for name, value in (("n", n), ("seed", split_seed)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "n" else 0):
                raise UserError(f"{where}: {name} must be an integer >= {1 if name == 'n' else 0}, got {value!r}")
        try:
            split = task_splits(str(entry["task"]), split_seed, {"excluded": n}, **(entry.get("task_kwargs") or {}))
        except (KeyError, TypeError, ValueError) as err:
            raise UserError(f"{where}: task {entry['task']!r} cannot draw these questions ({err})") from None
        keys |= keys_of(split["excluded"])
    return frozenset(keys)


def kept_traces(task: str, n: int, seed: int, excluded: frozenset[str] | set[str], patience: int = 100_000,
                **task_kwargs) -> list[list[Segment]]:
    """The first ``n`` traces of ``task``'s stream under ``seed`` (``data.tasks``: one ``random.Random(seed)``)
    that show no question whose split key is in ``excluded`` answered (``trace_problems``); with nothing
    excluded, ``generate_traces(task, n, seed)``. More than ``patience`` traces left out in a row is a
    ``UserError`` (a task whose every question is excluded)."""
    if not excluded:
        return generate_traces(task, n, seed, **task_kwargs)
    import random

    from ttrl_lightning.data.splits import question_key
    from ttrl_lightning.data.tasks import make_task, trace_problems
    from ttrl_lightning.errors import UserError

    rng, maker = random.Random(seed), make_task(task, **task_kwargs)
    kept: list[list[Segment]] = []
    skipped = 0
    while len(kept) < n:
        trace = maker.trace(rng)
        if any(question_key({"prompt": q}) in excluded for q in trace_problems(trace)):
            skipped += 1
            if skipped > patience:
                raise UserError(f"task {task}: {patience} traces in a row show an excluded question; "
                                f"{len(kept)} of {n} kept")
            continue
        skipped = 0
        kept.append(trace)
    return kept


class PromptRowsDataModule(pl.LightningDataModule):
    """Loaders of prompt rows built in ``setup`` (``self._train``, ``self._val``), in order, batched by
    ``hparams.batch_size`` through ``collate_prompts``; the train loader resumes mid-epoch."""

    def train_dataloader(self) -> DataLoader:
        return ResumableDataLoader(self._train, batch_size=self.hparams.batch_size, shuffle=False,
                                   collate_fn=collate_prompts)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._val, batch_size=self.hparams.batch_size, shuffle=False,
                          collate_fn=collate_prompts)


class PromptDataModule(PromptRowsDataModule):
    """RL prompts of a generated task: batches ``{"prompt": [str], "gold": [str]}``.

    Not shuffled (the task is already random); the train loader is resumable mid-epoch
    (``ResumableDataLoader``), so a resumed run sees the same batches as an uninterrupted one.
    """

    def __init__(
        self,
        task: str = "arith",
        task_kwargs: dict[str, Any] | None = None,
        n_train: int = 64,
        n_val: int = 16,
        batch_size: int = 4,
        seed: int = 0,
    ):
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str | None = None) -> None:
        h = self.hparams
        kw = h.task_kwargs or {}
        self._train = generate_prompts(h.task, h.n_train, h.seed, **kw)
        self._val = generate_prompts(h.task, h.n_val, h.seed + 1, **kw)
