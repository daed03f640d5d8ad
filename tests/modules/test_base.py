"""PolicySpec and PolicyModule: one spec for the policy, hyperparameters saved once for the whole subclass
chain, checkpoints that reload (weights-only) into the same module."""
from dataclasses import asdict

import lightning.pytorch as pl
import pytest
import torch

from ttrl_lightning.data.datamodules import SFTDataModule
from ttrl_lightning.modules import GRPOModule, PolicySpec, SFTModule


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
