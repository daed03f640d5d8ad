"""Near-duplicate filter and LeakageGuard (ttrl_lightning/retrieval/dedup.py) on generated scenes: re-encoded
(JPEG q 10-30), resized (+-2%) and slightly cropped copies are caught, distinct scenes are kept; evaluation
media and their copies never enter the index; earliest ingest wins."""
import numpy as np
import pytest

pytest.importorskip("imagehash")
pytest.importorskip("faiss")

import imagehash  # noqa: E402

from tests.retrieval._scenes import COPIES, scene  # noqa: E402
from ttrl_lightning.errors import UserError  # noqa: E402
from ttrl_lightning.retrieval import ExemplarIndex, LeakageGuard, NearDuplicateFilter, ThumbnailEncoder  # noqa: E402
from ttrl_lightning.retrieval.dedup import hamming, phash  # noqa: E402


def test_phash_and_hamming_match_imagehash():
    rng = np.random.default_rng(0)
    a, b = scene(rng), scene(rng)
    assert hamming(phash(a), phash(b)) == imagehash.phash(a) - imagehash.phash(b)
    assert hamming(phash(a), np.array([phash(a), phash(b)], dtype=np.uint64)).tolist() == [
        0, imagehash.phash(a) - imagehash.phash(b)]


def test_copies_are_caught_and_distinct_scenes_kept():
    """120 distinct scenes, then 9 kinds of copies of 40 of them (360 copies), ingested in order: every copy is
    refused as a duplicate of its own original, every distinct scene is kept; both stages are needed (pHash
    alone misses some crops)."""
    rng = np.random.default_rng(1)
    encoder = ThumbnailEncoder()
    originals = [scene(rng) for _ in range(120)]
    copies = [(f"copy-{name}-{i}", f"scene-{i}", fn(originals[i])) for name, fn in COPIES.items() for i in range(40)]
    images = originals + [c for _, _, c in copies]
    ids = [f"scene-{i}" for i in range(120)] + [c for c, _, _ in copies]
    keys = np.asarray(rng.standard_normal((len(ids), 8)), dtype=np.float32)
    guard = LeakageGuard(ExemplarIndex(8, "Flat"), embedding_dim=encoder.dim)
    report = guard.ingest(ids, keys, images, encoder(images))

    kept_distinct = sum(i.startswith("scene-") for i in report.added)
    caught = {d.item: d for d in report.duplicates}
    print(f"kept {kept_distinct}/120 distinct scenes; caught {len(caught)}/{len(copies)} copies "
          f"({sum(d.stage == 'phash' for d in caught.values())} by pHash, "
          f"{sum(d.stage == 'embedding' for d in caught.values())} by embedding)")
    assert kept_distinct == 120 and len(report.added) == 120
    assert len(caught) == 360
    assert all(caught[c].of == original for c, original, _ in copies)
    stages = {d.stage for d in caught.values()}
    assert stages == {"phash", "embedding"}
    assert guard.index.blocklist == set(caught) and len(guard.index) == 120


def test_evaluation_media_and_their_copies_never_enter():
    rng = np.random.default_rng(2)
    encoder = ThumbnailEncoder()
    evaluation = [scene(rng) for _ in range(10)]
    index = ExemplarIndex(4, "Flat")
    guard = LeakageGuard(index, embedding_dim=encoder.dim)
    guard.register_evaluation([f"eval-{i}" for i in range(10)], evaluation, encoder(evaluation))
    train = [scene(rng) for _ in range(10)]
    images = evaluation[:3] + [COPIES["jpeg_q10"](e) for e in evaluation[3:]] + train
    ids = [f"eval-{i}" for i in range(3)] + [f"leak-{i}" for i in range(3, 10)] + [f"train-{i}" for i in range(10)]
    report = guard.ingest(ids, rng.standard_normal((20, 4)), images, encoder(images))
    assert report.whitelisted == ["eval-0", "eval-1", "eval-2"]
    assert [(d.item, d.of, d.evaluation) for d in report.duplicates] == [
        (f"leak-{i}", f"eval-{i}", True) for i in range(3, 10)]
    assert report.added == [f"train-{i}" for i in range(10)]
    assert sorted(index.active_ids()) == sorted(report.added)


def test_earliest_ingest_wins_and_blocklist_holds_across_calls(tmp_path):
    rng = np.random.default_rng(3)
    encoder = ThumbnailEncoder()
    a = scene(rng)
    guard = LeakageGuard(ExemplarIndex(4, "Flat"), embedding_dim=encoder.dim)
    first = guard.ingest(["a", "a-copy"], np.eye(4)[:2], [a, COPIES["resize_1.02"](a)], encoder([a, a]))
    assert first.added == ["a"] and [d.of for d in first.duplicates] == ["a"]
    # later calls: the blocked id stays out, the filter (saved and reloaded) still knows "a"
    guard.filter.save(tmp_path / "dedup.npz")
    again = LeakageGuard(guard.index, encoder.dim, near_duplicates=NearDuplicateFilter.load(tmp_path / "dedup.npz"))
    second = again.ingest(["a-copy", "a-jpeg"], np.eye(4)[2:], [a, COPIES["jpeg_q30"](a)], encoder([a, a]))
    assert second.blocked == ["a-copy"] and [(d.item, d.of) for d in second.duplicates] == [("a-jpeg", "a")]
    with pytest.raises(UserError, match="'a' was ingested before"):
        again.ingest(["a"], np.eye(4)[:1], [scene(rng)], encoder([scene(rng)]))


def test_corrupt_filter_file_names_it(tmp_path):
    path = tmp_path / "dedup.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(UserError, match="dedup.npz: not a near-duplicate filter file"):
        NearDuplicateFilter.load(path)
