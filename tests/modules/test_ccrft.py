"""CCRFTModule: rewards = correctness + gated curiosity + z-scored coherence - efficiency; top-K advantages;
observation tokens carry no loss; a Lightning step runs end to end."""
import lightning.pytorch as pl
import pytest
import torch

from tests.rollout._scripted import ScriptedAgentEngine
from ttrl_lightning.data.cota import AgentPromptDataModule, agent_prompts
from ttrl_lightning.errors import UserError
from ttrl_lightning.modules import CCRFTModule, GRPOModule, PolicySpec
from ttrl_lightning.modules.losses import group_advantages
from ttrl_lightning.rewards.curiosity_coherence import (
    DynamicsHead,
    gated_curiosity,
    per_trajectory_mean,
    zscore,
)
from ttrl_lightning.rollout.base import SamplingParams
from ttrl_lightning.tools import format_tool_call

pytest.importorskip("cv2")
SPEC = PolicySpec(model="tiny:qwen2", tiny_kwargs={"max_pos": 1024}, lr=1e-3)


def _script(prompt, turn):
    # SEG once or twice (by question), then answer "1"
    calls = 2 if "red" in prompt else 1
    if turn < calls:
        return "look.\n" + format_tool_call("SEG", {"query": "objects" if turn == 0 else "red objects"})
    return "Answer: 1<eos>"


def _module(**kw):
    m = CCRFTModule(policy=SPEC, num_generations=2, embed_hidden=16, embed_dim=8, **kw)
    m.configure_model()
    m.engine = ScriptedAgentEngine(m.tokenizer, _script)
    return m


def test_is_a_grpo_module_with_hooks_only():
    assert issubclass(CCRFTModule, GRPOModule)
    assert "training_step" not in CCRFTModule.__dict__
    with pytest.raises(UserError, match="mc_dropout"):
        CCRFTModule(policy=SPEC, mc_dropout=1.0)
    with pytest.raises(UserError, match="unknown tools"):
        CCRFTModule(policy=SPEC, disabled=("NOPE",))


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
        calls = 2 if "red" in r["prompt"] else 1
        expected += [float(r["gold"] == "1") - 0.25 * (calls - 1)] * 2
    assert torch.allclose(got, torch.tensor(expected))


def test_intrinsic_terms_cover_multi_step_trajectories_and_train_the_heads():
    m = _module()
    red = [r for r in agent_prompts(0, 12, ["count"]) if "red" in r["prompt"]]
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


def test_training_step_runs_with_observation_tokens_outside_the_loss_mask(tmp_path):
    m = _module(reference="initial", kl_coef=0.05)
    dm = AgentPromptDataModule(kinds=["count"], n_train=2, n_val=1, batch_size=2)
    seen = {}
    original = m.sequence_logprobs

    def spy(model, rollouts):
        seen["rollouts"] = rollouts
        return original(model, rollouts)

    m.sequence_logprobs = spy
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(m, dm)
    ro = seen["rollouts"]
    assert bool(ro.observation_mask.any())
    assert bool((ro.completion_mask * ro.observation_mask == 0).all())
    assert "train/curiosity" in trainer.callback_metrics and "train/chain_length" in trainer.callback_metrics


def test_sampling_params_read_only_this_modules_own_arguments():
    m = CCRFTModule(policy=SPEC, num_generations=3, max_turn_tokens=40, temperature=0.7)
    for key in ("max_new_tokens", "stop"):  # as under the CLI, which saves the subclass's own arguments
        m.hparams.pop(key, None)
    p = m.sampling_params(5)
    assert (p.n, p.max_new_tokens, p.temperature, p.seed) == (3, 40, 0.7, 5)
