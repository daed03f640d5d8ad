"""ExemplarIndex (ttrl_lightning/retrieval/index.py): exact answers against numpy, leakage control under random
inserts / whitelists / blocks / queries, append-only adds, save / load and refused files."""
import io
import json
import logging
import zipfile

import numpy as np
import pytest

pytest.importorskip("faiss")

from ttrl_lightning.errors import UserError  # noqa: E402
from ttrl_lightning.retrieval import ExemplarIndex, IndexFileError  # noqa: E402


def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _brute(x, ids, q, k, allowed=None):
    """Reference: cosine by numpy over the allowed rows, ties by ingest order."""
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    out = []
    for row in qn:
        s = xn @ row
        order = [i for i in np.lexsort((np.arange(len(s)), -s)) if allowed is None or ids[i] in allowed][:k]
        out.append([(ids[i], float(s[i])) for i in order])
    return out


@pytest.mark.parametrize("factory", ["Flat", "IVF8,Flat"])
def test_exact_factories_match_numpy(factory):
    """Flat, and IVF probing every list (nprobe 32 >= 8 lists), return numpy's neighbours and cosines."""
    rng = np.random.default_rng(0)
    x = 3.0 * rng.standard_normal((600, 16)).astype(np.float32)  # not unit: the index normalises
    ids = [f"x{i}" for i in range(600)]
    index = ExemplarIndex(16, factory)
    index.add(ids, x)
    q = rng.standard_normal((20, 16)).astype(np.float32)
    got, want = index.search(q, 7), _brute(x, ids, q, 7)
    assert [[i for i, _ in r] for r in got] == [[i for i, _ in r] for r in want]
    np.testing.assert_allclose([[s for _, s in r] for r in got], [[s for _, s in r] for r in want], atol=1e-5)


def test_compressed_index_reranks_with_exact_cosine(pq_index):
    """IVF-PQ candidates are re-scored exactly: every returned score equals numpy's cosine for that id, and
    the top-1 of a stored key is itself (score 1)."""
    index, x = pq_index
    got = index.search(x[:50], 5)
    for row, hits in enumerate(got):
        assert hits[0] == (f"s{row}", pytest.approx(1.0, abs=1e-5))
        for item, score in hits:
            assert score == pytest.approx(float(x[int(item[1:])] @ x[row]), abs=1e-5)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def test_hnsw_option_and_auto_notice(caplog):
    rng = np.random.default_rng(2)
    x = _unit(rng, 800, 24)
    ids = [f"x{i}" for i in range(800)]
    hnsw = ExemplarIndex(24, "hnsw")
    hnsw.add(ids, x)
    assert hnsw.train() == "HNSW32"
    recall = np.mean([len({i for i, _ in a} & {i for i, _ in b}) / 10
                      for a, b in zip(hnsw.search(x[:40] + 0.1, 10), _brute(x, ids, x[:40] + 0.1, 10))])
    assert recall >= 0.9
    auto = ExemplarIndex(24)
    auto.add(ids, x)
    with caplog.at_level(logging.WARNING, logger="ttrl_lightning.retrieval.factory"):
        assert auto.train() == "Flat"
    assert "'auto' -> 'Flat' for 800 training vectors" in caplog.text


