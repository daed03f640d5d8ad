"""PolicySpec and PolicyModule: one spec for the policy, hyperparameters saved once for the whole subclass
chain, checkpoints that reload (weights-only) into the same module; the spec and the modules' constructors
refuse values outside their ranges with a UserError naming the argument."""
from dataclasses import asdict

import lightning.pytorch as pl
import pytest
import torch

from ttrl_lightning.data.datamodules import SFTDataModule
from ttrl_lightning.errors import UserError
from ttrl_lightning.modules import GRPOModule, PolicySpec, SFTModule
from ttrl_lightning.errors import Bounds
from ttrl_lightning.modules.specs import SamplingSpec


def test_policy_spec_from_mappings():
    spec = PolicySpec(model="tiny:llama", lr=0.5, betas=(0.8, 0.9), seed=4)
    assert PolicySpec.of(asdict(spec)) == spec
    assert PolicySpec.of({"lr": 0.5, "betas": [0.8, 0.9]}).betas == (0.8, 0.9)  # YAML lists become tuples
    assert PolicySpec.of(None) == PolicySpec()
    with pytest.raises(TypeError, match="unknown policy field"):
        PolicySpec.of({"learning_rate": 1.0})


class Tagged(SFTModule):
    """A subclass with one argument of its own: it writes no hyperparameter code."""

    def __init__(self, tag: str = "x", **kwargs):
        super().__init__(**kwargs)


def test_hyperparameters_of_the_whole_chain_saved_once():
    m = Tagged(tag="y", policy=PolicySpec(lr=0.5), w_act=3.0)
    assert m.hparams["tag"] == "y" and m.hparams["w_act"] == 3.0
    assert m.hparams["policy"] == asdict(PolicySpec(lr=0.5))  # plain data, not an object
    assert m.policy_spec == PolicySpec(lr=0.5)
    g = GRPOModule(policy=PolicySpec(seed=2), rewards=[lambda **kw: [0.0] * len(kw["completions"])])
    assert "rewards" not in g.hparams and "engine" not in g.hparams  # GRPOModule.unsaved_init_args
    assert g.hparams["policy"]["seed"] == 2 and g.hparams["policy"]["lr"] == 1e-3  # given spec: its own lr
    assert GRPOModule().policy_spec.lr == 1e-4  # GRPO's own default learning rate


