"""The model a command samples from, named by one string (``ttrl eval --model``):

* ``tiny:<arch>`` -- a tiny randomly initialised model of a real architecture (``models.TINY_CONFIGS``);
* a local Hugging Face checkpoint folder (it holds ``config.json``);
* a Lightning ``.ckpt`` file written by ``ttrl fit`` for any :class:`~ttrl_lightning.modules.PolicyModule`
  subclass: the module saves its policy's :class:`~ttrl_lightning.modules.PolicySpec` as the plain mapping
  ``hyper_parameters["policy"]`` and the policy's weights in ``state_dict`` under ``policy.``; the policy is
  rebuilt from the spec and the weights loaded over it strictly (``models.load_checkpoint_policy``, the
  loader every phase uses for a ``.ckpt`` model name). Other entries of the ``state_dict`` (a GRPO
  reference, frozen copies) are not the policy and are left out.

Anything else is a :class:`~ttrl_lightning.errors.UserError` naming the flag and the path, one line.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import UserError, first_line
from ..models import check_tiny_name, is_tiny, load_checkpoint_policy, load_model, load_tokenizer

__all__ = ["LoadedPolicy", "load_policy", "policy_kind"]

#: the files that make a folder a distributed (sharded) Lightning checkpoint
_DISTRIBUTED_MARKERS = (".metadata",)


@dataclass
class LoadedPolicy:
    """A model ready to sample from: ``model`` (eval mode, on ``device``), its ``tokenizer``, what ``name``
    was (``kind``: ``"tiny"``, ``"hf"`` or ``"ckpt"``) and, for a ``.ckpt``, the saved policy spec."""

    model: Any
    tokenizer: Any
    kind: str
    spec: dict | None = None

    @property
    def is_tiny(self) -> bool:
        """A tiny random model (directly, or the policy of a checkpoint trained from one)."""
        return self.kind == "tiny" or (self.spec is not None and is_tiny(str(self.spec.get("model", ""))))


def policy_kind(name: str, flag: str = "--model") -> str:
    """``"tiny"``, ``"hf"`` or ``"ckpt"`` for ``name``, or a :class:`UserError` saying what it should be."""
    if is_tiny(name):
        check_tiny_name(name, f"argument {flag}")
        return "tiny"
    if os.path.isdir(name):
        if os.path.isfile(os.path.join(name, "config.json")):
            return "hf"
        if any(os.path.exists(os.path.join(name, m)) for m in _DISTRIBUTED_MARKERS):
            raise UserError(f"argument {flag}: {name} is a distributed (sharded) checkpoint folder; "
                            "consolidate it into one .ckpt file first")
        raise UserError(f"argument {flag}: {name} is a folder without config.json, not a Hugging Face "
                        "checkpoint")
    if os.path.isfile(name):
        if name.endswith(".ckpt"):
            return "ckpt"
        raise UserError(f"argument {flag}: {name} is a file but not a Lightning .ckpt; give tiny:<arch>, a "
                        "Hugging Face checkpoint folder or a .ckpt written by `ttrl fit`")
    raise UserError(f"argument {flag}: {name} does not exist; give tiny:<arch>, a Hugging Face checkpoint "
                    "folder or a .ckpt written by `ttrl fit`")


def _load_ckpt(path: str, flag: str, dtype: str | None) -> LoadedPolicy:
    """The policy of a ``ttrl fit`` checkpoint (``models.load_checkpoint_policy``); its errors name the flag."""
    try:
        model, spec = load_checkpoint_policy(path, dtype=dtype)
        tokenizer = load_tokenizer(spec["model"])
    except UserError as e:
        raise UserError(f"argument {flag}: {str(e).removeprefix('checkpoint ')}") from None
    return LoadedPolicy(model, tokenizer, "ckpt", dict(spec))


def load_policy(name: str, *, dtype: str | None = None, device: str = "cpu", seed: int = 0,
                flag: str = "--model") -> LoadedPolicy:
    """Load the model ``name`` names (module docstring) in eval mode on ``device``; ``dtype``: a torch dtype
    name to cast to (None: the checkpoint's); ``seed``: initialisation of a ``tiny:<arch>`` model."""
    kind = policy_kind(name, flag)
    if kind == "ckpt":
        loaded = _load_ckpt(name, flag, dtype)
    else:
        try:
            tokenizer = load_tokenizer(name)
            model = load_model(name, tokenizer, dtype=dtype, seed=seed)
        except (OSError, ValueError, KeyError) as e:
            raise UserError(f"argument {flag}: {name} cannot be loaded "
                            f"({first_line(e)})") from None
        loaded = LoadedPolicy(model, tokenizer, kind)
    loaded.model.to(device).eval()
    return loaded
