"""Interrupt and resume TTRL mid-epoch: the resumed run ends with the same weights, EMA, PID state, labels,
baseline and acceptance counters as an uninterrupted run (majority; pixel with its dev-cal calibration)."""
import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ttrl_lightning.answers import ANSWER_EXTRACTORS, NO_ANSWER
from ttrl_lightning.callbacks import EMAAnchor, PIDKLController, RankStateDump
from ttrl_lightning.data.questions import QuestionDataModule
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec


@pytest.fixture(scope="module", autouse=True)
def first_character_answers():
    """A random tiny model writes no numbers: its first character is its "answer", so questions get labels."""
    ANSWER_EXTRACTORS.register("_test_first_char", lambda text, choices=None: text[:1] or NO_ANSWER)
    yield
    ANSWER_EXTRACTORS._items.pop("_test_first_char")


class KeepTTRLState(pl.Callback):
    def on_fit_end(self, trainer, pl_module):
        self.state = {"labels": list(pl_module.counters.label_history), "baseline": pl_module.baseline,
                      "seen": pl_module.counters.questions_seen, "accepted": pl_module.counters.questions_accepted,
                      "calibration": pl_module.calibration}


def _run(tmp, steps, labeler, calibrate, ckpt_path=None, save_every=None):
    from ttrl_lightning.modules import PolicySpec, TTRLModule

    pl.seed_everything(0)
    module = TTRLModule(policy=PolicySpec(model="tiny:qwen2", lr=5e-3, seed=0), 
                        voting={"labeler": labeler, "options": {"delta": 0.0} if labeler == "pixel" else None,
                                "num_votes": 6, "num_trained": 3, "answer_extractor": "_test_first_char"},
                        calibrate=calibrate,
                        sampling=SamplingSpec(max_new_tokens=4), grpo=GRPOSpec(kl_coef=0.1, reference="external"))
    keep = KeepTTRLState()
    cbs = [EMAAnchor(rho=0.9), PIDKLController(warmup_steps=2), RankStateDump(str(tmp / "dump")), keep]
    if save_every:
        cbs.append(ModelCheckpoint(dirpath=str(tmp / "ckpt"), every_n_train_steps=save_every, save_top_k=-1))
    trainer = pl.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                         enable_checkpointing=bool(save_every), callbacks=cbs)
    # 5 batches per shuffled epoch: the interruption at step 3 is mid-epoch, the run crosses an epoch boundary
    data = QuestionDataModule(task="arith", n=20, batch_size=4, seed=0, shuffle=True,
                              n_calibration=12 if labeler == "pixel" else None)
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return torch.load(tmp / "dump" / "rank0.pt", weights_only=False), keep.state


@pytest.mark.parametrize("labeler, calibrate", [
    ("majority", False),
    pytest.param("pixel", False, marks=pytest.mark.slow),
    pytest.param("pixel", True, marks=pytest.mark.slow),
])
def test_ttrl_resume_equals_uninterrupted(tmp_path, labeler, calibrate):
    full, full_state = _run(tmp_path / "full", 7, labeler, calibrate)
    _run(tmp_path / "part", 3, labeler, calibrate, save_every=3)
    ckpt = next((tmp_path / "part" / "ckpt").glob("*.ckpt"))
    resumed, resumed_state = _run(tmp_path / "part", 7, labeler, calibrate, ckpt_path=str(ckpt))
    assert full["global_step"] == resumed["global_step"] == 7
    for part in ("policy", "ema"):
        for k in full[part]:
            torch.testing.assert_close(full[part][k], resumed[part][k], rtol=0, atol=0, msg=k)
    assert full["pid"] == resumed["pid"] and full["kl_coef"] == resumed["kl_coef"]
    assert full_state == resumed_state
    assert len(full_state["labels"]) == 7 * 4 and full_state["seen"] == 28
    labelled = sum(label is not None for _, _, label in full_state["labels"])
    if calibrate:
        # fitted once on the 12 dev-cal questions and restored, not refitted, on resume (a random model
        # answers no dev-cal question right, so its conformal sets hold every answer: all questions abstain)
        assert full_state["calibration"]["num_questions"] == 12 and labelled == 0
        return
    assert full_state["calibration"] is None
    assert labelled >= 7 and full_state["accepted"] == labelled
    first = torch.load(ckpt, weights_only=False)["state_dict"]
    assert any(not torch.equal(first["policy." + k], full["policy"][k]) for k in full["policy"])
