"""Question files and QuestionDataModule (ttrl_lightning/data/questions.py): what a good file reads as, what
each bad row is refused with (file, row and field named, one line), generated questions, resumable batches.
Every file is generated here."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from ttrl_lightning.data.datamodules import ResumableDataLoader
from ttrl_lightning.data.questions import (QUESTION_KEYS, QuestionDataModule, QuestionError, collate_questions,
                                           questions_from_task, read_questions)
from ttrl_lightning.data.tasks import generate_prompts
from ttrl_lightning.errors import UserError


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _png(path, size=(4, 3)):
    Image.new("RGB", size, (10, 20, 30)).save(path)
    return path


def _refused(path, match):
    with pytest.raises(QuestionError, match=match) as err:
        read_questions(path)
    assert isinstance(err.value, UserError) and "\n" not in str(err.value)
    return str(err.value)


def test_reads_every_column_into_the_question_shape(tmp_path):
    (tmp_path / "img").mkdir()
    _png(tmp_path / "img" / "a.png")
    _png(tmp_path / "b.png")
    path = _jsonl(tmp_path / "q.jsonl", [
        {"id": 7, "question": "What is 2+2?", "gold": 4},
        {"id": "mc", "prompt": "Pick one", "gold": "B", "choices": {"A": "cat", "B": "dog"}, "image": "img/a.png",
         "reframed_prompt": "Choose an option"},
        {"id": "two", "prompt": "Compare", "image": ["img/a.png", "b.png"], "gold": None},
    ])
    qs = read_questions(path)
    assert [tuple(q) for q in qs] == [QUESTION_KEYS] * 3
    assert qs[0] == {"id": "7", "prompt": "What is 2+2?", "gold": "4", "choices": None, "images": [],
                     "reframed_prompt": None, "generator": None}
    assert qs[1]["choices"] == {"A": "cat", "B": "dog"} and qs[1]["reframed_prompt"] == "Choose an option"
    assert qs[1]["images"] == [str(tmp_path / "img" / "a.png")]  # resolved against the file's folder
    assert qs[2]["images"] == [str(tmp_path / "img" / "a.png"), str(tmp_path / "b.png")]
    assert qs[2]["gold"] is None


def test_parquet_reads_like_jsonl_and_names_rows_from_zero(tmp_path):
    table = pa.table({"id": ["a", "b"], "prompt": ["1+1=", "pick"], "gold": ["2", "A"],
                      "choices": pa.array([None, [("A", "x"), ("B", "y")]], type=pa.map_(pa.string(), pa.string()))})
    path = str(tmp_path / "q.parquet")
    pq.write_table(table, path)
    qs = read_questions(path)
    assert [q["id"] for q in qs] == ["a", "b"] and qs[1]["choices"] == {"A": "x", "B": "y"}
    assert qs[0] == {"id": "a", "prompt": "1+1=", "gold": "2", "choices": None, "images": [], "reframed_prompt": None,
                     "generator": None}
    bad = str(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"id": ["a", "b"], "prompt": ["x", ""]}), bad)
    _refused(bad, r"bad\.parquet, row 1 \(id='b'\): field 'prompt' is empty")


@pytest.mark.parametrize("rows, match", [
    ([{"id": "a", "gold": "1"}], r"line 1 \(id='a'\): missing field 'prompt' \(or 'question'\)"),
    ([{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "  "}], r"line 2 \(id='b'\): field 'prompt' is empty"),
    ([{"id": "a", "prompt": "x", "question": "y"}], r"line 1 \(id='a'\): has both 'prompt' and 'question'"),
    ([{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"}, {"id": "a", "prompt": "z"}],
     r"line 3 \(id='a'\): duplicate id 'a', already used by line 1"),
    ([{"id": 1, "prompt": "x"}, {"id": "1", "prompt": "y"}], r"line 2 \(id='1'\): duplicate id '1', already used by line 1"),
    ([{"id": "a", "prompt": "x", "answer": "3"}], r"line 1 \(id='a'\): unknown field 'answer' \(the gold answer's column is 'gold'\)"),
    ([{"id": "a", "prompt": "x", "difficulty": 3}], r"line 1 \(id='a'\): unknown field 'difficulty'; a question has id, prompt"),
    ([{"prompt": "x"}], r"line 1: missing field 'id'"),
    ([{"id": True, "prompt": "x"}], r"line 1: field 'id' must be a string or an integer, got boolean true"),
    ([{"id": "a", "prompt": 3}], r"line 1 \(id='a'\): field 'prompt' must be a string, got integer 3"),
    ([{"id": "a", "prompt": "x", "gold": 0.5}], r"field 'gold' must be a string, an integer or null, got number 0\.5"),
    ([{"id": "a", "prompt": "x", "choices": ["cat", "dog"]}], r"line 1 \(id='a'\): field 'choices' must map option letters"),
    ([{"id": "a", "prompt": "x", "image": 3}], r"field 'image' must be a path or a list of paths, got integer 3"),
    ([{"id": "a", "prompt": "x", "reframed_prompt": ""}], r"field 'reframed_prompt' is empty"),
    ([{"id": "a", "prompt": "x"}, "[1, 2]"], r"line 2: must be a JSON object, got array"),
    ([{"id": "a", "prompt": "x"}, '{"id": "b", "prompt": }'], r"q\.jsonl, line 2: invalid JSON at column"),
    ([{"id": "a", "prompt": "x"}, '{"id": "b", "id": "c", "prompt": "y"}'], r"line 2: key 'id' is given twice"),
    ([], r"q\.jsonl: the file has no questions"),
    ([{"id": "a", "prompt": "x"}, '{"id": "b", "prompt": "2+2=\\ud800"}'],
     r"line 2 \(id='b'\): field 'prompt' holds a lone surrogate \('\\ud800' at character 4\), which is not text"),
    (['{"id": "a", "prompt": "x", "gold": "\\udfff"}'], r"field 'gold' holds a lone surrogate"),
])
def test_bad_rows_name_file_line_and_field(tmp_path, rows, match):
    message = _refused(_jsonl(tmp_path / "q.jsonl", rows), match)
    assert message.startswith(str(tmp_path / "q.jsonl"))


def test_images_missing_or_unreadable_are_named(tmp_path):
    _png(tmp_path / "ok.png")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    path = _jsonl(tmp_path / "q.jsonl", [{"id": "a", "prompt": "x", "image": "ok.png"},
                                         {"id": "b", "prompt": "y", "image": ["ok.png", "gone.png"]}])
    _refused(path, rf"line 2 \(id='b'\): field 'image\[1\]': image {tmp_path / 'gone.png'} not found")
    path = _jsonl(tmp_path / "q.jsonl", [{"id": "c", "prompt": "y", "image": "broken.png"}])
    _refused(path, rf"line 1 \(id='c'\): field 'image': image {tmp_path / 'broken.png'} is not readable")


def _png_header_only(path, width, height):
    """A PNG whose header claims ``width x height`` pixels (what PIL checks on open; no pixel data)."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))


