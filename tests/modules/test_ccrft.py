"""CCRFTModule: rewards = correctness + gated curiosity + z-scored coherence - efficiency; top-K advantages;
observation tokens carry no loss; a Lightning step runs end to end."""
import lightning.pytorch as pl
import pytest
import torch

from tests.rollout._scripted import ScriptedAgentEngine
from ttrl_lightning.data.cota import AgentPromptDataModule, agent_prompts
from ttrl_lightning.errors import UserError
from ttrl_lightning.modules import CCRFTModule, GRPOModule, PolicySpec
from ttrl_lightning.modules.losses import LOSS_AGGREGATIONS, group_advantages
from ttrl_lightning.rewards.curiosity_coherence import (
    DynamicsHead,
    gated_curiosity,
    per_trajectory_mean,
    zscore,
)
from ttrl_lightning.rollout.base import SamplingParams
from ttrl_lightning.tools import format_tool_call
from ttrl_lightning.modules.specs import CuriosityCoherenceSpec, GRPOSpec, SamplingSpec

pytest.importorskip("cv2")
SPEC = PolicySpec(model="tiny:qwen2", tiny_kwargs={"max_pos": 1024}, lr=1e-3)


def _script(prompt, turn):
    # SEG once or twice (by question), then answer "1"
    calls = 2 if "red" in prompt else 1
    if turn < calls:
        return "look.\n" + format_tool_call("SEG", {"query": "objects" if turn == 0 else "red objects"})
    return "Answer: 1<eos>"


TERMS = set(CuriosityCoherenceSpec.__dataclass_fields__)


def _module(**kw):
    terms = {"embed_hidden": 16, "embed_dim": 8, **{k: kw.pop(k) for k in list(kw) if k in TERMS}}
    m = CCRFTModule(policy=SPEC, num_generations=2, curiosity_coherence=CuriosityCoherenceSpec(**terms), **kw)
    m.configure_model()
    m.engine = ScriptedAgentEngine(m.tokenizer, _script)
    return m


def test_is_a_grpo_module_with_hooks_only():
    assert issubclass(CCRFTModule, GRPOModule)
    assert "training_step" not in CCRFTModule.__dict__
    with pytest.raises(UserError, match=r"curiosity_coherence\.mc_dropout"):
        CCRFTModule(policy=SPEC, curiosity_coherence={"mc_dropout": 1.0})
    with pytest.raises(UserError, match="engine agent: unknown tools to disable: NOPE"):
        CCRFTModule(policy=SPEC, engine={"name": "agent", "disabled": ["NOPE"]})
    with pytest.raises(UserError, match="engine agent: max_steps"):
        CCRFTModule(policy=SPEC, engine={"name": "agent", "max_steps": 0})
    # the turn budget is sampling.max_new_tokens unless the engine's options give their own
    m = CCRFTModule(policy=SPEC, sampling={"max_new_tokens": 40}, engine={"name": "agent", "max_steps": 2})
    assert (m.engine.max_steps, m.engine.max_turn_tokens) == (2, 40)
    assert CCRFTModule(policy=SPEC, engine={"name": "agent", "max_turn_tokens": 9}).engine.max_turn_tokens == 9


def test_gated_curiosity_matches_the_formula():
    torch.manual_seed(0)
    head = DynamicsHead(4, 2, 3, hidden=8, p=0.1)
    e, a, v = torch.randn(5, 4), torch.eye(2)[[0, 1, 0, 1, 0]], torch.randn(5, 3)
    torch.manual_seed(1)
    got = gated_curiosity(head, e, a, v, samples=4, beta=5.0)
    torch.manual_seed(1)
    head.train()
    with torch.no_grad():
        preds = torch.stack([head(e, a) for _ in range(4)])
    mu, var = preds.mean(0), preds.var(0, unbiased=False).mean(-1)
    assert torch.allclose(got, ((mu - v) ** 2).mean(-1) / (1 + 5.0 * var))
    assert bool((var > 0).all())  # dropout is on: the samples differ


def test_zscore_and_trajectory_means():
    c = torch.tensor([0.2, 0.4, 0.9])
    z = zscore(c)
    assert torch.allclose(z, (c - c.mean()) / c.std(unbiased=False))
    assert torch.equal(zscore(torch.tensor([0.5])), torch.zeros(1))
    m = per_trajectory_mean(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 2]), 4)
    assert torch.equal(m, torch.tensor([2.0, 0.0, 5.0, 0.0]))


def test_rewards_add_the_terms():
    m = _module(w_curiosity=0.0, w_coherence=0.0, efficiency_penalty=0.25)
    rows = agent_prompts(0, 2, ["count"])  # the script answers "1"; two SEG calls when the colour is red
    ro = m.engine.generate(m.policy, [r["prompt"] for r in rows], SamplingParams(n=2))
    batch = {"prompt": [r["prompt"] for r in rows], "gold": [r["gold"] for r in rows]}
    got = m.score(ro, batch).rewards
    expected = []
    for r in rows:
        calls = 2 if "red" in r["prompt"].text else 1
        expected += [float(r["gold"] == "1") - 0.25 * (calls - 1)] * 2
    assert torch.allclose(got, torch.tensor(expected))


