"""Generated scenes (random shapes and colours on a random background) and the copies de-duplication must
catch: JPEG re-encoding at quality 10-30, +-2% resizes and slight crops."""
import io

import numpy as np
from PIL import Image, ImageDraw


def scene(rng: np.random.Generator, width: int = 160, height: int = 120) -> Image.Image:
    image = Image.new("RGB", (width, height), tuple(int(c) for c in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 7))):
        x0, y0 = int(rng.integers(0, width - 20)), int(rng.integers(0, height - 20))
        x1, y1 = x0 + int(rng.integers(15, width // 2)), y0 + int(rng.integers(15, height // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        shape = int(rng.integers(0, 3))
        if shape == 0:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
        elif shape == 1:
            draw.ellipse([x0, y0, x1, y1], fill=colour)
        else:
            draw.polygon([(x0, y1), ((x0 + x1) // 2, y0), (x1, y1)], fill=colour)
    return image


def jpeg(image: Image.Image, quality: int) -> Image.Image:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def resize(image: Image.Image, factor: float) -> Image.Image:
    return image.resize((round(image.width * factor), round(image.height * factor)), Image.Resampling.BILINEAR)


def crop(image: Image.Image, fraction: float, side: str) -> Image.Image:
    """Cut ``fraction`` of the width and height off: ``side`` "tl" (top-left) or "br" or "both" (centred)."""
    dx, dy = round(image.width * fraction), round(image.height * fraction)
    boxes = {"tl": (dx, dy, image.width, image.height), "br": (0, 0, image.width - dx, image.height - dy),
             "both": (dx // 2, dy // 2, image.width - (dx - dx // 2), image.height - (dy - dy // 2))}
    return image.crop(boxes[side])


#: every copy kind of the acceptance test: name -> transform
COPIES = {
    "jpeg_q10": lambda im: jpeg(im, 10),
    "jpeg_q20": lambda im: jpeg(im, 20),
    "jpeg_q30": lambda im: jpeg(im, 30),
    "resize_0.98": lambda im: resize(im, 0.98),
    "resize_1.02": lambda im: resize(im, 1.02),
    "crop_3%_tl": lambda im: crop(im, 0.03, "tl"),
    "crop_3%_br": lambda im: crop(im, 0.03, "br"),
    "crop_5%_centre": lambda im: crop(im, 0.05, "both"),
    "jpeg_q20_resize_1.02_crop_2%": lambda im: crop(resize(jpeg(im, 20), 1.02), 0.02, "both"),
}
