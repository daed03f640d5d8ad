"""The sampler of ``ttrl generate`` (ttrl_lightning/generate/sampler.py): pool records from one engine call, at
``--batch-size 1`` one (question, view) at a time on the HF engine with ``per_prompt_generate`` and its own seed.
Each pool is checked against an independent reference: ``generate`` on the prompt with ``num_return_sequences``
under the (question, view)'s seed for the texts, a teacher-forced replay for the signals."""
import pytest
import torch

from ttrl_lightning.cli import main
from ttrl_lightning.data.pool import read_records
from ttrl_lightning.data.questions import read_questions
from ttrl_lightning.generate import PromptBuilder, sample_sequences
from ttrl_lightning.generate.scene_questions import write_scene_questions
from ttrl_lightning.integrations import score_rollouts
from ttrl_lightning.models import load_model, load_processor, load_tokenizer
from ttrl_lightning.rollout import SamplingParams
from ttrl_lightning.seeding import derive_seed

SETTINGS = ["--n", "3", "--max-new-tokens", "5", "--temperature", "1.0", "--top-k", "0", "--top-p", "1.0",
            "--seed", "3", "--no-progress"]


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    return write_scene_questions(str(tmp_path_factory.mktemp("scenes")), 3, seed=1, kinds=["count", "colour"])


def _records(path):
    return {r["id"]: r for r in read_records(path)}


def test_one_question_at_a_time_is_generate_on_each_view_under_its_own_seed(tmp_path):
    """``--batch-size 1`` on a text model, both views: every (question, view)'s rollouts are ``generate``'s on
    that prompt alone (``num_return_sequences``) under ``derive_seed(seed, "generate", i, view)``, whatever
    the other questions, and the signals are a teacher-forced replay's."""
    data = tmp_path / "q.jsonl"
    data.write_text("".join(f'{{"id": "q{i}", "prompt": "{i}+{i + 3}=", "gold": "{2 * i + 3}"}}\n' for i in range(4)))
    out = str(tmp_path / "pool.jsonl")
    assert main(["generate", "--model", "tiny:qwen2", "--data", str(data), "--out", out, "--views", "original",
                 "reframed", "--batch-size", "1", *SETTINGS]) == 0
    records = _records(out)
    tok = load_tokenizer("tiny:qwen2")
    model = load_model("tiny:qwen2", tok, seed=3).eval()
    builder = PromptBuilder(tok, None)
    params = SamplingParams(n=3, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=5)
    for i, q in enumerate(read_questions(str(data))):
        for v, view in enumerate(("original", "reframed")):
            inputs = builder.inputs(q, view)
            seqs, _ = sample_sequences(model, tok, inputs, params, derive_seed(3, "generate", i, v))
            t0 = inputs["input_ids"].shape[1]
            rows = [ro for ro in records[q["id"]]["rollouts"] if ro["view"] == view]
            texts = [tok.decode(s[t0:t0 + ro["num_tokens"]], skip_special_tokens=True) for s, ro in zip(seqs, rows)]
            assert texts == [ro["text"] for ro in rows] and len(rows) == 3
            n, c = seqs.shape[0], seqs.shape[1] - t0
            comp = (torch.arange(c)[None, :] < torch.tensor([ro["num_tokens"] for ro in rows])[:, None]).long()
            batch = {"input_ids": seqs, "attention_mask": torch.cat([inputs["attention_mask"].repeat(n, 1), comp], 1),
                     "completion_mask": torch.cat([torch.zeros(n, t0, dtype=torch.long), comp], 1)}
            replay = score_rollouts(model, batch, tokenizer=tok)
            for name in ("logprob", "entropy", "self_certainty"):
                want = getattr(replay, name)[:, t0:]
                for r, ro in enumerate(rows):
                    torch.testing.assert_close(torch.tensor(ro[name]), want[r, :ro["num_tokens"]], atol=3e-5,
                                               rtol=1e-4)


def test_a_questions_rollouts_do_not_depend_on_the_others_at_batch_size_one(tmp_path):
    """The same question sampled in a file of 4 and, alone at the same position, in a file where the others
    differ: the same rollouts (its seed is its position's, not the batch's)."""
    rows = [{"id": f"q{i}", "prompt": f"{i}*2=", "gold": str(2 * i)} for i in range(4)]
    other = [dict(r, prompt=f"{r['prompt']} ok") if r["id"] != "q2" else r for r in rows]
    pools = []
    for name, qs in (("a", rows), ("b", other)):
        data = tmp_path / f"{name}.jsonl"
        data.write_text("".join(__import__("json").dumps(q) + "\n" for q in qs))
        out = str(tmp_path / f"{name}.pool.jsonl")
        assert main(["generate", "--model", "tiny:qwen2", "--data", str(data), "--out", out, "--batch-size", "1",
                     *SETTINGS]) == 0
        pools.append(_records(out))
    assert pools[0]["q2"]["rollouts"] == pools[1]["q2"]["rollouts"]
    assert pools[0]["q1"]["rollouts"] != pools[1]["q1"]["rollouts"]


def test_batched_hf_generation_samples_image_questions_with_their_images(scenes, tmp_path):
    """--batch-size 2 on the HF engine: a batch's image prompts go through the engine's image path (the pool's
    texts are the engine's on the batch's requests with its seed), and every per-token signal of the pool
    equals a teacher-forced replay of those rollouts with their images (``Rollouts.forward_inputs``)."""
    from ttrl_lightning.rollout import HFGenerateEngine

    out = str(tmp_path / "pool.jsonl")
    assert main(["generate", "--model", "tiny:qwen2_vl", "--data", scenes, "--out", out, "--batch-size", "2",
                 *SETTINGS]) == 0
    records = _records(out)
    tok, proc = load_tokenizer("tiny:qwen2_vl"), load_processor("tiny:qwen2_vl")
    model = load_model("tiny:qwen2_vl", tok, seed=3).eval()
    builder = PromptBuilder(tok, proc)
    questions = read_questions(scenes)[:2]  # the first batch
    prompts = [builder.request(q, "original") for q in questions]
    params = SamplingParams(n=3, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=5,
                            seed=derive_seed(3, "generate_batch", 0, 2))
    ro = HFGenerateEngine(tok, record_signals=True, processor=proc).generate(model, prompts, params)
    assert ro.texts == [r["text"] for q in questions for r in records[q["id"]]["rollouts"]]
    P = ro.prompt_ids.shape[1]
    batch = {**ro.forward_inputs(), "completion_mask": torch.cat([torch.zeros_like(ro.prompt_mask),
                                                                  ro.completion_mask], 1)}
    replay = score_rollouts(model, batch, tokenizer=tok)
    rows = [r for q in questions for r in records[q["id"]]["rollouts"]]
    for name in ("logprob", "entropy", "self_certainty", "visual_engagement", "image_attention"):
        want = getattr(replay, name)[:, P:]
        for i, r in enumerate(rows):
            n = r["num_tokens"]
            torch.testing.assert_close(torch.tensor(r[name]), want[i, :n], atol=3e-5, rtol=1e-4)
