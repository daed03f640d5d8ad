"""A question file of generated visual questions with known answers (``data.scenes``), for ``ttrl fit``,
``ttrl eval`` and ``ttrl generate``.

``write_scene_questions(folder, n, seed, kinds)`` draws ``n`` single-image scene tasks (cycling through
``kinds``; the clip tasks have frames, not one image, and are not offered), saves each image as
``images/{id}.png`` and writes ``questions.jsonl`` (or ``name``; ``id``, ``prompt``, ``gold``, ``image``: the
schema of ``data.questions``). The prompt asks for the answer in VisConf's format (``The answer is X.``), so
the default ``final_answer`` extractor reads it. Command line: ``ttrl questions --task scenes``::

    ttrl questions --task scenes --config '{"kinds": ["count", "colour"]}' --n 24 --out scenes/questions.jsonl
"""
from __future__ import annotations

import json
import os

from ..data.scene_qa import scene_qa_splits
from ..data.scenes import question_file_kinds, scene_kinds
from ..safe_files import atomic_write, atomic_write_path

__all__ = ["IMAGE_TASKS", "TOOL_IMAGE_TASKS", "write_scene_questions"]

#: the tool tasks with one image (``data.scenes.SCENE_TASKS``' ``tool`` family without its clips): the default kinds
TOOL_IMAGE_TASKS = scene_kinds("tool", clip=False)
#: every kind a question file can hold: those and the glance tasks (``data.scenes.question_file_kinds``)
IMAGE_TASKS = question_file_kinds()


def write_scene_questions(folder: str, n: int, seed: int = 0, kinds=TOOL_IMAGE_TASKS, exclude=(),
                          name: str = "questions.jsonl") -> str:
    """Write ``n`` distinct scene questions (module docstring) under ``folder`` as ``name``, none of them a
    question of the question files in ``exclude`` (same prompt and pixels: ``data.splits``); returns the
    question file's path."""
    from PIL import Image

    kinds = list(kinds)
    bad = [k for k in kinds if k not in IMAGE_TASKS]
    if bad or not kinds:
        raise ValueError(f"scene kinds must be among {IMAGE_TASKS}, got {kinds}")
    items = scene_qa_splits(seed, {"questions": n}, kinds, exclude)["questions"]
    os.makedirs(os.path.join(folder, "images"), exist_ok=True)
    rows = []
    for item in items:
        task, i = item["task"], item["index"]
        qid = f"{task.kind}-{seed}-{i}"
        image = os.path.join("images", f"{qid}.png")
        with atomic_write_path(os.path.join(folder, image)) as tmp:
            Image.fromarray(task.image).save(tmp, format="PNG")
        rows.append({"id": qid, "prompt": item["prompt"], "gold": task.answer, "image": image})
    path = os.path.join(folder, name)
    with atomic_write(path) as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return path
