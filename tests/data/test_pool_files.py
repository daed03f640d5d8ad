"""Pool files (ttrl_lightning/data/pool.py): what a bad file is refused with, and writes that lose nothing.

Every bad file is generated here; each refusal is a one-line ``PoolError`` naming the file, the record
(line of a JSONL file, row of a Parquet file, and id) and the field.
"""
import json
import os
import threading

import pytest

from ttrl_lightning.data.pool import PoolError, load_pool, pool_to_records, read_records, write_records
from ttrl_lightning.data.simulate import simulate_pool


def _records(n=3, **kw):
    pool = simulate_pool(num_questions=n, rollouts=2, tokens=3, seed=kw.pop("seed", 0), **kw)
    return list(pool_to_records(pool))


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _refused(path, match):
    """Both readers (streaming records, and the columnar loader of `ttrl bon`) refuse with one line."""
    for read in (lambda p: list(read_records(p)), load_pool):
        with pytest.raises(PoolError, match=match) as err:
            read(path)
        assert "\n" not in str(err.value)
    return str(err.value)


def test_non_utf8_bytes_name_file_and_line(tmp_path):
    lines = [json.dumps(r).encode() for r in _records()]
    lines[1] = lines[1].replace(b'"id"', b'"i\xff\xfed"', 1)
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    _refused(str(path), r"latin\.jsonl, line 2: not valid UTF-8 \(byte 4 of the line is b'\\xff'\)")


def test_huge_integer_names_record_and_field(tmp_path):
    text = json.dumps(_records()[0]).replace('"entropy": [', '"entropy": [' + "1" + "0" * 400 + ", ", 1)
    path = tmp_path / "big.jsonl"
    path.write_text(text + "\n")
    _refused(str(path), r"big\.jsonl, line 1 \(id='sim-000000'\): rollouts\[0\]\.entropy\[0\] is an "
                        r"integer too large for float32")
    path.write_text(text.replace("1" + "0" * 400, "1" + "0" * 5000) + "\n")  # past Python's int-digit limit
    _refused(str(path), r"big\.jsonl, line 1: invalid JSON")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_json_literals_are_refused(tmp_path, literal):
    recs = _records()
    text = json.dumps(recs[2]).replace('"logprob": [', f'"logprob": [{literal}, ', 1)
    path = _jsonl(tmp_path / "lit.jsonl", recs[:2])
    with open(path, "a") as fh:
        fh.write(text + "\n")
    _refused(path, r"lit\.jsonl, line 3 \(id='sim-000002'\): rollouts\[0\]\.logprob holds (NaN|-?inf) "
                   r"at token 0")


def test_misnamed_files_say_what_they_look_like(tmp_path):
    recs = _records()
    real_parquet = str(tmp_path / "real.parquet")
    write_records(recs, real_parquet)
    named_jsonl = tmp_path / "pool.jsonl"
    named_jsonl.write_bytes(open(real_parquet, "rb").read())
    _refused(str(named_jsonl), r"pool\.jsonl: not a JSONL file: it looks like a Parquet file .*name it "
                               r"\.parquet")
    named_parquet = tmp_path / "pool.parquet"
    named_parquet.write_text("".join(json.dumps(r) + "\n" for r in recs))
    _refused(str(named_parquet), r"pool\.parquet: not a Parquet file: it looks like JSONL .*name it \.jsonl")
    truncated = tmp_path / "cut.parquet"
    truncated.write_bytes(open(real_parquet, "rb").read()[:-20])
    _refused(str(truncated), r"cut\.parquet: not a readable Parquet file")
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    _refused(str(empty), r"empty\.parquet: not a Parquet file: it is empty")


def test_parquet_records_are_named_by_row_and_id(tmp_path):
    recs = _records()
    recs[1]["rollouts"][0]["image_attention"][1] = 1.5
    path = str(tmp_path / "p.parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(recs), path)  # written around write_records, which would refuse it
    _refused(path, r"p\.parquet, row 1 \(id='sim-000001'\): rollouts\[0\]\.image_attention\[1\] = 1\.5 "
                   r"is outside \[0, 1\]")


def test_file_level_rules(tmp_path):
    recs = _records(4)
    _refused(_jsonl(tmp_path / "dup.jsonl", recs + [recs[1]]),
             r"dup\.jsonl, line 5 \(id='sim-000001'\): duplicate id 'sim-000001', already used by line 2")
    key_twice = json.dumps(recs[0]).replace('{"id": "sim-000000"', '{"id": "sim-000000", "id": "x"', 1)
    (tmp_path / "keys.jsonl").write_text(key_twice + "\n")
    _refused(str(tmp_path / "keys.jsonl"), r"keys\.jsonl, line 1: key 'id' is given twice in one object")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    _refused(str(tmp_path / "empty.jsonl"), r"empty\.jsonl: the pool has no records")
    _refused(str(tmp_path / "missing.jsonl"), r"missing\.jsonl: pool file not found")
    text = "".join(json.dumps(r) + "\n" for r in recs)
    (tmp_path / "cut.jsonl").write_text(text[: len(text) - 40])  # truncated inside the last record
    _refused(str(tmp_path / "cut.jsonl"), r"cut\.jsonl, line 4: invalid JSON at column \d+")
    bare = recs[2]
    for ro in bare["rollouts"]:
        ro.pop("visual_engagement", None)
    _refused(_jsonl(tmp_path / "sig.jsonl", recs),
             r"sig\.jsonl, line 3 \(id='sim-000002'\): lacks per-token 'visual_engagement', which line 1 "
             r"\(id='sim-000000'\) has")


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_failed_write_leaves_the_previous_file_byte_identical(tmp_path, ext):
    """A record that fails validation halfway through the iterator: nothing of the old file is lost, no
    temporary file is left behind."""
    path = str(tmp_path / f"pool.{ext}")
    write_records(_records(3), path)
    before = open(path, "rb").read()
    bad = _records(3, seed=1)
    bad[2]["rollouts"][1]["entropy"][0] = float("nan")
    produced = []

    def records():
        for rec in bad:
            produced.append(rec["id"])
            yield rec

    with pytest.raises(PoolError, match=r"record 2 \(id='sim-000002'\): rollouts\[1\]\.entropy holds NaN"):
        write_records(records(), path)
    assert produced == ["sim-000000", "sim-000001", "sim-000002"]  # 2 records consumed, then the 3rd failed
    assert open(path, "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == [f"pool.{ext}"]
    with pytest.raises(PoolError, match="duplicate id"):  # a pool-level rule fails the same way
        write_records(_records(2, seed=2) + _records(1, seed=2), path)
    assert open(path, "rb").read() == before


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_concurrent_writers_of_one_path_both_succeed(tmp_path, ext):
    """Two writers of the same path (unique temporaries, atomic rename): both finish without error and the
    file is one of the two complete outputs, never a mix or a truncation."""
    path = str(tmp_path / f"pool.{ext}")
    outputs = {}
    for seed in (1, 2):
        single = str(tmp_path / f"alone{seed}.{ext}")
        write_records(_records(40, seed=seed), single)
        outputs[seed] = open(single, "rb").read()
    assert outputs[1] != outputs[2]
    start, errors = threading.Barrier(2), []

    def writer(seed):
        try:
            recs = _records(40, seed=seed)
            start.wait()
            for _ in range(5):
                write_records(recs, path)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert open(path, "rb").read() in (outputs[1], outputs[2])
    assert sorted(os.listdir(tmp_path)) == sorted([f"pool.{ext}", f"alone1.{ext}", f"alone2.{ext}"])
