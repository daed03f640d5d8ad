"""``CCRFTModule``: Curiosity-Coherence RFT (Pixelis 3.2.2, appendix 1), a ``GRPOModule`` with hooks only.

    rollout    : the agent engine (``rollout.agent.AgentEngine``): tool calls run as they are written,
                 observations appended and left out of the loss (``AgentRollouts.completion_mask``); a
                 vision-language policy (``models.load_processor`` finds its processor) is shown the image
                 and each ZOOM crop as vision tokens
    score      : R(tau) = w_correct [answer right] + w_curiosity Cur(tau) + w_coherence Coh(tau)
                          - efficiency_penalty * max(0, calls - 1)
    advantages : group-relative over the top-K trajectories of each prompt (K = 8); the others get 0

Cur and Coh are ``rewards.curiosity_coherence``'s gated prediction-error curiosity and z-scored adjacent-step
coherence on step embeddings E_t computed from the policy's hidden states (detached: the backbone is not
trained through them). The step encoder g_phi and dynamics head h_psi are trained jointly here, one AdamW
step per batch on the dynamics MSE (appendix 1: lr 5e-5, weight decay 0.01, gradient clip 1.0), after the
rewards of that batch are computed. The transitions are consecutive tool steps plus the last tool step to
the answer (the answer's tokens stand for both its x and v).

KL to the EMA anchor in the PID corridor is the GRPO step's KL with ``reference="external"`` plus the
``EMAAnchor`` and ``PIDKLController`` callbacks (configs/rft/tiny_ccrft.yaml; Pixelis: target 0.15,
corridor [0.10, 0.20], Kp 0.30, Ki 0.05, Kd 0.10, EMA rho 0.99). Reading of the reference (Pixelis sec. 3.2.2 vs sec. 4):
the paper names two. Sec. 3.2.2 and appendix 1 ("KL anchor") penalise the KL to the frozen SFT policy;
sec. 4 and appendix 6 keep a "KL-to-EMA corridor" in every phase. The default is the EMA anchor, the one
the reported runs name; ``reference="initial"`` is the frozen SFT policy (the run's starting checkpoint).

Reading of the layer (appendix 1, "Which multimodal layer for E_t"): E_t is computed from the hidden states of layer ``feature_layer`` (an index
into ``output_hidden_states``; default -1, the last layer), for both v_t and x_t. Pixelis appendix
"Which multimodal layer for E_t" reads v_t from "the 3rd fusion block from the top", ``feature_layer=-3``;
the tiny agents here have 2 layers, which have no third block from the top, so the default is the last
one. x_t's layer is not given by the paper; it is read from the same layer.

The paper gives no weights for the reward terms; ours: correctness 1, curiosity 0.1, coherence 0.1,
efficiency 0.05 per call beyond the first (Pixel Reasoner's -0.05 (n_calls - 1)).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar, Sequence

import torch

from ttrl_lightning.errors import Bounds, UserError, check_bounds
from ttrl_lightning.modules.base import PolicySpec
from ttrl_lightning.modules.grpo import GRPOModule
from ttrl_lightning.modules.step_records import RewardParts, RolloutRewards
from ttrl_lightning.modules.losses import group_advantages
from ttrl_lightning.modules.specs import CuriosityCoherenceSpec, GRPOSpec, SamplingSpec, spec_of
from ttrl_lightning.rewards.curiosity_coherence import (DynamicsHead, StepEncoder, adjacent_cosines,
                                                        gated_curiosity, per_trajectory_mean, zscore)
from ttrl_lightning.rollout.agent import AgentRollouts
from ttrl_lightning.rollout.base import Rollouts, SamplingParams
from ttrl_lightning.tools.agent_format import answers_match
from ttrl_lightning.tools.base import TOOLS

#: bounds of CCRFTModule's own numeric arguments (the curiosity and coherence terms check theirs:
#: ``modules.specs.CuriosityCoherenceSpec``)
CCRFT_RULES: dict[str, Bounds] = {
    "top_k_trajectories": Bounds(low=1, integer=True),
}
#: the actions of the one-hot codes: the tools, then "no valid tool" (a call that did not parse / name one)
ACTIONS = (*TOOLS.names(), None)
#: how many of a step's last written tokens make x_t (appendix 1: "the mean of last 32 thought tokens")
X_TOKENS = 32


def _onehot(names: Sequence[str | None], device) -> torch.Tensor:
    out = torch.zeros(len(names), len(ACTIONS), device=device)
    for i, name in enumerate(names):
        out[i, ACTIONS.index(name) if name in ACTIONS else len(ACTIONS) - 1] = 1.0
    return out


class CCRFTModule(GRPOModule):
    """CC-RFT (see the module docstring).

    Args beyond ``GRPOModule``'s: ``top_k_trajectories`` K (8: the prompt's K best-rewarded rows get
    group-relative advantages, the rest 0; K >= num_generations keeps all); ``curiosity_coherence`` (a
    ``CuriosityCoherenceSpec``: the reward's weights, the curiosity's MC-dropout and gate, g_phi's sizes,
    the feature layer, the heads' optimiser; module docstring for the layer); ``sampling`` and ``grpo`` as
    GRPO's (``sampling.max_new_tokens`` is the budget per turn, 160; ``grpo`` defaults to kl_coef 0.1 to the
    EMA anchor, ``reference="external"``); ``engine``: the agent engine and its options (``rollout.agent.
    AgentEngine``: ``max_steps`` tool calls per trajectory, 4; ``disabled`` tools, a single-tool ablation;
    ``max_turn_tokens``, ``sampling.max_new_tokens`` unless given), e.g. ``{"name": "agent", "max_steps": 4,
    "disabled": ["OCR"]}``; the default is ``{"name": "agent"}``.
    Batch (``data.cota.AgentPromptDataModule``): ``{"prompt": [AgentPrompt], "gold": [str], ...}``.
    """

    unsaved_init_args: ClassVar[tuple[str, ...]] = ("rewards", "engine")

    def __init__(
        self,
        policy: PolicySpec = PolicySpec(lr=1e-4),
        num_generations: int = 8,
        top_k_trajectories: int = 8,
        curiosity_coherence: CuriosityCoherenceSpec = CuriosityCoherenceSpec(),
        sampling: SamplingSpec = SamplingSpec(max_new_tokens=160),
        grpo: GRPOSpec = GRPOSpec(kl_coef=0.1, reference="external"),
        engine: str | dict[str, Any] | None = None,
    ):
        check_bounds(locals(), CCRFT_RULES, f"{type(self).__name__} argument ")
        sampling = spec_of(SamplingSpec, sampling, "sampling")
        if sampling.stop:
            raise UserError(f"{type(self).__name__}: sampling.stop must be empty (the agent engine ends each turn "
                            f"at </tool_call> or EOS), got {list(sampling.stop)}")
        terms = spec_of(CuriosityCoherenceSpec, curiosity_coherence, "curiosity_coherence")
        super().__init__(policy=policy, num_generations=num_generations, sampling=sampling, grpo=grpo,
                         engine="agent" if engine is None else engine)
        self.curiosity_coherence = terms
        self.save_hyperparameters({"curiosity_coherence": asdict(terms)})
        self.encoder: StepEncoder | None = None
        self.dynamics: DynamicsHead | None = None
        self._head_opt: torch.optim.Optimizer | None = None

    def engine_defaults(self, record_signals: bool) -> dict[str, Any]:
        """GRPO's, and the agent engine's turn budget: ``sampling.max_new_tokens`` unless the spec sets its own."""
        return {**super().engine_defaults(record_signals), "max_turn_tokens": self.sampling.max_new_tokens}

    # ------------------------------------------------------------------ heads
    def configure_model(self) -> None:
        super().configure_model()
        if self.encoder is None:
            self.build_heads(int(self.policy.config.get_text_config().hidden_size))

    def build_heads(self, d: int) -> None:
        """g_phi and h_psi for policy width ``d`` (called by ``configure_model``)."""
        h = self.curiosity_coherence
        self.encoder = StepEncoder(d, len(ACTIONS), h.embed_hidden, h.embed_dim, h.mc_dropout)
        self.dynamics = DynamicsHead(h.embed_dim, len(ACTIONS), d, h.embed_hidden, h.mc_dropout)
        self.encoder.to(self.device)
        self.dynamics.to(self.device)

    def head_optimizer(self) -> torch.optim.Optimizer:
        if self._head_opt is None:
            params = list(self.encoder.parameters()) + list(self.dynamics.parameters())
            self._head_opt = torch.optim.AdamW(params, lr=self.curiosity_coherence.head_lr,
                                               weight_decay=self.curiosity_coherence.head_weight_decay)
        return self._head_opt

    # ------------------------------------------------------------------ step features
    @torch.no_grad()
    def step_features(self, rollouts: AgentRollouts) -> dict[str, torch.Tensor]:
        """Per step of every row (tool steps, then the answer when there is one): ``v`` [S, d], ``x`` [S, d],
        ``action`` (its tool) and ``prev_action`` one-hots [S, A], ``row`` [S] and ``next`` [S] (index of the
        following step of the same row, -1 for the last)."""
        out = self.policy(**rollouts.forward_inputs(), output_hidden_states=True)
        layer = self.curiosity_coherence.feature_layer
        if not -len(out.hidden_states) <= layer < len(out.hidden_states):
            raise UserError(f"{type(self).__name__} argument curiosity_coherence.feature_layer={layer} is outside the model's "
                            f"{len(out.hidden_states)} hidden-state layers (embeddings included)")
        hidden = out.hidden_states[layer].float()[:, rollouts.prompt_ids.shape[1]:]  # [R, C, d]
        v, x, rows, actions, prev = [], [], [], [], []
        lengths = rollouts.completion_attention.sum(1).tolist()
        for r, (spans, traj) in enumerate(zip(rollouts.step_spans, rollouts.trajectories)):
            tools = traj.tools
            prev_tool = None
            for k, (c0, c1, o0, o1) in enumerate(spans):
                x.append(hidden[r, max(c0, c1 - X_TOKENS):c1].mean(0))
                v.append(hidden[r, o0:o1].mean(0) if o1 > o0 else hidden[r, c0:c1].mean(0))
                rows.append(r)
                actions.append(tools[k] if k < len(tools) else None)
                prev.append(prev_tool)
                prev_tool = actions[-1]
            end = spans[-1][3] if spans else 0
            if spans and int(lengths[r]) > end and not traj.truncated:  # the answer after the last step
                seg = hidden[r, end:int(lengths[r])]
                x.append(seg[-X_TOKENS:].mean(0))
                v.append(seg.mean(0))
                rows.append(r)
                actions.append(None)
                prev.append(prev_tool)
        device = hidden.device
        if not rows:
            d = hidden.shape[-1]
            empty = torch.zeros(0, d, device=device)
            return {"v": empty, "x": empty, "action": _onehot([], device), "prev_action": _onehot([], device),
                    "row": torch.zeros(0, dtype=torch.long, device=device),
                    "next": torch.zeros(0, dtype=torch.long, device=device)}
        row_t = torch.tensor(rows, device=device)
        nxt = torch.full_like(row_t, -1)
        same = row_t[1:] == row_t[:-1]
        following = torch.arange(1, len(rows), device=device)
        nxt[:-1] = torch.where(same, following, torch.full_like(following, -1))
        return {"v": torch.stack(v), "x": torch.stack(x), "action": _onehot(actions, device),
                "prev_action": _onehot(prev, device), "row": row_t, "next": nxt}

    def intrinsic_rewards(self, rollouts: AgentRollouts) -> dict[str, torch.Tensor]:
        """``curiosity`` and ``coherence`` [R] per trajectory (0 without a transition), then one training
        step of g_phi and h_psi on the batch's transitions."""
        R = rollouts.completion_ids.shape[0]
        zeros = torch.zeros(R, device=self.device)
        h = self.curiosity_coherence
        if h.w_curiosity == 0 and h.w_coherence == 0:
            return {"curiosity": zeros, "coherence": zeros}
        f = self.step_features(rollouts)
        has_next = f["next"] >= 0
        if not bool(has_next.any()):
            return {"curiosity": zeros, "coherence": zeros}
        src = has_next.nonzero().squeeze(1)
        dst = f["next"][src]
        owner = f["row"][src]
        with torch.no_grad():
            was = self.encoder.training
            self.encoder.eval()
            e = self.encoder(f["v"], f["x"], f["prev_action"])
            self.encoder.train(was)
            cur = gated_curiosity(self.dynamics, e[src], f["action"][src], f["v"][dst], h.mc_samples,
                                  h.gate_beta)
            coh = zscore(adjacent_cosines(e[src], e[dst]))
        out = {"curiosity": per_trajectory_mean(cur, owner, R),
               "coherence": per_trajectory_mean(coh, owner, R)}
        if h.w_curiosity != 0 and h.head_lr > 0:  # joint training of g_phi and h_psi on the dynamics error
            opt = self.head_optimizer()
            with torch.enable_grad():
                e_train = self.encoder(f["v"], f["x"], f["prev_action"])
                pred = self.dynamics(e_train[src], f["action"][src])
                loss = (pred - f["v"][dst]).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                heads = list(self.encoder.parameters()) + list(self.dynamics.parameters())
                torch.nn.utils.clip_grad_norm_(heads, 1.0)
                opt.step()
            out["dynamics_loss"] = loss.detach()
        return out

    # ------------------------------------------------------------------ hooks
    def rollout(self, batch: dict[str, list]) -> Rollouts:
        rollouts = super().rollout(batch)
        if not isinstance(rollouts, AgentRollouts):
            raise TypeError(f"{type(self).__name__} needs an agent engine (rollout.agent.AgentEngine), got "
                            f"{type(self.engine).__name__}")
        return rollouts

    def score(self, rollouts: Rollouts, batch: dict[str, list]) -> RolloutRewards:
        """``w_correct [answer right] + w_curiosity Cur + w_coherence Coh - efficiency_penalty * max(0,
        calls - 1)`` per trajectory; the parts per row are the record's ``detail`` (``RewardParts``)
        and their means its ``metrics`` (logged)."""
        h = self.curiosity_coherence
        n = rollouts.n
        golds = [a for a in batch["gold"] for _ in range(n)]
        trajs = rollouts.trajectories
        device = self.device
        correct = torch.tensor([float(answers_match(t.answer, g)) for t, g in zip(trajs, golds)],
                               device=device)
        calls = torch.tensor([float(len(t.steps)) for t in trajs], device=device)
        intrinsic = self.intrinsic_rewards(rollouts)
        cur, coh = intrinsic["curiosity"].to(device), intrinsic["coherence"].to(device)
        reward = (h.w_correct * correct + h.w_curiosity * cur + h.w_coherence * coh
                  - h.efficiency_penalty * (calls - 1).clamp_min(0))
        errors = sum(e is not None for t in trajs for e in t.errors)
        metrics = {"correct": correct.mean(), "curiosity": cur.mean(), "coherence": coh.mean(),
                   "chain_length": calls.mean(),
                   "tool_error_rate": torch.tensor(errors / max(1.0, float(calls.sum())))}
        if "dynamics_loss" in intrinsic:
            metrics["dynamics_loss"] = intrinsic["dynamics_loss"]
        return RolloutRewards(reward, metrics=metrics,
                              detail=RewardParts(correct, cur, coh, calls))

    def compute_advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """Group-relative advantages over each prompt's top-K rewards [G, N]; rows outside the top K get 0
        (ties: the lower row index first)."""
        G, N = rewards.shape
        K = min(int(self.hparams.top_k_trajectories), N)
        if K >= N:
            return group_advantages(rewards, scale=self.grpo.scale_rewards)
        order = torch.sort(rewards, dim=1, descending=True, stable=True).indices[:, :K]
        top = torch.gather(rewards, 1, order)
        adv = group_advantages(top, scale=self.grpo.scale_rewards)
        return torch.zeros_like(rewards).scatter(1, order, adv)

    def validation_step(self, batch, batch_idx):
        """Greedy agent rollouts; ``val/accuracy`` (no intrinsic rewards, no head training)."""
        params = SamplingParams(n=1, temperature=0.0, max_new_tokens=self.sampling.max_new_tokens)
        rollouts = self.engine.generate(self.policy, batch["prompt"], params)
        correct = torch.tensor([float(answers_match(t.answer, g))
                                for t, g in zip(rollouts.trajectories, batch["gold"])])
        self.val_accuracy(correct)
        self.log("val/accuracy", self.val_accuracy, on_epoch=True, prog_bar=True)
