"""Progress bars for long work (tqdm). Shown on a terminal; off when disabled or when stderr is not a
terminal (tqdm's ``disable=None``), so logs and CI output stay clean."""
from __future__ import annotations

from tqdm.auto import tqdm


def progress_bar(total: int, desc: str, enabled: bool = True):
    return tqdm(total=total, desc=desc, disable=None if enabled else True, leave=False, dynamic_ncols=True)
