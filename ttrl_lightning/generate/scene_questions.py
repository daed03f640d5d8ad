"""A question file of generated visual questions with known answers (``data.scenes``), for ``ttrl generate``.

``write_scene_questions(folder, n, seed, kinds)`` draws ``n`` single-image scene tasks (cycling through
``kinds``; the clip tasks have frames, not one image, and are not offered), saves each image as
``images/{id}.png`` and writes ``questions.jsonl`` (``id``, ``prompt``, ``gold``, ``image``: the schema of
``data.questions``). The prompt asks for the answer in VisConf's format (``The answer is X.``), so the
default ``final_answer`` extractor reads it. Command line::

    python -m ttrl_lightning.generate.scene_questions OUT_DIR [--n 24] [--seed 0] [--kinds count colour]
"""
from __future__ import annotations

import argparse
import json
import os

from ..data.scene_qa import scene_qa_splits
from ..data.scenes import GLANCE_TASKS
from ..safe_files import atomic_write, atomic_write_path

__all__ = ["IMAGE_TASKS", "TOOL_IMAGE_TASKS", "write_scene_questions"]

#: the tool tasks with one image (``data.scenes.SCENE_TASKS`` minus the clip tasks): the default kinds
TOOL_IMAGE_TASKS = ("count", "colour", "shape", "read", "read_small")
#: every kind a question file can hold: those and the glance tasks (``data.scenes.GLANCE_TASKS``)
IMAGE_TASKS = (*TOOL_IMAGE_TASKS, *GLANCE_TASKS.names())


def write_scene_questions(folder: str, n: int, seed: int = 0, kinds=TOOL_IMAGE_TASKS, exclude=()) -> str:
    """Write ``n`` distinct scene questions (module docstring) under ``folder``, none of them a question of the
    question files in ``exclude`` (same prompt and pixels: ``data.splits``); returns the question file's path."""
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
    path = os.path.join(folder, "questions.jsonl")
    with atomic_write(path) as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ttrl_lightning.generate.scene_questions",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--n", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", nargs="+", default=list(TOOL_IMAGE_TASKS), choices=IMAGE_TASKS)
    p.add_argument("--exclude", nargs="+", default=[], metavar="FILE", help="question files to share no question with")
    args = p.parse_args(argv)
    print(write_scene_questions(args.folder, args.n, args.seed, args.kinds, args.exclude))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
