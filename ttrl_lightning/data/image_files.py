"""An image file a question names, checked whole when it is read: a file that passes PIL's ``verify()`` can still
fail to decode later, inside sampling, as a traceback (a corrupt zlib stream with valid CRCs, a truncated JPEG), or
decode with rows missing (a PNG whose image data holds fewer rows than its header declares, which PIL fills with
blank rows and no error). So :func:`check_image` opens, verifies, bounds and fully decodes the file, and checks a
PNG's decompressed rows against its header.

Bounds, before anything is decoded (from the header): PIL's decompression-bomb limit; an aspect ratio of at most
:data:`MAX_ASPECT_RATIO` (Qwen2-VL's and Qwen2.5-VL's processors refuse one above 200); per question at most
``max_images`` images and ``max_pixels`` pixels over all of them (:data:`MAX_IMAGES_PER_QUESTION`,
:data:`MAX_PIXELS_PER_QUESTION`: three 9000 x 9000 PNGs of 10 KB each took 2.8 GB to sample).

Every failure is an :class:`ImageFileError` whose message says what is wrong; the question reader prefixes the
file, row and field.
"""
from __future__ import annotations

import math
import struct
import warnings
import zlib

from ..errors import UserError, first_line

__all__ = ["ImageFileError", "check_image", "png_rows_complete", "MAX_ASPECT_RATIO", "MAX_IMAGES_PER_QUESTION",
           "MAX_PIXELS_PER_QUESTION"]

#: the largest width / height (or height / width) an image may have: Qwen2-VL's processor limit
MAX_ASPECT_RATIO = 200
#: the most images one question may name
MAX_IMAGES_PER_QUESTION = 16
#: the most pixels all of one question's images may hold together (about 150 MB as RGB bytes)
MAX_PIXELS_PER_QUESTION = 50_000_000

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: PNG colour type -> samples per pixel
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
#: Adam7 passes: (x start, y start, x step, y step)
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


class ImageFileError(UserError):
    """An image file that cannot be used whole; the message says why."""


def _png_expected_bytes(width: int, height: int, depth: int, colour: int, interlace: int) -> int | None:
    """Bytes of a PNG's decompressed image data (filter byte + packed samples per row, every Adam7 pass when
    interlaced); None for a header this check does not know."""
    channels = _PNG_CHANNELS.get(colour)
    if channels is None or interlace not in (0, 1):
        return None
    bits = channels * depth

    def rows(w: int, h: int) -> int:
        return 0 if w == 0 or h == 0 else h * (1 + math.ceil(w * bits / 8))

    if interlace == 0:
        return rows(width, height)
    return sum(rows(math.ceil(max(width - x0, 0) / dx), math.ceil(max(height - y0, 0) / dy))
               for x0, y0, dx, dy in _ADAM7)


def png_rows_complete(path: str) -> tuple[int, int] | None:
    """``(decompressed, expected)`` bytes of a PNG's image data when it holds fewer than its header declares;
    None when it holds them all (or the file is not a PNG this check reads: PIL's decode judges it then)."""
    with open(path, "rb") as fh:
        data = fh.read()
    if not data.startswith(_PNG_MAGIC):
        return None
    pos, header, stream = len(_PNG_MAGIC), None, zlib.decompressobj()
    got, expected = 0, None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR" and len(body) >= 13:
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body[:13])
            header = True
            expected = _png_expected_bytes(width, height, depth, colour, interlace)
            if expected is None:
                return None
        elif kind == b"IDAT" and header:
            try:  # never more than the header's size: a bomb cannot grow here
                got += len(stream.decompress(body, max(expected - got, 0) + 1))
            except zlib.error:
                return None  # a corrupt stream: PIL's decode says so
        elif kind == b"IEND":
            break
    if expected is None:
        return None
    return (got, expected) if got < expected else None


def check_image(path: str, pixels_so_far: int = 0, max_pixels: int = MAX_PIXELS_PER_QUESTION) -> int:
    """Open, verify, bound (module docstring) and fully decode the image at ``path``; its pixel count.
    ``pixels_so_far``: the pixels of the question's earlier images. Raises :class:`ImageFileError`."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():  # PIL only warns between MAX_IMAGE_PIXELS and twice that
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                img.verify()
            with Image.open(path) as img:
                width, height = img.size
                if min(width, height) < 1:
                    raise ImageFileError(f"image {path} is empty ({width} x {height} pixels)")
                ratio = max(width, height) / min(width, height)
                if ratio > MAX_ASPECT_RATIO:
                    raise ImageFileError(f"image {path} is {width} x {height} pixels: its aspect ratio {ratio:.0f} is "
                                         f"above {MAX_ASPECT_RATIO}, which vision-language processors refuse")
                total = pixels_so_far + width * height
                if total > max_pixels:
                    raise ImageFileError(f"image {path} ({width} x {height}) brings the question's images to "
                                         f"{total:,} pixels, above the limit of {max_pixels:,}")
                img.load()  # the whole decode, now: a broken stream or a truncated file fails here
    except ImageFileError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        size = str(e).split("could be")[0].strip(" ,")
        raise ImageFileError(f"image {path} is too large to decode safely ({size}; the limit is "
                             f"PIL.Image.MAX_IMAGE_PIXELS = {Image.MAX_IMAGE_PIXELS:,} pixels)") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, zlib.error) as e:
        raise ImageFileError(f"image {path} is not readable ({first_line(e, None)})") from None
    short = png_rows_complete(path)
    if short is not None:
        raise ImageFileError(f"image {path} is not readable (its image data holds {short[0]:,} of the {short[1]:,} "
                             "bytes its header declares: rows are missing)")
    return width * height
