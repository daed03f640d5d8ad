"""Direct-answer SFT traces of scene questions (ttrl_lightning/data/scene_qa.py): the prompt a trace trains on is
token for token the one test-time RL and ``ttrl eval`` show the model, only the answer carries loss, and the SFT
never sees a question of the files it is told to skip."""
import torch

from ttrl_lightning.data.datamodules import encode_trace
from ttrl_lightning.data.questions import read_questions
from ttrl_lightning.data.scene_qa import SceneQADataModule, scene_answer_trace, scene_qa_splits
from ttrl_lightning.data.splits import keys_of
from ttrl_lightning.generate.scene_questions import write_scene_questions
from ttrl_lightning.masking import IGNORE_INDEX
from ttrl_lightning.models import load_processor, load_tokenizer
from ttrl_lightning.prompt_format import format_prompt


def test_a_trace_is_the_ttrl_prompt_with_its_image_then_the_answer(tmp_path):
    tok, proc = load_tokenizer("tiny:qwen2_vl"), load_processor("tiny:qwen2_vl")
    path = write_scene_questions(str(tmp_path), 2, seed=4, kinds=["colour", "shape"])
    for q in read_questions(path):
        from PIL import Image

        image = Image.open(q["images"][0]).convert("RGB")
        enc = encode_trace(tok, scene_answer_trace(q["prompt"], image, q["gold"], tok, proc, tok.eos_token), proc)
        prompt = format_prompt(q["prompt"], "chat", tok, proc, images=1)  # as TTRLModule.model_prompts does
        expected = proc(text=[prompt], images=[[image]])["input_ids"][0].tolist()
        answer = tok(f"The answer is {q['gold']}." + tok.eos_token, add_special_tokens=False)["input_ids"]
        assert enc["input_ids"] == expected + answer
        labelled = [i for i, label in enumerate(enc["labels"]) if label != IGNORE_INDEX]
        assert labelled == list(range(len(expected), len(expected) + len(answer)))
        block = enc["images"][0]
        torch.testing.assert_close(block.pixel_values, proc(text=[prompt], images=[[image]])["pixel_values"])


def test_the_sft_split_skips_every_question_of_the_excluded_files(tmp_path):
    kinds = ["colour", "shape"]
    files = [write_scene_questions(str(tmp_path / "a"), 6, seed=9, kinds=kinds)]
    files.append(write_scene_questions(str(tmp_path / "b"), 6, seed=9, kinds=kinds, exclude=files))
    taken = set().union(*(keys_of(read_questions(p)) for p in files))
    # the same seed as the files: without the exclusion the first questions would be theirs
    items = scene_qa_splits(9, {"train": 16}, kinds, exclude=files)["train"]
    assert not keys_of([{"prompt": it["prompt"], "images": it["images"]} for it in items]) & taken
    assert keys_of(read_questions(files[0])) & keys_of([{"prompt": it["prompt"], "images": it["images"]} for it in
                                                         scene_qa_splits(9, {"train": 16}, kinds)["train"]])


def test_the_datamodule_batches_traces_with_their_pixels():
    tok, proc = load_tokenizer("tiny:qwen2_vl"), load_processor("tiny:qwen2_vl")
    dm = SceneQADataModule(n_train=4, n_val=2, batch_size=4, seed=1, tokenizer=tok, processor=proc)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[0] == 4 and batch["image_grid_thw"].shape == (4, 3)
    assert int((batch["input_ids"] == proc.image_token_id).sum()) == int(
        (batch["image_grid_thw"].prod(-1) // 4).sum())


def test_label_noise_makes_the_given_share_of_training_answers_wrong_among_the_kinds_answers():
    from types import SimpleNamespace

    import pytest

    from ttrl_lightning.data.scene_qa import noisy_answers
    from ttrl_lightning.errors import UserError

    colours, shapes = ["red", "green", "blue", "yellow"], ["circle", "square"]
    tasks = [SimpleNamespace(kind="colour", answer=colours[i % 4]) for i in range(3000)]
    tasks += [SimpleNamespace(kind="shape", answer=shapes[i % 2]) for i in range(1000)]
    assert noisy_answers(tasks, 0.0, 3) == [t.answer for t in tasks]
    noisy = noisy_answers(tasks, 0.25, 3)
    assert noisy == noisy_answers(tasks, 0.25, 3) and noisy != noisy_answers(tasks, 0.25, 4)
    wrong = [(t, a) for t, a in zip(tasks, noisy) if a != t.answer]
    assert 0.23 < len(wrong) / len(tasks) < 0.27  # binomial sd 0.007 at n = 4000
    assert all(a in (colours if t.kind == "colour" else shapes) for t, a in wrong)  # never across kinds
    # uniform among the kind's other answers: each other colour about a third of the flips of a colour
    from collections import Counter

    flips_of_red = Counter(a for t, a in wrong if t.answer == "red")
    assert set(flips_of_red) == {"green", "blue", "yellow"}
    assert min(flips_of_red.values()) > 0.2 * sum(flips_of_red.values())
    for bad in (-0.1, 1.0):
        with pytest.raises(UserError, match=r"label_noise must be"):
            noisy_answers(tasks, bad, 0)
        with pytest.raises(UserError, match=r"SceneQADataModule argument label_noise must be"):
            SceneQADataModule(label_noise=bad)


def test_label_noise_changes_training_answers_only():
    tok, proc = load_tokenizer("tiny:qwen2_vl"), load_processor("tiny:qwen2_vl")
    kw = dict(kinds=["object_colour"], n_train=24, n_val=8, batch_size=4, seed=2, tokenizer=tok, processor=proc)
    clean, noisy = SceneQADataModule(**kw), SceneQADataModule(label_noise=0.5, **kw)
    clean.setup(), noisy.setup()

    def answers(traces):
        return [tok.decode([t for t, label in zip(tr["input_ids"], tr["labels"]) if label != IGNORE_INDEX])
                for tr in traces]

    assert answers(clean._val) == answers(noisy._val)
    changed = [(a, b) for a, b in zip(answers(clean._train), answers(noisy._train)) if a != b]
    assert 4 <= len(changed) <= 20 and all(b.startswith("The answer is ") for _, b in changed)
