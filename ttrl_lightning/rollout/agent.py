"""The agent rollout engine: sample, run each tool call as it is written, show the observation, continue.

:class:`AgentEngine` implements the :class:`~ttrl_lightning.rollout.base.RolloutEngine` protocol, so a
GRPO-style module (``CCRFTModule``) rolls out with it unchanged. Per row (prompt-major, as every
``Rollouts``), up to ``max_steps`` tool calls::

    generate until </tool_call> or EOS  ->  ToolSession.call(the call text)  ->  append <out>view</out>
    ... repeat ...  ->  the final answer, EOS

* Tool calls are parsed by ``tools.protocol.parse_tool_call`` (JSON only, never evaluated); any text that is
  not a call gets a typed error observation, which the model sees; nothing the model writes raises.
* The observation is ``agent_format.observation_view`` (the artifact's canonical JSON without masks)
  between ``<out>``/``</out>``; its tokens are *not* the model's: :class:`AgentRollouts` keeps them out of
  ``completion_mask`` (the loss mask the GRPO step aggregates over) and in ``completion_attention`` (what
  the model attends to; ``attention_mask()`` uses it), and marks them in ``observation_mask``.
* The pixels come with the prompt: an :class:`AgentPrompt` is a record of the prompt ``text``, the ``image`` /
  ``frames`` and the ``source`` they were drawn from (named fields, never inside a string), so batches pass
  through modules unchanged. A text model sees the question and the observations only; the tools see the
  pixels. A plain ``str`` is a prompt without pixels.
* Every row leaves a :class:`Trajectory` (``rollouts.trajectories``): its tool steps (the replayable record
  of ``ToolSession.steps``), answer, tool latencies. :func:`save_trajectories` writes them as JSON lines and
  :func:`replay_trajectory` re-executes one, pixels redrawn from ``source``, and returns the steps whose
  artifact bytes differ (none: reproduced).
* Tools are deterministic in their pixels and call history, so results are memoised (``ToolCache``) per
  ``(source, history, call)``: the N samples of a prompt, and repeated evaluations, run each distinct call
  once; latencies are recorded for calls that ran.

The session and its cache are :mod:`.agent_session`, the trajectory record and its files / replay
:mod:`.trajectory`; both are re-exported here.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ttrl_lightning.masking import completion_mask_at_eos
from ttrl_lightning.models import VISION_TOKENS, VisionBlock, vision_block, vision_inputs
from ttrl_lightning.rollout.base import (ROLLOUT_ENGINES, Rollouts, SamplingParams, context_length,
                                         plain_generation_config, sampling_mode)
from ttrl_lightning.rollout.finishing import cut_at_stop_strings
from ttrl_lightning.tools.agent_format import AgentPrompt, final_answer, format_agent_observation, last_call_text
from ttrl_lightning.tools.protocol import TOOL_CALL_END
from ttrl_lightning.tools.run import canonical_name
from ttrl_lightning.rollout.agent_session import AgentToolSession, ToolCache, cache_key
from ttrl_lightning.rollout.trajectory import (Trajectory, load_trajectories, replay_trajectory, save_trajectories,
                                               source_pixels)

__all__ = ["AgentEngine", "AgentRollouts", "AgentToolSession", "ToolCache", "Trajectory",
           "load_trajectories", "replay_trajectory", "save_trajectories", "source_pixels"]


@dataclass
class AgentRollouts(Rollouts):
    """``Rollouts`` of the agent engine. The completion holds the model's tokens *and* the observation
    tokens; ``completion_mask`` marks the model's own tokens only (the loss mask: the GRPO step trains on
    and measures KL over these), ``completion_attention`` every real token (``attention_mask()`` uses it, so
    log-probs are computed in the context the model sampled in), ``observation_mask`` the observation
    tokens. ``step_spans[r]``: per tool step of row r, ``(call_start, call_end, obs_start, obs_end)`` token
    columns (the model's text of the step, then the observation). ``trajectories[r]``: its record."""

    completion_attention: torch.Tensor | None = None
    observation_mask: torch.Tensor | None = None
    step_spans: list[list[tuple[int, int, int, int]]] = field(default_factory=list)
    trajectories: list[Trajectory] = field(default_factory=list)
    @property
    def loss_mask(self) -> torch.Tensor:
        """[R, C] 1 on the tokens the model wrote (= ``completion_mask``), 0 on observations and padding."""
        return self.completion_mask

    def attention_mask(self) -> torch.Tensor:
        att = self.completion_attention if self.completion_attention is not None else self.completion_mask
        return torch.cat([self.prompt_mask, att], dim=1)

    def decisive_token_masks(self) -> list[list[bool]]:
        """Per row, one bool per token the model wrote, in order: the indices its per-token signals are laid
        on (``records_from_rollouts`` keeps ``completion_mask``'s tokens, observations out). True on the
        decisive steps of Pixelis sec. 3.2.3 (its "decisive tool steps (SEG/ZOOM, TRK, OCR, TEMP, PROP)"; our
        reading adds the final answer turn, which the paper does not name):

        * each turn that issued a tool call which ran without error (``Trajectory.errors``), read as the
          whole turn ``[call_start, call_end)`` of its step span. A failed call is not decisive, as VisFid
          counts only the successful ones;
        * the final answer step: the model's tokens after the last observation (all of them when no tool
          was called).

        A row where this selects nothing (its last turn was cut by the budget after a failed call) counts
        every token, as ``pseudo_labels.pixel.decisive_token_mask`` does."""
        written = self.completion_mask.bool().tolist()
        out = []
        for r, spans in enumerate(self.step_spans):
            errors = self.trajectories[r].errors
            if len(errors) != len(spans):
                raise ValueError(f"row {r}: {len(spans)} step spans for {len(errors)} recorded tool steps")
            calls = [(c0, c1) for (c0, c1, _, _), err in zip(spans, errors) if err is None]
            answer_from = spans[-1][3] if spans else 0
            mask = [j >= answer_from or any(c0 <= j < c1 for c0, c1 in calls)
                    for j, w in enumerate(written[r]) if w]
            out.append(mask if any(mask) else [True] * len(mask))
        return out

    def first_per_group(self, k: int) -> "AgentRollouts":
        """The first ``k`` rows of every group, as ``Rollouts.first_per_group``, with their observation
        columns, step spans and trajectories (columns cut to the longest kept row, observations included)."""
        rows = self.first_rows(k)
        att = self.completion_attention[rows] if self.completion_attention is not None else self.completion_mask[rows]
        width = max(int(att.sum(1).max()), 1)
        keep = rows.tolist()
        return AgentRollouts(
            prompt_ids=self.prompt_ids[rows], prompt_mask=self.prompt_mask[rows],
            completion_ids=self.completion_ids[rows, :width], completion_mask=self.completion_mask[rows, :width],
            texts=[self.texts[i] for i in keep], group=self.group[rows], n=k,
            signals={name: v[rows, :width] for name, v in self.signals.items()},
            completion_attention=att[:, :width],
            observation_mask=self.observation_mask[rows, :width] if self.observation_mask is not None else None,
            step_spans=[self.step_spans[i] for i in keep], trajectories=[self.trajectories[i] for i in keep],
            images=[self.images[i] for i in keep] if self.images else [])


@dataclass
class _Row:
    session: AgentToolSession
    ids: list[int] = field(default_factory=list)
    gen: list[int] = field(default_factory=list)  # 1: the model wrote the token
    text: str = ""
    spans: list[tuple[int, int, int, int]] = field(default_factory=list)
    images: list[VisionBlock] = field(default_factory=list)  # the ZOOM views shown (VLM)
    done: bool = False
    truncated: bool = False


def _vision_token_ids(tokenizer) -> list[int]:
    ids = [tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS]
    return sorted({i for i in ids if i is not None and i != tokenizer.unk_token_id})


@ROLLOUT_ENGINES.register("agent")
class AgentEngine:
    """Samples agent trajectories with ``model.generate``, one turn per tool call (the policy itself: no
    weight sync). ``max_steps``: tool calls per trajectory (a call beyond it is not run and ends the row as
    truncated; so does a context with no room for another turn under the model's
    ``max_position_embeddings``); ``max_turn_tokens``: new tokens per turn
    (``SamplingParams.max_new_tokens`` is ignored: a turn is a thought and a call, or the answer);
    ``disabled``: tools answering with the ``disabled``
    error (single-tool ablations); ``cache``: a shared :class:`ToolCache` (a new one when None);
    ``record_signals``: also return the per-token signals (``logprob``, ``entropy``, ``self_certainty``) of
    the model's own tokens under the raw logits, by the teacher-forced replay
    (``rollout.signals.replay_token_signals``) of the finished trajectories, observations in context.

    ``processor`` (a vision-language model's: ``models.load_processor``): the VLM path. The prompt shows the
    task's image (a clip: its first frame; the tools read every frame) as vision tokens before the question,
    and every successful call that hands back pixels (ZOOM's crop, ``Observation.view``) appends the crop as
    new vision tokens right after its observation, so the model sees what it zoomed on. Vision tokens are
    observation tokens (attended, never trained on); ``AgentRollouts.images`` keeps each row's images for
    the training pass (``forward_inputs``). The model is kept from writing vision tokens itself
    (``suppress_tokens``: an image token it wrote would have no pixels behind it)."""

    owns_weights = False  # samples with the policy itself, one generate call per turn
    max_model_len = None  # the model's own context (checked before every turn)
    takes_text_prompts = False  # AgentPrompt s with their pixels, not a command's text prompts
    takes_images = False  # the pixels come with its AgentPrompt s
    cli_options: tuple[str, ...] = ()
    default_batch_size = 1

    @classmethod
    def check_available(cls) -> None:
        return None

    def __init__(self, tokenizer, *, max_steps: int = 4, max_turn_tokens: int = 160,
                 disabled: Sequence[str] = (), cache: ToolCache | None = None, record_signals: bool = False,
                 processor=None):
        if max_steps < 1 or max_turn_tokens < 1:
            raise ValueError(f"max_steps and max_turn_tokens must be >= 1, got {max_steps}, "
                             f"{max_turn_tokens}")
        unknown = [d for d in disabled if canonical_name(d) is None]
        if unknown:
            raise ValueError(f"unknown tools to disable: {', '.join(map(str, unknown))}")
        self.tokenizer = tokenizer
        self.max_steps = int(max_steps)
        self.max_turn_tokens = int(max_turn_tokens)
        self.disabled = tuple(canonical_name(d) for d in disabled)
        self.cache = cache if cache is not None else ToolCache()
        self._calls = itertools.count()  # the cache scope of a prompt without a source: its call and index
        self.record_signals = bool(record_signals)
        self.processor = processor
        # the model never writes vision tokens itself: only the engine places images
        self.suppressed = _vision_token_ids(tokenizer) if processor is not None else []

    def sync_weights(self, model) -> None:
        return None

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _prompt_blocks(self, prompt) -> list[VisionBlock]:
        """The images a VLM is shown with ``prompt``: its image, or its clip's first frame (none without a
        processor)."""
        if self.processor is None:
            return []
        image, frames = prompt.image, prompt.frames
        if image is None and frames:
            image = frames[0]
        return [vision_block(self.processor, image)] if image is not None else []

    def _turn(self, model, contexts: list[list[int]], params: SamplingParams,
              images: list[list[VisionBlock]] | None = None) -> list[list[int]]:
        """One turn for each context: the new tokens up to and including EOS or ``</tool_call>``; ``images``:
        each context's vision blocks, in the order of their tokens (VLM)."""
        tok = self.tokenizer
        width = max(len(c) for c in contexts)
        device = next(model.parameters()).device
        ids = torch.full((len(contexts), width), tok.pad_token_id, dtype=torch.long)
        attn = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, width - len(c):] = torch.tensor(c)
            attn[i, width - len(c):] = 1
        greedy = params.temperature == 0
        kwargs = dict(max_new_tokens=self.max_turn_tokens, do_sample=not greedy, use_cache=True,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      stop_strings=[TOOL_CALL_END], tokenizer=tok)
        if not greedy:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
        if self.suppressed:
            kwargs["suppress_tokens"] = self.suppressed
        ids = ids.to(device)
        kwargs.update(vision_inputs([b for row in (images or []) for b in row], ids))
        with plain_generation_config(model):
            out = model.generate(input_ids=ids, attention_mask=attn.to(device), **kwargs)
        new = out[:, width:].cpu()
        if new.shape[1] == 0:
            return [[] for _ in contexts]
        mask = completion_mask_at_eos(new, tok.eos_token_id)
        mask = cut_at_stop_strings(tok, new, mask, (TOOL_CALL_END,))
        return [row[: int(m.sum())].tolist() for row, m in zip(new, mask)]

    @torch.no_grad()
    def generate(self, model, prompts: Sequence[AgentPrompt | str], params: SamplingParams) -> AgentRollouts:
        if not prompts:
            raise ValueError("no prompts")
        prompts = [AgentPrompt.of(p) for p in prompts]
        call = next(self._calls)
        tok = self.tokenizer
        n = params.n
        prompt_blocks = [self._prompt_blocks(p) for p in prompts]
        prompt_ids = [[t for b in blocks for t in b.ids] + self._encode(p.text)
                      for p, blocks in zip(prompts, prompt_blocks)]
        rows: list[_Row] = []
        for i, p in enumerate(prompts):
            scope = cache_key(p.source) if p.source is not None else f"call{call}:{i}"
            for _ in range(n):
                rows.append(_Row(AgentToolSession(image=p.image, frames=p.frames, disabled=self.disabled,
                                                  cache=self.cache, scope=scope)))
        with sampling_mode(model, params.seed):
            limit = context_length(model)
            for turn in range(self.max_steps + 1):
                for r, row in enumerate(rows):  # no room for another turn: the row ends unanswered
                    if limit and len(prompt_ids[r // n]) + len(row.ids) + self.max_turn_tokens > limit:
                        row.done = row.truncated = True
                active = [r for r, row in enumerate(rows) if not row.done]
                if not active:
                    break
                images = [prompt_blocks[r // n] + rows[r].images for r in active] if self.processor else None
                new = self._turn(model, [prompt_ids[r // n] + rows[r].ids for r in active], params, images)
                for r, ids in zip(active, new):
                    self._advance(rows[r], ids, turn)
        rollouts = self._collect(prompts, prompt_ids, rows, n, device=next(model.parameters()).device)
        if self.processor is not None:
            rollouts.images = [prompt_blocks[r // n] + row.images for r, row in enumerate(rows)]
        if self.record_signals:
            from ttrl_lightning.rollout.signal_recording import replay_token_signals

            rollouts.signals = replay_token_signals(model, rollouts, 1.0)
        return rollouts

    def _advance(self, row: _Row, ids: list[int], turn: int) -> None:
        tok = self.tokenizer
        start = len(row.ids)
        row.ids += ids
        row.gen += [1] * len(ids)
        ended_eos = bool(ids) and ids[-1] == tok.eos_token_id
        # special tokens kept (Qwen's <tool_call> is one), EOS dropped
        piece = tok.decode(ids[:-1] if ended_eos else ids, skip_special_tokens=False)
        row.text += piece
        called = not ended_eos and piece.rstrip().endswith(TOOL_CALL_END)
        if not called:  # an answer (EOS), or the turn's token budget ran out
            row.done = True
            row.truncated = not ended_eos
            return
        if turn >= self.max_steps:  # a call past the step budget is not run
            row.done = row.truncated = True
            return
        obs = row.session.call(last_call_text(piece))
        obs_text = format_agent_observation(obs)
        obs_ids = self._encode(obs_text)
        if self.processor is not None and obs.ok and obs.view is not None:  # the crop, shown as vision tokens
            block = vision_block(self.processor, obs.view)
            row.images.append(block)
            obs_ids = obs_ids + list(block.ids)
        row.spans.append((start, len(row.ids), len(row.ids), len(row.ids) + len(obs_ids)))
        row.ids += obs_ids
        row.gen += [0] * len(obs_ids)
        row.text += obs_text

    def _collect(self, prompts, prompt_ids, rows: list[_Row], n: int, device) -> AgentRollouts:
        tok = self.tokenizer
        R = len(rows)
        P = max(len(p) for p in prompt_ids)
        C = max(1, max(len(row.ids) for row in rows))
        p_ids = torch.full((R, P), tok.pad_token_id, dtype=torch.long)
        p_mask = torch.zeros((R, P), dtype=torch.long)
        c_ids = torch.full((R, C), tok.pad_token_id, dtype=torch.long)
        gen = torch.zeros((R, C), dtype=torch.long)
        att = torch.zeros((R, C), dtype=torch.long)
        trajectories = []
        for r, row in enumerate(rows):
            p = prompt_ids[r // n]
            p_ids[r, P - len(p):] = torch.tensor(p)
            p_mask[r, P - len(p):] = 1
            if row.ids:
                c_ids[r, :len(row.ids)] = torch.tensor(row.ids)
                gen[r, :len(row.ids)] = torch.tensor(row.gen)
                att[r, :len(row.ids)] = 1
            prompt = prompts[r // n]
            trajectories.append(Trajectory(
                prompt=prompt.text, completion=row.text, answer=final_answer(row.text),
                steps=[dict(s) for s in row.session.steps], latencies=list(row.session.latencies),
                source=prompt.source, disabled=self.disabled, truncated=row.truncated))
        return AgentRollouts(
            prompt_ids=p_ids.to(device), prompt_mask=p_mask.to(device), completion_ids=c_ids.to(device),
            completion_mask=gen.to(device), texts=[row.text for row in rows],
            group=torch.arange(len(prompts), device=device).repeat_interleave(n), n=n,
            completion_attention=att.to(device), observation_mask=(att - gen).to(device),
            step_spans=[list(row.spans) for row in rows], trajectories=trajectories)