def test_intrinsic_terms_cover_multi_step_trajectories_and_train_the_heads():
    m = _module()
    red = [r for r in agent_prompts(0, 12, ["count"]) if "red" in r["prompt"].text]
    rows = red[:1] + agent_prompts(0, 1, ["count"])
    ro = m.engine.generate(m.policy, [r["prompt"] for r in rows], SamplingParams(n=2))
    before = [p.detach().clone() for p in m.dynamics.parameters()]
    out = m.intrinsic_rewards(ro)
    calls = [len(t.steps) for t in ro.trajectories]
    for r, n_calls in enumerate(calls):  # every trajectory answers: n_calls transitions (last call -> answer)
        assert (out["curiosity"][r] > 0) == (n_calls >= 1)
    assert torch.isfinite(out["coherence"]).all() and float(out["dynamics_loss"]) > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, m.dynamics.parameters()))


def test_top_k_advantages():
    m = _module(top_k_trajectories=2)
    r = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    adv = m.compute_advantages(r)
    ref = group_advantages(torch.tensor([[3.0, 2.0]]), scale=True)
    assert torch.allclose(adv, torch.tensor([[0.0, ref[0, 0], 0.0, ref[0, 1]]]))
    m4 = _module(top_k_trajectories=8)
    assert torch.allclose(m4.compute_advantages(r), group_advantages(r, scale=True))


def test_training_step_trains_the_model_tokens_only_and_moves_the_weights(tmp_path):
    """One Lightning step: the rows of a group differ (one calls SEG once, the other twice, so the efficiency
    penalty separates them), the loss carries the model's own tokens only (an observation token's log-prob
    gets exactly 0 gradient, a model token's does not) and the step changes the policy's weights."""
    m = _module(w_curiosity=0.0, w_coherence=0.0, efficiency_penalty=0.5,
                grpo=GRPOSpec(reference="initial", kl_coef=0.05))
    seen_in_turn = {}

    def alternating(prompt, turn):  # the rows of a turn come in order; even rows call once, odd rows twice
        k = seen_in_turn[turn] = seen_in_turn.get(turn, -1) + 1
        if turn == 0 or (turn == 1 and k % 2):
            return "look.\n" + format_tool_call("SEG", {"query": "objects"})
        return "Answer: 1<eos>"

    m.engine = ScriptedAgentEngine(m.tokenizer, alternating)
    dm = AgentPromptDataModule(kinds=["count"], n_train=2, n_val=1, batch_size=2)
    seen = {}
    original = m.optimize

    def spy(scored, advantages):
        seen.update(rollouts=scored.rollouts, scored=scored, advantages=advantages.detach().clone())
        seen["stats"] = original(scored, advantages)
        return seen["stats"]

    m.optimize = spy
    before = [p.detach().clone() for p in m.policy.parameters()]
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(m, dm)
    ro, stats, adv = seen["rollouts"], seen["stats"], seen["advantages"]
    assert [len(t.steps) for t in ro.trajectories] == [1, 2, 1, 2]
    assert adv.abs().min() > 0  # within each group the two rows' rewards differ
    obs, own = ro.observation_mask.bool(), ro.completion_mask.bool()
    assert bool(obs.any()) and not bool((obs & own).any())
    assert torch.equal(stats.kept_tokens.bool(), own)  # every group kept: the loss mask is the model's tokens
    # the gradient of the step's loss with respect to each token's log-prob, at the weights after the step
    logp = m.sequence_logprobs(m.policy, ro).detach().requires_grad_(True)
    loss = LOSS_AGGREGATIONS[m.grpo.loss_aggregation](m.policy_loss(logp, logp.detach(), adv)["pg"],
                                                         stats.kept_tokens)
    (grad,) = torch.autograd.grad(loss, logp)
    assert float(grad[obs].abs().max()) == 0.0 and float(grad[own].abs().min()) > 0
    moved = max(float((a - b).abs().max()) for a, b in zip(before, m.policy.parameters()))
    assert moved > 1e-6
    assert float(trainer.callback_metrics["train/chain_length"]) == 1.5
    assert "train/curiosity" in trainer.callback_metrics


def test_sampling_params_read_only_this_modules_own_arguments():
    m = CCRFTModule(policy=SPEC, num_generations=3, sampling=SamplingSpec(max_new_tokens=40, temperature=0.7))
    for key in ("max_new_tokens", "stop"):  # as under the CLI, which saves the subclass's own arguments
        m.hparams.pop(key, None)
    p = m.sampling_params(5)
    assert (p.n, p.max_new_tokens, p.temperature, p.seed) == (3, 40, 0.7, 5)


def test_step_features_are_read_from_the_feature_layer():
    """E_t's v_t and x_t come from hidden-state layer ``feature_layer`` (issue 21, D12): the mean over a
    step's observation columns of that layer's states, and an index outside the model is one UserError."""
    rows = agent_prompts(0, 1, ["count"])
    feats = {}
    for layer in (-1, -2):
        m = _module(feature_layer=layer)
        ro = m.engine.generate(m.policy, [r["prompt"] for r in rows], SamplingParams(n=1))
        feats[layer] = m.step_features(ro)
        with torch.no_grad():
            hs = m.policy(**ro.forward_inputs(), output_hidden_states=True).hidden_states[layer]
        c0, c1, o0, o1 = ro.step_spans[0][0]
        P = ro.prompt_ids.shape[1]
        torch.testing.assert_close(feats[layer]["v"][0], hs[0, P + o0:P + o1].float().mean(0))
    assert not torch.allclose(feats[-1]["v"], feats[-2]["v"])
    m = _module(feature_layer=-9)
    ro = m.engine.generate(m.policy, [r["prompt"] for r in rows], SamplingParams(n=1))
    with pytest.raises(UserError, match="curiosity_coherence.feature_layer=-9 is outside"):
        m.step_features(ro)
