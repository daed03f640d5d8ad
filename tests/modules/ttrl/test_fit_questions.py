"""`ttrl fit` refuses, before its first step, every training question the run cannot sample: a question file
with images for the agent engine (which takes its pixels from its AgentPrompts, and sampled such a file as text,
images dropped, even on a text-only model), and visconf's mix of image and text questions (refused only at the
step whose batch met it, after earlier steps had trained and saved). One line, exit 1, nothing trained."""
import json
import os

import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.cli.configs import config_path
from ttrl_lightning.generate.scene_questions import write_scene_questions


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch, tmp_path):
    monkeypatch.delenv("TTRL_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)  # nothing may land in the checkout


@pytest.fixture(scope="module")
def scene_file(tmp_path_factory):
    return write_scene_questions(str(tmp_path_factory.mktemp("scenes")), 4, seed=3, kinds=["colour"])


def _fit(model: str, path: str, root: str, *options: str) -> list[str]:
    return ["fit", "--config", config_path("ttrl/tiny_vlm_demo.yaml"), f"--model.init_args.policy.model={model}",
            "--model.init_args.voting.num_votes=2",
            "--model.init_args.voting.num_trained=1", "--model.init_args.sampling.max_new_tokens=2",
            "--model.init_args.calibrate=false", "--model.init_args.grpo.reference=none",
            "--model.init_args.grpo.kl_coef=0",
            f"--data.init_args.path={path}", "--data.init_args.val_path=null",
            "--data.init_args.calibration_path=null", "--data.init_args.batch_size=2",
            "--data.init_args.shuffle=false", "--trainer.max_steps=2", "--trainer.logger=false",
            "--trainer.callbacks=[]", f"--trainer.default_root_dir={root}", "--trainer.enable_progress_bar=false",
            *options]


def _one_line(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err, err[-3000:]
    line = err.strip().splitlines()[-1]
    assert line.startswith("ttrl fit: ")
    return line


def _checkpoints(root: str) -> list[str]:
    return [f for _, _, files in os.walk(root) for f in files if f.endswith(".ckpt")]


def test_the_agent_engine_refuses_a_question_file_with_images_before_training(scene_file, tmp_path, capsys):
    root = str(tmp_path / "run")
    rc = main(_fit("tiny:llama", scene_file, root, "--model.init_args.engine={name: agent, max_steps: 1, "
                   "max_turn_tokens: 2}"))
    line = _one_line(capsys, rc)
    assert f"{scene_file} (training questions), question 1 (id='colour-3-0'): has an image, but the rollout " \
           "engine AgentEngine does not sample a question's images" in line
    assert not _checkpoints(root)


def test_visconf_refuses_a_mix_of_image_and_text_questions_before_its_first_step(scene_file, tmp_path, capsys):
    """The first batch shows images only, the second mixes: the run used to train and save step 1, then stop."""
    rows = [json.loads(line) for line in open(scene_file)]
    rows[3].pop("image")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for r in rows[:3]:  # the image paths stay relative to the file
        os.makedirs(tmp_path / os.path.dirname(r["image"]), exist_ok=True)
        os.link(os.path.join(os.path.dirname(scene_file), r["image"]), tmp_path / r["image"])
    root = str(tmp_path / "run")
    rc = main(_fit("tiny:qwen2_vl", str(mixed), root, "--model.init_args.voting.labeler=visconf",
                   "--trainer.callbacks=[{class_path: lightning.pytorch.callbacks.ModelCheckpoint, "
                   "init_args: {save_last: true, every_n_train_steps: 1}}]"))
    line = _one_line(capsys, rc)
    assert f"{mixed} (training questions), question 1 (id='colour-3-0') has an image and {mixed} (training " \
           "questions), question 4 (id='colour-3-3') has none; visconf scores image questions" in line
    assert not _checkpoints(root)