@pytest.mark.parametrize("width, height", [(15_000, 12_000), (10_000, 10_000)])  # 180 and 100 megapixels
def test_a_decompression_bomb_image_is_one_line(tmp_path, width, height):
    """180 megapixels was a DecompressionBombError traceback; 100 (above PIL's limit, below twice it) decoded
    with a warning. Both are refused naming the row, before any pixel is decoded."""
    _png_header_only(tmp_path / "bomb.png", width, height)
    path = _jsonl(tmp_path / "q.jsonl", [{"id": "a", "prompt": "x", "image": "bomb.png"}])
    _refused(path, rf"line 1 \(id='a'\): field 'image': image {tmp_path / 'bomb.png'} is too large to decode "
                   rf"safely \(Image size \({width * height} pixels\) exceeds limit of \d+ pixels.*the limit "
                   r"is PIL\.Image\.MAX_IMAGE_PIXELS")


def test_bytes_and_misnamed_files(tmp_path):
    raw = tmp_path / "latin.jsonl"
    raw.write_bytes(b'{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "caf\xe9"}\n')
    _refused(str(raw), r"latin\.jsonl, line 2: not valid UTF-8")
    pq.write_table(pa.table({"id": ["a"], "prompt": ["x"]}), str(tmp_path / "p.parquet"))
    (tmp_path / "p.jsonl").write_bytes((tmp_path / "p.parquet").read_bytes())
    _refused(str(tmp_path / "p.jsonl"), r"p\.jsonl: not a JSONL file: it looks like a Parquet file")
    _jsonl(tmp_path / "j.parquet", [{"id": "a", "prompt": "x"}])
    _refused(str(tmp_path / "j.parquet"), r"j\.parquet: not a Parquet file: it looks like JSONL")
    _refused(str(tmp_path / "none.jsonl"), r"none\.jsonl: question file not found")


def test_questions_from_task_are_the_generated_prompts():
    qs = questions_from_task("arith3", 5, seed=4, max_operand=9)
    ref = generate_prompts("arith3", 5, 4, max_operand=9)
    assert [q["id"] for q in qs] == [f"arith3-4-{i}" for i in range(5)]
    assert [(q["prompt"], q["gold"]) for q in qs] == [(r["prompt"], r["gold"]) for r in ref]
    assert all(q["choices"] is None and q["images"] == [] and q["reframed_prompt"] is None for q in qs)
    assert [tuple(q) for q in qs] == [QUESTION_KEYS] * 5


def _ids(loader):
    return [b["id"] for b in loader]


