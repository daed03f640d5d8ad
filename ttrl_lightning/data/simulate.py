"""A generator of **synthetic** rollout pools, for the default command, tests and benchmarks.

Nothing here comes from a model: the pools are drawn from the small generative model below, whose knobs
let tests and benchmarks put selection rules into known regimes (correct answer a minority, view-fragile
wrong answers, informative or useless quality signals). Accuracy numbers measured on these pools say how
the *rules* behave under those assumptions, not how any model performs.

Per question ``q`` (all draws from one seeded ``torch.Generator``):

* the correct-answer prevalence ``g_q ~ Beta(k m, k (1 - m))`` with mean ``m = correct_rate`` and
  concentration ``k = concentration``;
* a wrong-answer distribution ``pi_q ~ Dirichlet(wrong_alpha * 1_D)`` over ``D = num_distractors`` wrong
  answers (small ``wrong_alpha``: one dominant wrong answer, the majority-vote trap);
* original view: each rollout is unextractable with prob. ``no_answer_rate``, else correct with prob.
  ``g_q``, else a wrong answer drawn from ``pi_q``;
* reframed view (Self-Harmony): the same ``g_q`` (correct answers are view-invariant), wrong answers from
  ``s pi_q + (1 - s) pi'_q`` with a fresh ``pi'_q`` and ``s = wrong_view_stability`` (view-fragile errors);
* per-token signals of original-view rollouts: a confidence latent ``u = signal_strength (y - 1/2) + e_u``
  and an independent visual latent ``x = signal_strength (y - 1/2) + e_x`` (``y`` = correctness,
  ``e ~ N(0, 1)``), so the two signals are complementary; per question a random scale ``s_q`` of the
  confidence values (why VisConf calibrates within the candidate set); token noise ``N(0, token_noise^2)``:

  - ``self_certainty_t = s_q softplus(1 + 0.6 u + n_t)``, ``entropy_t = softplus(1.5 - 0.5 u + n'_t)``,
  - ``logprob_t = -softplus(0.7 - 0.4 u + n''_t)``,
  - ``visual_engagement_t = sigmoid(-1 + 0.6 x + n_t)``, ``image_attention_t = visual_engagement_t *
    sigmoid(1 + n_t)``;
  - lengths uniform in ``[tokens // 2, tokens]``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F

from ..answers import NO_ANSWER
from ..errors import UserError
from .pool import MAX_TOKENS_PER_ROLLOUT, RolloutPool

__all__ = ["SimulationConfig", "simulate_pool"]


@dataclass
class SimulationConfig:
    num_questions: int = 500
    rollouts: int = 32
    tokens: int = 64
    correct_rate: float = 0.5
    concentration: float = 2.0
    num_distractors: int = 4
    wrong_alpha: float = 0.5
    no_answer_rate: float = 0.03
    wrong_view_stability: float = 0.3
    signal_strength: float = 0.25
    token_noise: float = 0.5
    reframed: bool = True
    seed: int = 0

    def validate(self) -> None:
        """Raise :class:`~ttrl_lightning.errors.UserError` naming the first setting out of its range."""
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise UserError(f"{f.name} must be a finite number, got {v}")
        if self.num_questions < 1 or self.rollouts < 1:
            raise UserError("num_questions and rollouts must be >= 1")
        if not 2 <= self.tokens <= MAX_TOKENS_PER_ROLLOUT:
            raise UserError(f"tokens must lie in [2, {MAX_TOKENS_PER_ROLLOUT}] (the pool's limit per "
                            f"rollout), got {self.tokens}")
        for name in ("correct_rate", "no_answer_rate", "wrong_view_stability"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise UserError(f"{name} must lie in [0, 1], got {v}")
        if not 0.0 < self.correct_rate < 1.0:
            raise UserError("correct_rate must lie strictly between 0 and 1")
        if self.num_distractors < 1 or self.concentration <= 0 or self.wrong_alpha <= 0:
            raise UserError("num_distractors >= 1, concentration > 0 and wrong_alpha > 0 are required")
        if self.token_noise < 0:
            raise UserError(f"token_noise must be >= 0, got {self.token_noise}")


def _draw_answers(g: torch.Tensor, pi: torch.Tensor, n: int, no_answer_rate: float,
                  gen: torch.Generator) -> torch.Tensor:
    """Class ids ``[Q, n]``: 0 = correct, 1..D = wrong, D + 1 = NO_ANSWER."""
    q, d = pi.shape
    u = torch.rand(q, n, generator=gen)
    wrong = torch.multinomial(pi, n, replacement=True, generator=gen) + 1
    cls = torch.where(u < g[:, None], torch.zeros_like(wrong), wrong)
    na = torch.rand(q, n, generator=gen) < no_answer_rate
    return torch.where(na, torch.full_like(cls, d + 1), cls)


def simulate_pool(cfg: SimulationConfig | None = None, **overrides) -> RolloutPool:
    """Draw a synthetic :class:`RolloutPool` (see the module docstring for the generative model)."""
    cfg = cfg or SimulationConfig()
    if overrides:
        cfg = SimulationConfig(**{**asdict(cfg), **overrides})
    cfg.validate()
    gen = torch.Generator().manual_seed(cfg.seed)
    q, r, t, d = cfg.num_questions, cfg.rollouts, cfg.tokens, cfg.num_distractors
    # torch.distributions takes no generator: draw Beta(a, b) as Ga / (Ga + Gb) from seeded Gammas
    ga = torch._standard_gamma(torch.full((q,), cfg.concentration * cfg.correct_rate), generator=gen)
    gb = torch._standard_gamma(torch.full((q,), cfg.concentration * (1 - cfg.correct_rate)), generator=gen)
    g = ga / (ga + gb)

    def dirichlet() -> torch.Tensor:
        x = torch._standard_gamma(torch.full((q, d), cfg.wrong_alpha), generator=gen).clamp_min(1e-30)
        return x / x.sum(-1, keepdim=True)

    pi = dirichlet()
    cls0 = _draw_answers(g, pi, r, cfg.no_answer_rate, gen)
    answer_class = torch.full((q, 2, r), -1, dtype=torch.long)
    answer_class[:, 0] = cls0
    if cfg.reframed:
        s = cfg.wrong_view_stability
        answer_class[:, 1] = _draw_answers(g, s * pi + (1 - s) * dirichlet(), r, cfg.no_answer_rate, gen)

    # answer strings: gold is a random integer, distractors are nearby distinct integers
    base = torch.randint(10, 1000, (q,), generator=gen)
    offsets = torch.randperm(2 * d + 2, generator=gen)[: d] - d
    offsets = torch.where(offsets >= 0, offsets + 1, offsets)  # never 0: distractors differ from gold
    class_names = [[str(int(b))] + [str(int(b + o)) for o in offsets] + [NO_ANSWER] for b in base]
    class_correct = torch.zeros(q, d + 2, dtype=torch.bool)
    class_correct[:, 0] = True

    # per-token signals of the original view
    y = (cls0 == 0).float()
    u = cfg.signal_strength * (y - 0.5) + torch.randn(q, r, generator=gen)
    x = cfg.signal_strength * (y - 0.5) + torch.randn(q, r, generator=gen)
    scale = torch.exp(0.5 * torch.randn(q, 1, 1, generator=gen))
    lengths = torch.randint(t // 2, t + 1, (q, r), generator=gen)
    valid = torch.arange(t)[None, None, :] < lengths[..., None]

    def noise() -> torch.Tensor:
        return cfg.token_noise * torch.randn(q, r, t, generator=gen)

    uu, xx = u[..., None], x[..., None]
    signals = {
        "self_certainty": scale * F.softplus(1.0 + 0.6 * uu + noise()),
        "entropy": F.softplus(1.5 - 0.5 * uu + noise()),
        "logprob": -F.softplus(0.7 - 0.4 * uu + noise()),
    }
    ve = torch.sigmoid(-1.0 + 0.6 * xx + noise())
    signals["visual_engagement"] = ve
    signals["image_attention"] = ve * torch.sigmoid(1.0 + noise())
    signals = {k: (v * valid).float() for k, v in signals.items()}
    no_answer = torch.full((q,), d + 1, dtype=torch.long)
    return RolloutPool(ids=[f"sim-{i:06d}" for i in range(q)], gold=[n[0] for n in class_names],
                       class_names=class_names, answer_class=answer_class, class_correct=class_correct,
                       no_answer_class=no_answer, lengths=lengths, signals=signals)
