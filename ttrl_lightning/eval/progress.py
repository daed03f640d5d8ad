"""Progress bars for long work (tqdm; silent when disabled or when stderr is not a terminal in CI)."""
from __future__ import annotations

from tqdm.auto import tqdm


def progress_bar(total: int, desc: str, enabled: bool = True):
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False, dynamic_ncols=True)