def test_train_loader_resumes_mid_epoch_with_the_same_batches(tmp_path):
    """Shuffled: an interrupted epoch continued by a fresh loader from its state yields exactly the batches the
    uninterrupted loader yields after that point; the permutation differs between epochs."""
    path = _jsonl(tmp_path / "q.jsonl", [{"id": f"q{i}", "prompt": f"{i}+1=", "gold": str(i + 1)} for i in range(10)])
    dm = QuestionDataModule(path=path, batch_size=3, seed=5)
    full = dm.train_dataloader()
    assert isinstance(full, ResumableDataLoader)
    full.sampler.set_epoch(1)
    expected = _ids(full)
    assert len(expected) == 4 and sorted(sum(expected, [])) == sorted(f"q{i}" for i in range(10))
    first = QuestionDataModule(path=path, batch_size=3, seed=5).train_dataloader()
    first.sampler.set_epoch(1)
    it = iter(first)
    seen = [next(it)["id"], next(it)["id"]]
    state = first.state_dict()
    resumed = QuestionDataModule(path=path, batch_size=3, seed=5).train_dataloader()
    resumed.load_state_dict(state)
    resumed.sampler.set_epoch(1)
    assert state == {"yielded": 2} and seen + _ids(resumed) == expected
    full.sampler.set_epoch(2)
    assert _ids(full) != expected


def test_stream_order_and_batch_shape(tmp_path):
    rows = [{"id": f"q{i}", "prompt": f"p{i}"} for i in range(5)]
    rows[1].update(gold="3", choices={"A": "x"})
    path = _jsonl(tmp_path / "q.jsonl", rows)
    batches = list(QuestionDataModule(path=path, batch_size=2, shuffle=False).train_dataloader())
    assert [b["id"] for b in batches] == [["q0", "q1"], ["q2", "q3"], ["q4"]]  # file order, once
    assert set(batches[0]) == {"id", "prompt", "gold", "choices", "images", "reframed_prompt"}
    assert batches[0]["gold"] == [None, "3"] and batches[0]["choices"] == [None, {"A": "x"}]
    assert batches[0]["images"] == [[], []] and batches[0]["reframed_prompt"] == [None, None]
    assert collate_questions(read_questions(path)[:1])["prompt"] == ["p0"]


def test_task_source_validation_and_calibration_splits(tmp_path):
    dm = QuestionDataModule(task="arith", n=6, n_val=3, val_task="arith", n_calibration=4, seed=2, batch_size=4)
    # one stream (seed 2) read in order, repeats skipped, cut into train, validation, calibration
    stream = generate_prompts("arith", 200, 2)
    distinct = list({p["prompt"]: (i, p) for i, p in reversed(list(enumerate(stream)))}.values())[::-1]
    distinct = sorted(distinct, key=lambda ip: ip[0])
    expected = [f"arith-2-{i}" for i, _ in distinct[:13]]
    assert [q["id"] for q in dm.train_questions()] == expected[:6]
    assert [q["id"] for q in dm.val_questions()] == expected[6:9]
    cal = dm.calibration_questions()
    assert [q["id"] for q in cal] == expected[9:13]
    assert [q["gold"] for q in cal] == [p["gold"] for _, p in distinct[9:13]]
    prompts = [q["prompt"] for q in dm.train_questions() + dm.val_questions() + cal]
    assert len(set(prompts)) == 13
    val = list(dm.val_dataloader())
    assert [b["id"] for b in val] == [expected[6:9]]
    assert QuestionDataModule(task="arith", n=2).val_dataloader() == []
    assert QuestionDataModule(task="arith", n=2).calibration_questions() == []

    cal_path = _jsonl(tmp_path / "cal.jsonl", [{"id": "c1", "prompt": "x", "gold": "1"},
                                               {"id": "c2", "prompt": "y", "gold": "2"},
                                               {"id": "c3", "prompt": "z"}])
    dm = QuestionDataModule(task="arith", n=2, calibration_path=cal_path, n_calibration=2)
    assert [q["id"] for q in dm.calibration_questions()] == ["c1", "c2"]
    with pytest.raises(QuestionError, match=r"cal\.jsonl: the calibration split must be labelled, but 1 "
                                            r"question\(s\) have no gold: 'c3'"):
        QuestionDataModule(task="arith", n=2, calibration_path=cal_path).calibration_questions()


@pytest.mark.parametrize("kwargs, match", [
    ({}, "exactly one of path and task, got neither"),
    ({"path": "q.jsonl", "task": "arith"}, "exactly one of path and task, got both"),
    ({"task": "arith", "val_path": "v.jsonl", "val_task": "arith"}, "at most one of val_path and val_task"),
    ({"task": "arith", "batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
    ({"task": "arith", "n": True}, "n must be an integer >= 1, got True"),
    ({"task": "arith", "n_calibration": -1}, "n_calibration must be an integer >= 0 or null"),
    ({"path": "q.jsonl", "n_calibration": 3}, "n_calibration needs calibration_path"),
])
def test_datamodule_arguments_are_checked(kwargs, match):
    with pytest.raises(UserError, match=match):
        QuestionDataModule(**kwargs)


def test_a_bad_file_is_refused_when_the_datamodule_loads_it(tmp_path):
    path = _jsonl(tmp_path / "q.jsonl", [{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}])
    with pytest.raises(QuestionError, match=r"q\.jsonl, line 2 \(id='a'\): duplicate id 'a', already used by line 1"):
        QuestionDataModule(path=path).setup("fit")
