"""Generation hook: record the per-token signals while ``model.generate`` samples.

While the recorder is active, (1) a forward hook on the LM head takes the last position's hidden state of
every decoding step and runs ``token_stats`` on it (entropy, self-certainty, lse; the sampled token's
log-prob is filled in once the token is known), and (2) the ``ttrl_mass`` attention function records the
group mass of the query that produces each token (prefill: its last query; decode: the single query).
The result equals a teacher-forced replay with ``score_rollouts`` (tested).
"""
from __future__ import annotations

import contextlib
import math

import torch

from ttrl_lightning.masking import completion_mask_at_eos
from ttrl_lightning.ops import token_stats

from .attention import AttentionMassRecorder, mass_attention, recording
from .groups import IMAGE, image_token_ids, key_groups_from_ids, special_token_ids
from .scoring import RolloutSignals, visual_engagement_from_mass


class GenerationSignalRecorder:
    """Context manager around ``model.generate`` that records per-token signals of the generated tokens.

    input_ids / attention_mask / mm_token_type_ids: the prompt batch passed to generate ([B, T0]).
    temperature: divides the logits for the signals (independent of the sampling settings).
    tokenizer: optional; its ``all_special_ids`` join the config's special ids in the SPECIAL key group (see
    ``groups``); without it the tokenizer's other special tokens count as prompt.
    After generate: ``signals(sequences)`` -> RolloutSignals over the generated tokens ([B, N]).
    """

    def __init__(self, model, input_ids, attention_mask=None, mm_token_type_ids=None, temperature=1.0,
                 record_attention=True, tokenizer=None):
        self.model = model
        self.prompt_len = input_ids.shape[1]
        self.temperature = float(temperature)
        self.record_attention = record_attention
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        self.groups = key_groups_from_ids(input_ids, attention_mask, None, image_token_ids(model.config),
                                          special_token_ids(model.config, tokenizer), mm_token_type_ids)
        self.mass_recorder = AttentionMassRecorder(self.groups)
        self.head = model.get_output_embeddings()
        self._hidden: list[torch.Tensor] = []
        self._stats: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self._stack = None

    def _on_head(self, module, args, output):
        h = args[0][:, -1].detach()  # [B, H]: the position that predicts the next token
        bias = getattr(self.head, "bias", None)
        no_label = torch.full((h.shape[0],), -1, dtype=torch.long, device=h.device)
        _, entropy, sc, lse = token_stats(h, self.head.weight, no_label, bias, self.temperature)
        self._hidden.append(h.float())
        self._stats.append((entropy, sc, lse))

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        if self.record_attention:
            self._stack.enter_context(mass_attention(self.model))
            self._stack.enter_context(recording(self.mass_recorder))
        handle = self.head.register_forward_hook(self._on_head)
        self._stack.callback(handle.remove)
        return self

    def __exit__(self, *exc):
        self._stack.close()
        return False

    def signals(self, sequences: torch.Tensor) -> RolloutSignals:
        """sequences: [B, T0 + N] as returned by generate. Tokens after the first EOS are outside the
        completion mask (``masking.completion_mask_at_eos``); their signals are NaN."""
        new = sequences[:, self.prompt_len:]
        n = new.shape[1]
        if len(self._stats) < n:
            raise RuntimeError(f"recorded {len(self._stats)} decoding steps for {n} generated tokens")
        entropy, sc, lse = (torch.stack([s[i] for s in self._stats[:n]], 1) for i in range(3))
        hidden = torch.stack(self._hidden[:n], 1)  # [B, N, H]
        w_y = self.head.weight[new].float()  # [B, N, H]: only the sampled rows
        z_y = (hidden * w_y).sum(-1)
        bias = getattr(self.head, "bias", None)
        if bias is not None:
            z_y = z_y + bias.float()[new]
        logprob = z_y / self.temperature - lse
        eos = self.model.generation_config.eos_token_id
        eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        ends = new
        if len(eos_ids) > 1:  # every EOS id ends a row: map them all to the first one
            ends = torch.where(torch.isin(new, torch.tensor(eos_ids, device=new.device)), eos_ids[0], new)
        mask = completion_mask_at_eos(ends, eos_ids[0] if eos_ids else None).bool()
        nan = torch.tensor(float("nan"), device=new.device)
        group_mass = image_attention = engagement = None
        if self.record_attention:
            mass = self.mass_recorder.mass()[:, self.prompt_len - 1:self.prompt_len - 1 + n]
            group_mass = torch.where(mask[..., None], mass, nan)
            has_image = (self.mass_recorder.key_groups == IMAGE).any(1)  # rows expanded like the sequences
            if bool(has_image.any()):
                keep = mask & has_image[:, None]
                image_attention = torch.where(keep, mass[..., IMAGE], nan)
                engagement = torch.where(keep, visual_engagement_from_mass(mass), nan)
        return RolloutSignals(mask, torch.where(mask, logprob, nan), torch.where(mask, entropy, nan),
                              torch.where(mask, sc, nan), group_mass, image_attention, engagement)


class StepLogitsSignalRecorder(GenerationSignalRecorder):
    """:class:`GenerationSignalRecorder` whose head hook reduces the head's own output.

    The recorder of sampling with images (``rollout.image_sampling``: ``ttrl generate`` and the HF engine).
    During sampling the LM head already computes the last position's logits ``z = h W^T (+ b)`` (``[B, V]`` per
    decoding step: generate keeps only the last position). The package's recorder recomputes them blockwise from
    ``h`` with ``token_stats`` (it cannot rely on the head's output in every setting); here the head hook reads
    the head's output instead and reduces it at once to ``lse``, entropy and self-certainty (the formulas of
    ``ops.reference.token_stats_reference``: ``entropy = lse - sum_j p_j z_j``, ``KL(U || p) = lse - mean(z) -
    log V``), so the vocabulary-sized matmul runs once per step, not twice. Nothing ``[V]``-sized is kept past the
    step; the sampled token's log-prob comes from the kept hidden state and its head row, as in the base class.
    A head whose output is not ``[B, T, V]`` / ``[B, V]`` falls back to the base class's ``token_stats``.

    Same arguments, same ``signals(sequences)``."""

    def _on_head(self, module, args, output):
        logits = output[:, -1] if isinstance(output, torch.Tensor) and output.dim() == 3 else output
        vocab = self.head.weight.shape[0]
        if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape[-1] != vocab:
            return super()._on_head(module, args, output)
        z = logits.detach().float() / self.temperature
        lse = torch.logsumexp(z, dim=-1)
        p = torch.exp(z - lse[:, None])
        entropy = lse - (p * z).sum(-1)
        self_certainty = lse - z.mean(-1) - math.log(vocab)
        self._hidden.append(args[0][:, -1].detach().float())
        self._stats.append((entropy, self_certainty, lse))


@torch.no_grad()
def generate_with_signals(model, temperature: float = 1.0, record_attention: bool = True, tokenizer=None,
                          **generate_kwargs):
    """``model.generate(**generate_kwargs)`` that also returns the generated tokens' signals.

    ``tokenizer`` (optional, not passed to generate): its special ids are excluded from visual engagement.

    Returns (sequences [B, T0 + N], RolloutSignals over the N generated tokens)."""
    input_ids = generate_kwargs["input_ids"]
    with GenerationSignalRecorder(model, input_ids, generate_kwargs.get("attention_mask"),
                                  generate_kwargs.get("mm_token_type_ids"), temperature, record_attention,
                                  tokenizer) as rec:
        out = model.generate(**generate_kwargs)
    sequences = out.sequences if hasattr(out, "sequences") else out
    return sequences, rec.signals(sequences)