def test_checkpoint_reloads_the_same_module(tmp_path):
    pl.seed_everything(0)
    spec = PolicySpec(model="tiny:qwen2", lr=1e-2, tiny_kwargs={"hidden": 16, "layers": 1}, seed=5)
    m = SFTModule(policy=spec, w_act=3.0)
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0)
    trainer.fit(m, SFTDataModule(task="arith", n_train=8, n_val=4, batch_size=4))
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    assert torch.load(path, weights_only=True)["hyper_parameters"]["policy"]["seed"] == 5
    loaded = SFTModule.load_from_checkpoint(path)
    assert loaded.policy_spec == spec and loaded.hparams["w_act"] == 3.0
    for (k, a), b in zip(m.policy.state_dict().items(), loaded.policy.state_dict().values()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("fields, message", [
    ({"lr": -1.0}, r"policy\.lr must be > 0, got -1\.0"),
    ({"lr": 0.0}, r"policy\.lr must be > 0"),
    ({"lr": float("nan")}, r"policy\.lr must be > 0, got nan"),
    ({"weight_decay": -0.1}, r"policy\.weight_decay must be >= 0"),
    ({"betas": (0.9, 1.0)}, r"policy\.betas must be two numbers in \[0, 1\)"),
    ({"betas": (0.9,)}, r"policy\.betas must be two numbers"),
    ({"dtype": "int8"},
     r"policy\.dtype must be one of float32, bfloat16, float16, float64 or null, got 'int8'"),
    ({"seed": 1.5}, r"policy\.seed must be an integer"),
    ({"model": ""}, r"policy\.model must be a model name or path"),
])
def test_policy_spec_refuses_values_outside_their_range(fields, message):
    with pytest.raises(UserError, match=message):
        PolicySpec(**fields)
    with pytest.raises(UserError, match=message):  # also from a config's mapping
        PolicySpec.of(fields)


def test_bounds_say_their_rule():
    assert 0.5 in Bounds(low=0, high=1, low_open=True) and 0 not in Bounds(low=0, high=1, low_open=True)
    assert 1 in Bounds(low=0, high=1, low_open=True) and True not in Bounds()  # a bool is not a number
    assert float("inf") not in Bounds() and None not in Bounds() and None in Bounds(optional=True)
    assert 2.5 not in Bounds(low=1, integer=True) and 3 in Bounds(low=1, integer=True)
    assert str(Bounds(low=0, high=1, high_open=True)) == "in [0, 1)"
    assert str(Bounds(low=1, integer=True)) == "an integer >= 1"
    assert str(Bounds(low=0, optional=True)) == ">= 0 or null"


def _zero_reward(**kw):
    return [0.0] * len(kw["completions"])


@pytest.mark.parametrize("kwargs, message", [
    ({"num_generations": 0}, r"GRPOModule argument num_generations must be an integer >= 1, got 0"),
    ({"sampling": {"temperature": -0.5}}, r"sampling.temperature must be >= 0, got -0\.5"),
    ({"sampling": {"top_p": 0.0}}, r"sampling.top_p must be in \(0, 1\], got 0\.0"),
    ({"sampling": {"top_p": 1.5}}, r"sampling.top_p must be in \(0, 1\]"),
    ({"sampling": {"top_k": -1}}, r"sampling.top_k must be an integer >= 0"),
    ({"sampling": {"max_new_tokens": 0}}, r"sampling.max_new_tokens must be an integer >= 1"),
    ({"grpo": {"eps_low": -0.1}}, r"grpo.eps_low must be >= 0"),
    ({"grpo": {"eps_high": float("nan")}}, r"grpo.eps_high must be >= 0, got nan"),
    ({"grpo": {"kl_coef": -1.0}}, r"grpo.kl_coef must be >= 0"),
    ({"grpo": {"num_iterations": 0}}, r"grpo.num_iterations must be an integer >= 1"),
    ({"grpo": {"max_grad_norm": -1.0}}, r"grpo.max_grad_norm must be >= 0 or null"),
    ({"grpo": {"reference": "ema"}}, r"grpo.reference must be one of initial, none, external, got 'ema'"),
    ({"grpo": {"loss_aggregation": "mean"}},
     r"grpo.loss_aggregation must be one of seq_mean, token_mean, got 'mean'"),
    ({"grpo": {"reference": "none", "kl_coef": 0.1}}, r"grpo.reference='none' needs grpo.kl_coef=0"),
    ({"grpo": {"logprob_impl": "chunked"}}, r"grpo.logprob_impl must be one of auto, fused, materialized"),
    ({"sampling": {"temprature": 1.0}}, r"unknown sampling field\(s\) \['temprature'\]; known: temperature, "),
    ({"sampling": {"stop": "\n"}}, r"sampling.stop must be a list of non-empty strings"),
    ({"grpo": 0.1}, r"grpo must be a GRPOSpec or a mapping, got float"),
    ({"reward_weights": [float("inf")]}, r"reward_weights must be finite numbers"),
    ({"rewards": ["nosuch"]}, r"unknown reward 'nosuch'; known: digits_only, exact_answer"),
    ({"rewards": [3]},
     r"a reward must be a registered name \(digits_only, exact_answer\) or a callable, got int"),
])
def test_grpo_refuses_arguments_outside_their_range(kwargs, message):
    kwargs = {"rewards": [_zero_reward], **kwargs}
    with pytest.raises(UserError, match=message):
        GRPOModule(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"w_act": 0.0}, r"SFTModule argument w_act must be > 0, got 0\.0"),
    ({"feedback_dropout": 1.0}, r"SFTModule argument feedback_dropout must be in \[0, 1\), got 1\.0"),
    ({"feedback_dropout": -0.1}, r"feedback_dropout must be in \[0, 1\)"),
    ({"hide_token": "<nope>"},
     r"SFTModule argument hide_token '<nope>' is not in the tokenizer's vocabulary"),
    ({"policy": PolicySpec(lr=1e-3), "w_act": float("inf")}, r"w_act must be > 0, got inf"),
])
def test_sft_refuses_arguments_outside_their_range(kwargs, message):
    with pytest.raises(UserError, match=message):
        SFTModule(**kwargs)


def test_lr_schedule_by_hand_in_a_manual_optimisation_run():
    """Cosine with 25% warm-up over 8 GRPO steps: the optimizer's lr at each step equals the formula."""
    import math

    import lightning.pytorch as pl

    from ttrl_lightning.data.datamodules import PromptDataModule
    from ttrl_lightning.modules import GRPOModule
    from ttrl_lightning.modules.base import lr_multiplier

    seen = []

    class Record(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    spec = PolicySpec(model="tiny:qwen2", lr=1e-3, lr_schedule="cosine", warmup_ratio=0.25)
    m = GRPOModule(policy=spec, num_generations=2, sampling=SamplingSpec(max_new_tokens=2))
    trainer = pl.Trainer(accelerator="cpu", max_steps=8, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         callbacks=[Record()])
    trainer.fit(m, PromptDataModule(n_train=16, batch_size=2))
    warm = 2
    expect = [1e-3 * ((s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / 6)))
              for s in range(8)]
    assert seen == pytest.approx(expect)
    assert [lr_multiplier("linear", s, 8, 0) for s in (0, 4, 8)] == [1.0, 0.5, 0.0]


def test_unknown_lr_schedule_names_the_field():
    from ttrl_lightning.errors import UserError

    with pytest.raises(UserError, match="policy.lr_schedule"):
        PolicySpec(lr_schedule="step")


def test_activation_checkpointing_must_be_a_bool():
    with pytest.raises(UserError, match=r"policy\.activation_checkpointing must be true or false, got 'yes'"):
        PolicySpec(activation_checkpointing="yes")
    assert PolicySpec(activation_checkpointing=True).activation_checkpointing is True
