"""Test-time RL on questions with images (HF engine, tiny Qwen2-VL): the votes are sampled with their images,
visual engagement is recorded while sampling and equals eager attention maps, ``visconf`` scores image
questions by Z = V * C (checked by hand from full logits and eager attention), the policy scores the
completions with the images, a ``ttrl fit`` style run trains, and bad input is one line."""
import lightning.pytorch as pl
import pytest
import torch

from tests.integrations.test_scoring import _eager_reference
from ttrl_lightning.data.questions import QuestionDataModule, read_questions
from ttrl_lightning.errors import UserError
from ttrl_lightning.generate.scene_questions import write_scene_questions
from ttrl_lightning.integrations import GENERATED, IMAGE, PROMPT
from ttrl_lightning.modules import PolicySpec, TTRLModule
from ttrl_lightning.rollout import SamplingParams

VL = PolicySpec(model="tiny:qwen2_vl", lr=1e-3)


@pytest.fixture(scope="module")
def scene_file(tmp_path_factory):
    return write_scene_questions(str(tmp_path_factory.mktemp("scenes")), 4, seed=3, kinds=["colour", "shape"])


def _batch(path, k=2):
    qs = read_questions(path)[:k]
    return {key: [q[key] for q in qs] for key in ("id", "prompt", "gold", "choices", "images")}


def _module(labeler="visconf", **kw):
    m = TTRLModule(policy=VL, voting={"labeler": labeler, "num_votes": 4, "num_trained": 2}, calibrate=False,
                   sampling={"max_new_tokens": 8, "temperature": 1.0}, **kw)
    m.configure_model()
    return m


def _hand_visconf_scores(model, tokenizer, votes, rows):
    """Z_i = mean_t v_{i,t} * mean_t c_{i,t} from full logits and eager attention maps (VisConf sec. 3.1,
    4.1, 4.2), the confidence calibrated by the 5% / 95% quantiles of the pooled token self-certainty."""
    inputs = votes.forward_inputs()
    P = votes.prompt_ids.shape[1]
    batch = {**inputs, "completion_mask": torch.cat([torch.zeros_like(votes.prompt_mask), votes.completion_mask], 1)}
    _, _, sc, mass, _ = _eager_reference(model, batch, tokenizer)
    mass, sc = mass[:, P:], sc[:, P:]
    v = mass[..., IMAGE] / (mass[..., IMAGE] + mass[..., PROMPT] + mass[..., GENERATED])
    own = votes.completion_mask.bool()
    k = [sc[r][own[r]].double() for r in rows]
    pooled = torch.cat(k)
    lo, hi = torch.quantile(pooled, 0.05), torch.quantile(pooled, 0.95)
    cal = [((x - lo) / (hi - lo).clamp_min(1e-6)).clamp(0, 1) for x in k]
    return [float(v[r][own[r]].double().mean() * c.mean()) for r, c in zip(rows, cal)], v


def test_image_votes_carry_visual_engagement_equal_to_eager_attention_and_visconf_scores_v_times_c(scene_file):
    m = _module()
    batch = _batch(scene_file)
    votes = m.rollout(batch)
    assert votes.images and all(len(row) == 1 for row in votes.images)  # every row shows its question's image
    assert {"self_certainty", "visual_engagement"} <= set(votes.signals)
    scored = m.score(votes, batch)
    step = scored.detail
    M = m.voting.num_votes
    for q, label in enumerate(step.labels):
        assert label.info["signal"] == "visconf"
        rows = list(range(q * M, (q + 1) * M))
        hand, v_eager = _hand_visconf_scores(m.policy, m.tokenizer, votes, rows)
        # the quantile calibration divides by Q95 - Q05 of a tiny model's close values: float32 noise grows
        torch.testing.assert_close(torch.tensor(label.info["scores"]), torch.tensor(hand), rtol=5e-3, atol=1e-5)
        own = votes.completion_mask.bool()
        got = votes.signals["visual_engagement"]
        torch.testing.assert_close(got[own], v_eager[own].float(), rtol=1e-4, atol=1e-6)
        assert torch.isnan(got[~own]).all()
        assert float(got[own].std()) > 0  # it varies over tokens: not a constant passed through


def test_the_policy_scores_image_completions_with_their_images(scene_file):
    m = _module()
    votes = m.rollout(_batch(scene_file))
    logp = m.sequence_logprobs(m.policy, votes, temperature=1.0)
    own = votes.completion_mask.bool()
    torch.testing.assert_close(logp[own], votes.signals["logprob"][own], rtol=1e-4, atol=1e-4)
    blind = type(votes)(**{**votes.__dict__, "images": []})  # the same tokens without the pixels
    unseen = m.sequence_logprobs(m.policy, blind, temperature=1.0)
    assert float((unseen.detach()[own] - votes.signals["logprob"][own]).abs().max()) > 1e-3  # the pixels matter