def test_property_no_whitelisted_or_blocked_item_is_ever_returned():
    """Random rounds of inserts (some ids whitelisted up front, some whitelisted or blocked later, some blocked
    before they arrive) and random queries on three index kinds: no returned id is ever whitelisted or blocked,
    and every other id that numpy ranks in the top-k over the allowed items is returned (Flat: exactly)."""
    rng = np.random.default_rng(3)
    returned_forbidden = checked = 0
    for trial, factory in enumerate(["Flat", "IVF4,Flat", "HNSW8"] * 4):
        d = int(rng.integers(4, 12))
        pool = [f"t{trial}-{i}" for i in range(400)]
        white = set(rng.choice(pool, 40, replace=False))
        index = ExemplarIndex(d, factory, whitelist=white)
        index.block(rng.choice(pool, 20, replace=False))
        stored, stored_ids = [], []
        order = rng.permutation(len(pool))
        for chunk in np.array_split(order, 5):
            ids = [pool[i] for i in chunk]
            x = _unit(rng, len(ids), d)
            report = index.add(ids, x)
            assert set(report.whitelisted) <= index.whitelist and set(report.blocked) <= index.blocklist
            assert not set(report.added) & (index.whitelist | index.blocklist)
            for i, x_i in zip(ids, x):
                if i in report.added:
                    stored.append(x_i)
                    stored_ids.append(i)
            index.extend_whitelist(rng.choice(pool, 5, replace=False))
            index.block(rng.choice(pool, 5, replace=False))
            forbidden = index.whitelist | index.blocklist
            q = rng.standard_normal((30, d)).astype(np.float32)
            q[:10] = np.asarray(stored)[rng.integers(0, len(stored), 10)]  # probes at stored (maybe blocked) keys
            k = int(rng.integers(1, 15))
            got = index.search(q, k)
            for hits in got:
                checked += len(hits)
                returned_forbidden += sum(i in forbidden for i, _ in hits)
            if factory == "Flat":
                allowed = set(stored_ids) - forbidden
                want = _brute(np.asarray(stored), stored_ids, q, k, allowed)
                assert [[i for i, _ in r] for r in got] == [[i for i, _ in r] for r in want]
    assert checked > 5000 and returned_forbidden == 0


def test_append_only_adds_after_training_are_found():
    rng = np.random.default_rng(4)
    x = _unit(rng, 2000, 16)
    index = ExemplarIndex(16, "IVF8,Flat")
    index.add([f"a{i}" for i in range(1500)], x[:1500])
    index.train()
    index.add([f"a{i}" for i in range(1500, 2000)], x[1500:])
    assert len(index) == 2000
    assert [h[0][0] for h in index.search(x[1500:1520], 1)] == [f"a{i}" for i in range(1500, 1520)]
    with pytest.raises(UserError, match="already trained"):
        index.train()


@pytest.mark.parametrize("bad, match", [
    (lambda ix: ix.add(["a", "a"], np.ones((2, 4))), "'a' is already in the index"),
    (lambda ix: ix.add(["a"], np.ones((1, 5))), r"shape \[n, 4\]"),
    (lambda ix: ix.add(["a", "b"], np.array([[1, 0, 0, 0], [np.nan, 0, 0, 0]])), "row 1 has NaN"),
    (lambda ix: ix.add(["a"], np.zeros((1, 4))), "row 0 is all zeros"),
    (lambda ix: ix.add([""], np.ones((1, 4))), r"ids\[0\] must be a non-empty string"),
    (lambda ix: ix.search(np.ones((1, 4)), 0), "k must be a positive integer"),
])
def test_bad_input_is_refused_and_adds_nothing(bad, match):
    index = ExemplarIndex(4, "Flat")
    with pytest.raises(UserError, match=match):
        bad(index)
    assert len(index) == 0 and index.ids == []


def test_unknown_factory_names_it():
    index = ExemplarIndex(4, "NotAnIndex42")
    index.add(["a"], np.ones((1, 4)))
    with pytest.raises(UserError, match="'NotAnIndex42'"):
        index.search(np.ones((1, 4)), 1)


# --- save / load -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pq_index():
    """One trained IVF-PQ index (whitelist w1, s3 blocked after its add) shared by the tests of this module."""
    rng = np.random.default_rng(5)
    x = _unit(rng, 1200, 16)
    index = ExemplarIndex(16, "IVF8,PQ4x4", whitelist=["w1"], nprobe=4, rerank=64)
    index.add([f"s{i}" for i in range(1200)] + ["w1"], np.vstack([x, x[:1]]))
    index.train()
    return index, x


@pytest.fixture
def saved(pq_index, tmp_path):
    index, _ = pq_index
    index = ExemplarIndex.load(_saved_copy(index, tmp_path / "source.idx"))
    index.block(["s3", "later"])
    path = tmp_path / "exemplars.idx"
    q = np.random.default_rng(6).standard_normal((25, 16)).astype(np.float32)
    before = index.search(q, 9)
    index.save(path)
    return index, path, q, before


