"""The training configs shipped with the package (``ttrl_lightning.configs``).

The repository keeps one copy of them, in the top-level ``configs/`` folder; the build maps that folder into
the package as ``ttrl_lightning.configs`` (``setup.py``: ``package_dir`` + ``package_data``), so a wheel or
``pip install .`` carries them and an editable install points at the folder itself. They are resolved with
:mod:`importlib.resources`, never through the package's parent folder::

    config_path("sft/tiny_arith.yaml")           # an absolute path to the packaged file
    config_path("configs/sft/tiny_arith.yaml")   # the same (the repository spelling is accepted)
    packaged_configs()                           # ['rft/tiny_grpo.yaml', ..., 'sweeps/sft_w_act.yaml']
"""
from __future__ import annotations

import importlib.resources
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from importlib.resources.abc import Traversable

#: the importable package that holds the configs (the repository's ``configs/`` folder)
CONFIGS_PACKAGE = "ttrl_lightning.configs"
#: file types that count as configs
CONFIG_SUFFIXES = (".yaml", ".yml")


class ConfigNotFoundError(FileNotFoundError):
    """A config name that is not among the packaged configs (the message lists them)."""


def _root() -> Traversable:
    try:
        return importlib.resources.files(CONFIGS_PACKAGE)
    except ModuleNotFoundError as e:
        raise ConfigNotFoundError(
            f"the packaged configs ({CONFIGS_PACKAGE}) are not installed: install the package with "
            "`pip install .` (or `pip install -e .` in a checkout) so that the build maps configs/ into it"
        ) from e


def _walk(node: Traversable, prefix: str = ""):
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        rel = f"{prefix}{child.name}"
        if child.is_dir():
            if child.name != "__pycache__":
                yield from _walk(child, rel + "/")
        elif child.name.endswith(CONFIG_SUFFIXES):
            yield rel


def packaged_configs() -> list[str]:
    """Names (``<phase>/<name>.yaml``, ``/``-separated) of every packaged config, sorted."""
    return sorted(_walk(_root()))


def config_path(rel: str) -> str:
    """Path of the packaged config ``rel`` (``"sft/tiny_arith.yaml"``; a leading ``configs/`` is dropped).

    Raises :class:`ConfigNotFoundError`, listing the packaged configs, when there is no such config.
    """
    name = rel.replace(os.sep, "/").removeprefix("./").removeprefix("configs/")
    parts = name.split("/")
    node = _root()
    for part in parts:
        node = node.joinpath(part)
    if not name.endswith(CONFIG_SUFFIXES) or ".." in parts or not node.is_file():
        available = "\n  ".join(packaged_configs())
        raise ConfigNotFoundError(f"no packaged config {rel!r}; the packaged configs are:\n  {available}")
    path = os.fspath(node)  # a real file: the package is installed on a file system (wheel or editable)
    if not os.path.isfile(path):  # pragma: no cover  (a zipped install; not a layout pip produces)
        raise ConfigNotFoundError(f"packaged config {rel!r} is not a file on disk ({path})")
    return path
