"""The signal recorder of ``ttrl generate``: ``GenerationSignalRecorder`` reading the step's logits.

During sampling the LM head already computes the last position's logits ``z = h W^T (+ b)`` (``[B, V]`` per
decoding step: generate keeps only the last position). The package's recorder recomputes them blockwise from
``h`` with ``token_stats`` (it cannot rely on the head's output in every setting); here the head hook reads
the head's output instead and reduces it at once to ``lse``, entropy and self-certainty (the formulas of
``ops.reference.token_stats_reference``: ``entropy = lse - sum_j p_j z_j``, ``KL(U || p) = lse - mean(z) -
log V``), so the vocabulary-sized matmul runs once per step, not twice. Nothing ``[V]``-sized is kept past the
step; the sampled token's log-prob comes from the kept hidden state and its head row, as in the base class.
A head whose output is not ``[B, T, V]`` / ``[B, V]`` falls back to the base class's ``token_stats``.
"""
from __future__ import annotations

import math

import torch

from ..integrations import GenerationSignalRecorder

__all__ = ["StepLogitsSignalRecorder"]


class StepLogitsSignalRecorder(GenerationSignalRecorder):
    """:class:`~ttrl_lightning.integrations.GenerationSignalRecorder` whose head hook reduces the head's own
    output (module docstring). Same arguments, same ``signals(sequences)``."""

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
