"""Pixelis' Pixel TTRL labeler (sec. 3.2.3, supp. S6): the uncertainty-weighted vote with abstention
(``labeler``) and its parts: decisive-token masks (``decisive``), near-duplicate rollouts (``duplicates``),
Dawid-Skene slot reliabilities (``reliability``) and the temperature of the calibrated confidence
(``temperature``)."""
from .labeler import PixelCalibration, calibrate_pixel, pixel_label
from .decisive import decisive_token_mask
from .reliability import batch_reliability
from .temperature import fit_temperature

__all__ = ["PixelCalibration", "calibrate_pixel", "pixel_label", "decisive_token_mask", "batch_reliability",
           "fit_temperature"]
