"""Images are decoded whole when a question file is read (data.image_files): files that PIL's verify() accepts but
that fail to decode (a corrupt zlib stream with valid CRCs, a truncated JPEG), a PNG with rows missing, an aspect
ratio above 200 and too many images or pixels per question are each one line naming the file, the row and the
field, before anything is sampled."""
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from ttrl_lightning.data.image_files import check_image, png_rows_complete
from ttrl_lightning.data.questions import QuestionError, read_questions


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png(path, width, height, rows=None, stream=None, interlace=0):
    raw = b"".join(b"\x00" + bytes([100]) * (3 * width) for _ in range(height if rows is None else rows))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, interlace)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", stream or zlib.compress(raw))
                     + _chunk(b"IEND", b""))
    return path


def _file(tmp_path, image):
    path = tmp_path / "q.jsonl"
    path.write_text('{"id": "a", "prompt": "x", "image": %s}\n' % (
        f'"{image}"' if isinstance(image, str) else str(image).replace("'", '"')))
    return str(path)


def _refused(path, match):
    with pytest.raises(QuestionError, match=match) as err:
        read_questions(path)
    assert "\n" not in str(err.value)


def _verifies(path):
    with Image.open(path) as im:
        im.verify()


def test_a_corrupt_stream_with_valid_crcs_is_refused(tmp_path):
    good = zlib.compress(b"".join(b"\x00" + bytes([100]) * 192 for _ in range(64)))
    bad = good[:10] + bytes([good[10] ^ 0xFF]) + good[11:]
    _verifies(_png(tmp_path / "corrupt.png", 64, 64, stream=bad))  # what the reader checked before
    _refused(_file(tmp_path, "corrupt.png"), r"line 1 \(id='a'\): field 'image': image .*corrupt\.png is not "
                                             r"readable \(broken data stream")


def test_a_truncated_jpeg_is_refused(tmp_path):
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "f.jpg")
    data = (tmp_path / "f.jpg").read_bytes()
    (tmp_path / "t.jpg").write_bytes(data[:len(data) // 2])
    _verifies(tmp_path / "t.jpg")
    _refused(_file(tmp_path, "t.jpg"), r"image .*t\.jpg is not readable \(image file is truncated")


def test_a_png_with_missing_rows_is_refused(tmp_path):
    _png(tmp_path / "short.png", 64, 64, rows=16)
    with Image.open(tmp_path / "short.png") as im:
        im.load()  # PIL decodes it without a word, the missing rows blank
    assert png_rows_complete(str(tmp_path / "short.png")) == (16 * 193, 64 * 193)
    _refused(_file(tmp_path, "short.png"), r"image .*short\.png is not readable \(its image data holds 3,088 of the "
                                           r"12,352 bytes its header declares: rows are missing\)")
    # whole images pass, interlaced ones too (PIL writes Adam7 on request)
    assert png_rows_complete(str(_png(tmp_path / "whole.png", 64, 64))) is None
    # an Adam7-interlaced PNG (written here by hand: pass p's pixels hold the value 10 p): PIL decodes every
    # pixel to its pass's value, so the passes' geometry here is right, and the check finds it whole
    width, height = 53, 37
    passes = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
    raw, want = b"", np.zeros((height, width), np.uint8)
    for p, (x0, y0, dx, dy) in enumerate(passes):
        xs, ys = range(x0, width, dx), range(y0, height, dy)
        if len(xs) and len(ys):
            raw += (b"\x00" + bytes([10 * p]) * (3 * len(xs))) * len(ys)
            want[np.ix_(list(ys), list(xs))] = 10 * p
    _png(tmp_path / "adam7.png", width, height, stream=zlib.compress(raw), interlace=1)
    with Image.open(tmp_path / "adam7.png") as im:
        assert (np.asarray(im.convert("RGB"))[..., 0] == want).all()
    assert png_rows_complete(str(tmp_path / "adam7.png")) is None
    assert check_image(str(tmp_path / "adam7.png")) == width * height
    _png(tmp_path / "adam7_short.png", width, height, stream=zlib.compress(raw[:-200]), interlace=1)
    assert png_rows_complete(str(tmp_path / "adam7_short.png")) == (len(raw) - 200, len(raw))


def test_an_aspect_ratio_above_200_is_refused(tmp_path):
    Image.new("RGB", (2010, 5)).save(tmp_path / "wide.png")
    _refused(_file(tmp_path, "wide.png"), r"wide\.png is 2010 x 5 pixels: its aspect ratio 402 is above 200")
    Image.new("RGB", (1000, 5)).save(tmp_path / "ok.png")
    assert read_questions(_file(tmp_path, "ok.png"))[0]["images"]


def test_images_and_pixels_per_question_are_bounded(tmp_path):
    for k in range(3):
        Image.new("RGB", (100, 100)).save(tmp_path / f"{k}.png")
    path = _file(tmp_path, ["0.png", "1.png", "2.png"])
    assert len(read_questions(path)[0]["images"]) == 3
    with pytest.raises(QuestionError, match=r"names 3 images, above the limit of 2 per question"):
        read_questions(path, max_images=2)
    with pytest.raises(QuestionError, match=r"field 'image\[2\]': image .*2\.png \(100 x 100\) brings the "
                                            r"question's images to 30,000 pixels, above the limit of 25,000"):
        read_questions(path, max_pixels=25_000)