def test_text_questions_keep_self_certainty_only():
    m = _module()
    batch = {"id": ["a"], "prompt": ["What colour is the sky?"], "gold": ["blue"], "choices": [None], "images": [[]]}
    votes = m.rollout(batch)
    assert not votes.images and "visual_engagement" not in votes.signals
    (label,) = m.score(votes, batch).detail.labels
    assert label.info["signal"] == "self_certainty_only"


def test_a_ttrl_run_trains_on_image_questions_and_validates_on_them(scene_file, tmp_path):
    # the random-reward control: a random tiny model writes no extractable answer, so a labeler would abstain
    m = TTRLModule(policy=VL, voting={"labeler": "random_reward", "num_votes": 4, "num_trained": 2}, calibrate=False,
                   sampling={"max_new_tokens": 6}, eval={"k": 2}, grpo={"kl_coef": 0.05})
    dm = QuestionDataModule(path=scene_file, n=4, batch_size=2, val_path=scene_file, n_val=2, seed=0)
    trainer = pl.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, val_check_interval=2,
                         check_val_every_n_epoch=None, num_sanity_val_steps=0, default_root_dir=str(tmp_path))
    m.configure_model()
    before = {k: v.detach().clone() for k, v in m.policy.named_parameters()}
    trainer.fit(m, dm)
    changed = [k for k, v in m.policy.named_parameters() if not torch.equal(v, before[k])]
    assert changed, "no parameter moved"
    metrics = trainer.callback_metrics
    assert "val/avg@2" in metrics and "train/reward" in metrics


def test_bad_image_input_is_one_line(scene_file):
    batch = _batch(scene_file)
    text_only = TTRLModule(policy=PolicySpec(model="tiny:qwen2"), voting={"num_votes": 2, "num_trained": 1},
                           calibrate=False)
    text_only.configure_model()
    with pytest.raises(UserError, match="text-only model"):
        text_only.rollout(batch)
    mixed = dict(batch, images=[batch["images"][0], []])
    with pytest.raises(UserError, match="has none; visconf scores image questions"):
        _module().rollout(mixed)
    with pytest.raises(UserError, match="prompt_format is plain"):
        _module(prompt_format="plain").rollout(batch)


def test_image_prompts_sample_reproducibly_from_their_seed(scene_file):
    m = _module()
    prompts = m.model_prompts(m.batch_prompts(_batch(scene_file)))
    params = SamplingParams(n=3, max_new_tokens=6, seed=11)
    a, b = (m.engine.generate(m.policy, prompts, params) for _ in range(2))
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    assert a.prompt_ids.shape[0] == 6 and a.group.tolist() == [0, 0, 0, 1, 1, 1]


def test_a_vision_language_folder_without_its_processor_is_one_line(scene_file, tmp_path, capsys):
    """A Qwen2-VL folder saved without its processor files: transformers' multi-line OSError became the
    one line of the folder, in TTRL (when the module is built: its engine is given the processor then) and in
    ttrl eval."""
    from ttrl_lightning.cli import main
    from ttrl_lightning.models import load_model, load_tokenizer

    tok = load_tokenizer("tiny:qwen2_vl")
    folder = str(tmp_path / "vl")
    load_model("tiny:qwen2_vl", tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    with pytest.raises(UserError, match=r"a vision-language model without a loadable processor"):
        TTRLModule(policy=PolicySpec(model=folder), voting={"num_votes": 2, "num_trained": 1}, calibrate=False)
    capsys.readouterr()
    rc = main(["eval", "--model", folder, "--data", scene_file, "--k", "2", "--max-new-tokens", "4", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "without a loadable processor" in err.strip().splitlines()[-1]


def test_a_resume_whose_processor_shows_images_otherwise_is_refused():
    """A resumed VLM run with other pixel bounds would train on image tokens it never sampled with: the run's
    image settings are in its checkpoint, and a resume with others is one UserError naming each setting."""
    m = _module()
    checkpoint = {}
    m.on_save_checkpoint(checkpoint)
    saved = checkpoint["image_settings"]
    assert saved["longest_edge"] == m.processor.image_processor.size.longest_edge and saved["patch_size"] == 14
    resumed = _module()
    resumed.on_load_checkpoint(dict(checkpoint))  # the same processor: fine
    import copy

    resumed.__dict__["_processor"] = copy.deepcopy(resumed.processor)  # others may share the loaded one
    resumed.processor.image_processor.size.longest_edge = 2 * saved["longest_edge"]
    with pytest.raises(UserError, match=r"longest_edge: checkpoint \d+, this run \d+"):
        resumed.on_load_checkpoint(dict(checkpoint))
    text = TTRLModule(policy=PolicySpec(model="tiny:qwen2"), calibrate=False)
    text.configure_model()
    plain = {}
    text.on_save_checkpoint(plain)
    assert "image_settings" not in plain and text.processor is None  # a text model has no processor