def _saved_copy(index, path):
    index.save(path)
    return path


def test_save_load_round_trip_is_identical(saved):
    index, path, q, before = saved
    loaded = ExemplarIndex.load(path, dim=16)
    assert loaded.search(q, 9) == before
    assert (loaded.whitelist, loaded.blocklist, loaded.ids) == (index.whitelist, index.blocklist, index.ids)
    assert (loaded.nprobe, loaded.rerank, loaded.resolved_factory) == (4, 64, "IVF8,PQ4x4")
    # appending after a load continues the same index
    loaded.add(["new"], np.ones((1, 16)))
    assert loaded.search(np.ones((1, 16)), 1)[0][0][0] == "new"


def _rewrite(path, change):
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    change(members)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    path.write_bytes(buffer.getvalue())


def _meta(change, reseal=False):
    """Edit meta.json; ``reseal``: also recompute its checksum (what a deliberate edit would do), so the
    checks behind the checksum are reached."""
    from ttrl_lightning.retrieval.index import _meta_sha256

    def edit(members):
        meta = json.loads(members["meta.json"])
        change(meta)
        if reseal:
            meta["meta_sha256"] = _meta_sha256(meta)
        members["meta.json"] = json.dumps(meta).encode()
    return edit


def _deflate(path):
    """Rewrite the file with compressed members (a zip bomb's shape: small file, large contents)."""
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    members["ids.json"] = b" " * 50_000_000 + members["ids.json"]  # 50 MB of padding deflates to ~50 KB
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _flip_vector_byte(members):
    data = bytearray(members["vectors.npy"])
    data[-7] ^= 0x10
    members["vectors.npy"] = bytes(data)


@pytest.mark.parametrize("damage, match", [
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "not an exemplar index file or corrupt"),
    (lambda p: p.write_text("id,vector\n"), "not an exemplar index file or corrupt"),
    (lambda p: _rewrite(p, lambda m: m.pop("ids.json")), r"missing ids\.json"),
    (lambda p: _rewrite(p, _flip_vector_byte), r"checksum mismatch in vectors\.npy"),
    (lambda p: _rewrite(p, _meta(lambda m: m.update(version=99))), "format version 99"),
    (lambda p: _rewrite(p, _meta(lambda m: m.update(format="other"))), "not an exemplar index file"),
    (lambda p: _rewrite(p, _meta(lambda m: m.update(count=1199))), r"checksum mismatch in meta\.json"),
    # the whitelist was outside every checksum: an edit weakened leakage control silently
    (lambda p: _rewrite(p, _meta(lambda m: m.update(whitelist=[]))), r"checksum mismatch in meta\.json"),
    (lambda p: _rewrite(p, _meta(lambda m: m.update(count=1199), reseal=True)), r"metadata says \[1199, 16\]"),
    (lambda p: _rewrite(p, _meta(lambda m: m.update(whitelist=["s5"]), reseal=True)), "whitelisted or blocked"),
    # a whitelist written as a string became the set of its letters
    (lambda p: _rewrite(p, _meta(lambda m: m.update(whitelist="s5"), reseal=True)),
     r"corrupt metadata \(whitelist must be a list of ids, got 's5'\)"),
    (lambda p: _rewrite(p, _meta(lambda m: m.update(dim="16"), reseal=True)), r"dim must be an integer"),
    (_deflate, r"\.json is compressed or larger than the file .*not written by ExemplarIndex\.save"),
])
def test_corrupt_or_mismatched_file_names_the_file(saved, damage, match):
    _, path, _, _ = saved
    damage(path)
    with pytest.raises(IndexFileError, match=match) as info:
        ExemplarIndex.load(path)
    assert str(path) in str(info.value)


def test_dimension_mismatch_names_the_file(saved):
    _, path, _, _ = saved
    with pytest.raises(IndexFileError, match=r"exemplars\.idx: index of dim 16, expected 384"):
        ExemplarIndex.load(path, dim=384)
