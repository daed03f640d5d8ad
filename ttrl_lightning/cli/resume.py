"""Resuming ``ttrl fit`` from ``--ckpt_path``: the checkpoint file is checked, and its hyperparameters must
agree with the ones this run gives.

LightningCLI's own rule loads the checkpoint's ``hyper_parameters`` over the parsed config, so a value given
on the command line or in a config (``--model.init_args.policy.lr=0.01``) was silently replaced by the
checkpoint's. ``ttrl fit`` instead compares the two (:func:`hparam_changes`) and

* refuses a resume whose values differ, naming each one (``policy.lr: checkpoint 0.003, this run 0.01``);
* with ``--allow_hparam_override`` resumes with this run's values, says which ones replace the checkpoint's,
  and sets the changed optimizer settings (``policy.lr``, ``policy.weight_decay``, ``policy.betas``) in the
  restored optimizer state (:class:`ResumedOptimizerSettings`: the optimizer state in a checkpoint carries
  its own learning rate).

A run without a model in its config (``ttrl fit --ckpt_path x.ckpt --data ...``) takes the model from the
checkpoint, as LightningCLI does. :func:`load_checkpoint` refuses a missing, empty or foreign file with a
message naming it, before Lightning reads it.
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch

from ttrl_lightning.checkpoints import TRAINER_CKPT_KEYWORDS, load_checkpoint  # noqa: F401  (re-exported)
from ttrl_lightning.errors import UserError
from ttrl_lightning.safe_files import same_file

#: the flag that lets this run's values replace a checkpoint's hyperparameters
OVERRIDE_FLAG = "allow_hparam_override"
#: entries Lightning adds to the saved hyperparameters (not arguments of the module)
_BOOKKEEPING = ("_instantiator",)


#: what Lightning reads from a checkpoint to resume training (a file with weights alone has none of them)
TRAINING_STATE_KEYS = ("pytorch-lightning_version", "epoch", "global_step", "loops")


def check_training_state(path: str, checkpoint: Mapping) -> None:
    """Refuse (``UserError``) a checkpoint that has weights but not the training state a resume restores."""
    missing = [k for k in TRAINING_STATE_KEYS if k not in checkpoint]
    if missing:
        raise UserError(f"checkpoint {path} has no training state to resume from (no {', '.join(missing)}); "
                        "to start from its weights, give it as --model.init_args.policy.model instead")
    if "optimizer_states" not in checkpoint:
        raise UserError(f"checkpoint {path} has no optimizer state to resume from (saved with weights only, "
                        "ModelCheckpoint(save_weights_only=True)); to start from its weights, give it as "
                        "--model.init_args.policy.model instead")


def saved_model_config(checkpoint: Mapping) -> dict[str, Any]:
    """The model's hyperparameters saved in ``checkpoint`` as ``{"class_path"?, <init args>}`` (empty if
    none)."""
    raw = checkpoint.get("hyper_parameters") or {}
    if not isinstance(raw, Mapping):
        raise UserError(f"the checkpoint's hyper_parameters must be a mapping of the module's arguments, got "
                        f"{type(raw).__name__} {str(raw)[:60]!r}: not a checkpoint ttrl fit wrote")
    saved = dict(raw)
    hparams = {k: v for k, v in saved.items() if k not in _BOOKKEEPING}
    if "_class_path" in hparams:
        hparams["class_path"] = hparams.pop("_class_path")
    return hparams


def given_model_config(model: Any) -> dict[str, Any]:
    """This run's model config (a ``class_path``/``init_args`` Namespace or mapping) as
    ``{"class_path", <init args>}``."""
    config = model.as_dict() if hasattr(model, "as_dict") else dict(model)
    return {"class_path": config.get("class_path"), **dict(config.get("init_args") or {}),
            **dict(config.get("dict_kwargs") or {})}


def _plain(value: Any) -> Any:
    """``value`` with Namespaces as dicts and tuples as lists (YAML gives lists, checkpoints keep tuples)."""
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


def _same_value(a: Any, b: Any) -> bool:
    """Equal, or two spellings of one existing file or folder (relative / absolute, through links)."""
    if a == b:
        return True
    if isinstance(a, str) and isinstance(b, str) and os.path.exists(a) and os.path.exists(b):
        return same_file(a, b)
    return False


def resolved(given: Mapping[str, Any]) -> dict[str, Any]:
    """This run's init args as the module will save them: the class's ``resolved_hparams`` (e.g.
    ``TTRLModule`` saves ``advantage: None`` as the labeler's default rule) applied when it has one."""
    given = dict(given)
    class_path = given.get("class_path")
    if not class_path:
        return given
    module_name, _, name = str(class_path).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        return given
    hook = getattr(cls, "resolved_hparams", None)
    return dict(hook(given)) if callable(hook) else given


def hparam_changes(saved: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (checkpoint value, this run's value)}`` of every hyperparameter both name and that
    differ (nested groups such as ``policy`` compared field by field: ``policy.lr``). This run's values are
    compared as the module resolves them (:func:`resolved`), and two spellings of the same existing path
    are the same value."""
    a, b = _flatten(_plain(dict(saved))), _flatten(_plain(resolved(given)))
    return {k: (a[k], b[k]) for k in a if k in b and not _same_value(a[k], b[k])}


def describe_changes(changes: Mapping[str, tuple[Any, Any]]) -> str:
    return "; ".join(f"{k}: checkpoint {old!r}, this run {new!r}" for k, (old, new) in changes.items())


class ResumedOptimizerSettings(pl.Callback):
    """Sets optimizer settings that this run changed on resume (``policy.<name>`` where ``<name>`` is a key
    of the optimizer's param groups, such as ``lr``) in the checkpoint's optimizer state before it is
    restored.

    Without it the restored optimizer state would bring back the checkpoint's learning rate although the
    module was built with the new one.
    """

    def __init__(self, changes: Mapping[str, Any]):
        self.changes = {k.removeprefix("policy."): v for k, v in changes.items() if k.startswith("policy.")}

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict) -> None:
        for state in checkpoint.get("optimizer_states") or []:
            for group in state.get("param_groups", []):
                for key, value in self.changes.items():
                    if key in group:
                        group[key] = tuple(value) if isinstance(group[key], tuple) else value
