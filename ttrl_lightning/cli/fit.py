"""``ttrl fit|validate``: the LightningCLI entry of every training phase.

Configs name classes by ``class_path``/``init_args`` (subclass mode) for the model and the data, and the
YAML is read with OmegaConf, so ``${...}`` interpolation works inside a config::

    ttrl fit --config configs/sft/tiny_arith.yaml
    ttrl fit --config configs/rft/tiny_grpo.yaml --config configs/scale/ddp_cpu.yaml --trainer.max_steps=20
    ttrl fit --config configs/rft/tiny_grpo.yaml --print_config

Defaults: a Weights & Biases logger in offline mode (``WANDB_MODE=offline`` unless the environment sets it;
no account or network needed; ``wandb sync`` uploads later) and a Rich progress bar (plain text, no
terminal codes, when the output is not a terminal) that counts steps up to ``max_steps`` in step-limited
runs (:mod:`ttrl_lightning.cli.progress`).

Precision: a CPU run whose config sets no ``trainer.precision`` gets ``bf16-mixed`` on a CPU with bf16 in
hardware (AVX512-BF16, AMX) and ``32-true`` elsewhere, printed once (:mod:`ttrl_lightning.cli.precision`).

Where a run writes: everything lands under ``trainer.default_root_dir`` (``outputs/`` when the config sets
none). A logger without its own ``save_dir`` (W&B, CSV, TensorBoard: unset or ``.``) logs there, so the run
folder is ``<root>/<name or project>/<version or run id>/`` holding ``checkpoints/`` and the resolved
``config.yaml`` (one per run: runs never overwrite each other's config). ``ttrl fit`` ends by printing the
checkpoint and config paths.

Resuming (``--ckpt_path``): the file is checked first (missing, empty or not a Lightning checkpoint: one line
naming it), and the checkpoint's hyperparameters must agree with the ones this run gives; a changed value is
refused unless ``--allow_hparam_override`` is given (:mod:`ttrl_lightning.cli.resume`).

Errors in the user's input (an option, a config value, a module argument out of range, a checkpoint file)
are :class:`~ttrl_lightning.errors.UserError` s with one-line messages (jsonargparse's nested reports
condensed, a module's own error unwrapped from jsonargparse's): the dispatcher prints
``ttrl fit: <what is wrong>`` and exits 1; ``--debug`` or ``TTRL_DEBUG=1`` shows the full report and
traceback.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator

from . import quiet

quiet.install()

import lightning.pytorch as pl  # noqa: E402  (after the noise filters)
from jsonargparse import ActionYesNo, Namespace  # noqa: E402
from lightning.pytorch.callbacks import ProgressBar  # noqa: E402
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback  # noqa: E402
from lightning.pytorch.loggers import WandbLogger  # noqa: E402
from lightning.pytorch.utilities.rank_zero import rank_zero_only  # noqa: E402

from ttrl_lightning.errors import UserError, first_line  # noqa: E402

from . import DEBUG_ENV, DEBUG_FLAG, resume  # noqa: E402
from .allocator import return_large_blocks  # noqa: E402
from .checkpoint_io import with_streaming_checkpoints  # noqa: E402
from .parse_errors import ShortErrorParser  # noqa: E402
from .precision import fill_precision  # noqa: E402
from .progress import StepProgressBar  # noqa: E402

#: where a run writes when its config sets no ``trainer.default_root_dir``
DEFAULT_ROOT_DIR = "outputs"
#: ``save_dir`` values that mean "not set by the config": the logger then writes under the run's root dir
UNSET_SAVE_DIR = (None, ".")
#: the logger of every config that names none. Its explicit ``save_dir: .`` is carried over by jsonargparse
#: to a logger a config names without a ``save_dir`` (CSVLogger, TensorBoardLogger require one), which
#: then follows ``trainer.default_root_dir`` too (see module doc)
DEFAULT_LOGGER = {
    "class_path": "lightning.pytorch.loggers.WandbLogger",
    "init_args": {"project": "ttrl_lightning", "offline": True, "save_dir": "."},
}


def _import_class(path: str) -> type | None:
    module, _, name = str(path).rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None


def _logger_configs(logger_cfg) -> list[tuple[type | None, dict | Namespace]]:
    """``(class, init_args)`` of each ``class_path``/``init_args`` entry of ``trainer.logger``."""
    entries = logger_cfg if isinstance(logger_cfg, list) else [logger_cfg]
    out = []
    for entry in entries:
        get = entry.get if isinstance(entry, (dict, Namespace)) else (lambda key, default=None: default)
        class_path, init = get("class_path"), get("init_args")
        if class_path and init is not None:
            out.append((_import_class(class_path), init))
    return out


def debug_requested(argv: list[str]) -> bool:
    """``--debug`` in ``argv`` or ``TTRL_DEBUG`` set to a true value (the dispatcher turns ``--debug`` into
    it): full reports and tracebacks."""
    env = os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")
    return env or DEBUG_FLAG in argv


def _user_error_in(error: BaseException) -> UserError | None:
    """The first :class:`UserError` in ``error``'s chain of causes (jsonargparse wraps what a class's
    ``__init__`` raised in its own errors)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, UserError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def local_root_dir(root) -> str:
    """``trainer.default_root_dir`` as the local folder a run writes: a ``file://`` URL as its path
    (``file:///abs/run`` wrote everything under a relative folder named ``file:``); anything else with ``://``
    is one :class:`UserError`: a protocol fsspec does not know (a local folder whose name holds ``://``,
    which Lightning reads as a URL), one whose package is not installed (``s3://`` without ``s3fs``), or a
    remote file system, since the run's config and reference files are written with local file operations
    (they landed in a local folder named ``s3:``, the checkpoints elsewhere)."""
    text = os.fspath(root) if isinstance(root, os.PathLike) else str(root)
    if "://" not in text:
        return text
    protocol = text.split("://", 1)[0]
    where = f"trainer.default_root_dir {text!r}"
    if protocol in ("file", "local"):
        from urllib.parse import urlparse
        from urllib.request import url2pathname

        parsed = urlparse(text)
        if parsed.netloc not in ("", "localhost") or not parsed.path:
            raise UserError(f"{where}: a file:// URL names a folder of this machine, file:///<absolute path>")
        return url2pathname(parsed.path)
    import fsspec

    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise UserError(f"{where}: {protocol!r} is no file-system protocol fsspec knows, and a folder whose name "
                        "holds '://' is read as a URL; give a local folder without '://' in its name") from None
    except ImportError as err:
        raise UserError(f"{where}: the {protocol}:// file system needs a package that is not installed "
                        f"({first_line(err, 120)}); or give a local folder") from None
    raise UserError(f"{where}: a run folder is written on this machine (its config and reference files with local "
                    f"file operations); give a local folder and copy it to {protocol}:// afterwards")


def run_dir(trainer: pl.Trainer) -> str:
    """The folder of this run: the parent of ``ModelCheckpoint``'s default ``checkpoints/`` folder.

    ``<save_dir>/<name>/<version>`` of the first logger (Lightning's own rule for checkpoint folders), or
    ``trainer.default_root_dir`` without a logger. Call after the loggers have started (``setup`` on).
    """
    if trainer.loggers:
        logger = trainer.loggers[0]
        save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
        version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
        return os.path.join(save_dir, str(logger.name), version)
    return trainer.default_root_dir


def _free_config_path(folder: str, filename: str) -> str:
    """``folder/filename``, or ``config-v1.yaml``, ``config-v2.yaml``, ... when an earlier run into the same folder
    (no logger: the run folder is ``default_root_dir``) left its config there: a run never overwrites another's
    config, as ModelCheckpoint never overwrites another's checkpoint."""
    path = os.path.join(folder, filename)
    stem, ext = os.path.splitext(filename)
    k = 0
    while os.path.exists(path):
        k += 1
        path = os.path.join(folder, f"{stem}-v{k}{ext}")
    return path


class RunConfigSaver(SaveConfigCallback):
    """Saves the resolved config as ``<run dir>/config.yaml`` (:func:`run_dir`), beside the checkpoints; a second run
    into the same folder gets ``config-v1.yaml`` (:func:`_free_config_path`).

    LightningCLI's own callback writes to ``trainer.log_dir``, which for a W&B logger is the shared
    ``save_dir``: every run overwrote one ``config.yaml`` there.
    """

    config_path: str | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        path = _free_config_path(run_dir(trainer), self.config_filename) if trainer.is_global_zero else None
        path = trainer.strategy.broadcast(path)
        if trainer.is_global_zero:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self.parser.save(self.config, path, skip_none=False, overwrite=self.overwrite,
                             multifile=self.multifile)
            self.config_path = path
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)


class TTRLCLI(LightningCLI):
    """LightningCLI with the project defaults (offline W&B logger under the run's root dir, step-counting Rich
    bar), checked resumes and one-line user errors (see the module doc)."""

    #: hyperparameters this run gives instead of the checkpoint's (``--allow_hparam_override``)
    hparam_overrides: dict[str, tuple] = {}

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument(
            f"--{resume.OVERRIDE_FLAG}", action=ActionYesNo, nargs="?", default=False,
            help="With --ckpt_path: resume with this run's hyperparameters where they differ from the "
                 "checkpoint's (without it such a resume is refused, naming each changed value).")

    def _parse_ckpt_path(self) -> None:
        """Check ``--ckpt_path`` and compare its hyperparameters with this run's (:mod:`.resume`), instead of
        LightningCLI's silent replacement of the given values by the checkpoint's."""
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else None
        if config is None or not config.get("ckpt_path"):
            return
        path = config.ckpt_path
        checkpoint = resume.load_checkpoint(path)
        if checkpoint is not None:
            resume.check_training_state(path, checkpoint)
        saved = resume.saved_model_config(checkpoint) if checkpoint is not None else {}
        if not saved:
            return
        if config.get("model") is None:  # no model given: the checkpoint's (LightningCLI's rule)
            class_path = saved.pop("class_path", None)
            model = {"class_path": class_path, "dict_kwargs": saved} if class_path else saved
            self.config = self.parser.parse_object({subcommand: {"model": model}}, self.config)
            return
        changes = resume.hparam_changes(saved, resume.given_model_config(config.model))
        if not changes:
            return
        if not config.get(resume.OVERRIDE_FLAG):
            raise UserError(f"checkpoint {path} was trained with other hyperparameters than this run gives "
                            f"({resume.describe_changes(changes)}): give the checkpoint's values, or pass "
                            f"--{resume.OVERRIDE_FLAG} to resume with this run's")
        self.hparam_overrides = changes
        rank_zero_only(print)(f"resuming {path} with this run's hyperparameters instead of the checkpoint's: "
                              f"{resume.describe_changes(changes)}", file=sys.stderr)

    #: print what was chosen for the run (its precision): the CLI that builds the run does
    says_its_choices = True

    def before_instantiate_classes(self) -> None:
        trainer = self._get(self.config, "trainer")
        if trainer is None:
            return
        chosen = fill_precision(trainer)  # a CPU run without a precision: bf16-mixed or 32-true (cli.precision)
        if chosen and self.subcommand is not None and self.says_its_choices:
            rank_zero_only(print)(chosen, file=sys.stderr)
        if trainer.get("default_root_dir"):
            trainer["default_root_dir"] = local_root_dir(trainer["default_root_dir"])
        root = trainer.get("default_root_dir") or DEFAULT_ROOT_DIR
        for cls, init in _logger_configs(trainer.get("logger")):
            if "save_dir" not in init or init.get("save_dir") not in UNSET_SAVE_DIR:
                continue
            if isinstance(cls, type) and issubclass(cls, WandbLogger) and init.get("dir") is not None:
                continue  # W&B's own `dir` names the folder
            init["save_dir"] = root

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except Exception as e:
            user_error = _user_error_in(e)
            if user_error is None or user_error is e:
                raise
            raise user_error from e  # the module's own message, not jsonargparse's wrapping

    def _instantiate_trainer(self, config: dict, callbacks: list):
        given = list(config.get("callbacks") or []) + list(callbacks)
        wants_bar = config.get("enable_progress_bar", True) is not False
        if wants_bar and not any(isinstance(c, ProgressBar) for c in given):
            callbacks = list(callbacks) + [StepProgressBar()]
        if self.hparam_overrides:
            callbacks = list(callbacks) + [resume.ResumedOptimizerSettings(
                {k: new for k, (_, new) in self.hparam_overrides.items()})]
        trainer = super()._instantiate_trainer(with_streaming_checkpoints(config), callbacks)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                quiet.drop_unset_wandb_anonymous(logger)
                if self.subcommand is not None and logger.save_dir:
                    # W&B warns "git root ... does not exist" when its folder is not there yet
                    os.makedirs(logger.save_dir, exist_ok=True)
        return trainer

    def _finish_wandb(self) -> None:
        """End the W&B run now: its summary then prints as plain text (at exit it came with ANSI codes)."""
        wandb = sys.modules.get("wandb")
        if wandb is not None and getattr(wandb, "run", None) is not None:
            wandb.finish()

    def after_fit(self) -> None:
        self._finish_wandb()
        if not self.trainer.is_global_zero:
            return
        ckpt = self.trainer.checkpoint_callback
        if ckpt is None:
            print("checkpoint: none (trainer.enable_checkpointing is false)")
        else:
            print(f"checkpoint: {ckpt.best_model_path or ckpt.last_model_path or 'none saved'}")
        saver = next((c for c in self.trainer.callbacks if isinstance(c, RunConfigSaver)), None)
        if saver is not None and saver.config_path:
            print(f"config:     {saver.config_path}")

    def after_validate(self) -> None:
        self._finish_wandb()

    def _run_subcommand(self, subcommand: str) -> None:
        """Lightning turns Ctrl-C during ``fit`` into a graceful shutdown and then ``sys.exit(1)``, leaving
        SIGINT ignored: give the dispatcher the interrupt back (exit 130, as every command; 143 when it was
        SIGTERM, ``termination.was_terminated``) and Ctrl-C its handler."""
        import signal

        from .termination import Terminated, was_terminated

        handler = signal.getsignal(signal.SIGINT)
        try:
            super()._run_subcommand(subcommand)
        except SystemExit as e:
            if getattr(self, "trainer", None) is not None and self.trainer.interrupted and e.code == 1:
                raise (Terminated() if was_terminated() else KeyboardInterrupt()) from None
            raise
        finally:
            if handler is not None:
                signal.signal(signal.SIGINT, handler)


@contextlib.contextmanager
def _command_line(args: list[str] | None) -> Iterator[None]:
    """Make ``sys.argv`` the command being run while LightningCLI runs it.

    LightningCLI reads ``sys.argv`` (and warns when given ``args`` while ``sys.argv`` holds other
    arguments), and Lightning's DDP launcher starts the other local ranks by re-running ``sys.argv``: so a
    command started from Python (``ttrl demo``, tests) runs as ``<prog> <args>``; ``args=None`` keeps the
    real command line.
    """
    if args is None:
        yield
        return
    saved = sys.argv
    sys.argv = [saved[0] if saved else "ttrl", *args]
    try:
        yield
    finally:
        sys.argv = saved


class _ParseOnlyCLI(TTRLCLI):
    """Parses and checks the config against the class signatures; builds nothing."""

    says_its_choices = False  # the run that is built from the config says them

    def instantiate_classes(self) -> None:
        pass


def _check_config_files(args: list[str]) -> None:
    """Every ``--config FILE`` is UTF-8 text: jsonargparse's reader ended in a ``UnicodeDecodeError`` traceback."""
    for k, arg in enumerate(args):
        path = args[k + 1] if arg == "--config" and k + 1 < len(args) else (
            arg.split("=", 1)[1] if arg.startswith("--config=") else None)
        if path is None or not os.path.isfile(path):
            continue
        with open(path, "rb") as fh:
            raw = fh.read()
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(f"{path}: not UTF-8 text (byte 0x{raw[err.start]:02x} at position {err.start}); "
                            "save the config as UTF-8") from None


def make_cli(args: list[str] | None, run: bool = True, cli_class: type[TTRLCLI] = TTRLCLI) -> TTRLCLI:
    """Build (and with ``run=True`` run) the CLI; ``args=None`` reads ``sys.argv``; ``--debug`` is taken out
    (it keeps jsonargparse's full error reports). Lightning's own refusal of a trainer setting
    (``MisconfigurationException``: ``max_steps=-5``) is a one-line user error."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    os.environ.setdefault("WANDB_MODE", "offline")
    return_large_blocks()  # TTRL_MMAP_THRESHOLD: freed activations leave the process (cli.allocator)
    args = list(sys.argv[1:] if args is None else args)
    ShortErrorParser.verbose = debug_requested(args)
    _check_config_files(args)
    try:
        return _build_cli(args, run, cli_class)
    except MisconfigurationException as err:
        if ShortErrorParser.verbose:
            raise
        raise UserError(" ".join(str(err).split())) from None


def _build_cli(args: list[str], run: bool, cli_class: type[TTRLCLI]) -> TTRLCLI:
    with _command_line([a for a in args if a != DEBUG_FLAG]):
        return cli_class(
            pl.LightningModule,
            pl.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            trainer_defaults={"logger": DEFAULT_LOGGER},
            # prog: "ttrl" also under `python -m ttrl_lightning.cli`
            parser_kwargs={"parser_mode": "omegaconf", "prog": "ttrl"},
            parser_class=ShortErrorParser,
            save_config_callback=RunConfigSaver,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            run=run,
        )


def parse_config(args: list[str]) -> Namespace:
    """The config that ``ttrl fit <args>`` would run (``args`` without the subcommand), parsed and checked
    against the class signatures (logger folders resolved, see module doc), without building any class."""
    return make_cli(list(args), run=False, cli_class=_ParseOnlyCLI).config


def main(argv: list[str] | None = None) -> int:
    """``argv`` starts with the subcommand (``fit``, ``validate``, ...); ``None`` reads ``sys.argv``.

    An error in the user's input raises :class:`~ttrl_lightning.errors.UserError` (a wrong option or config
    value as :class:`~ttrl_lightning.cli.parse_errors.CommandLineError`, condensed to one line): the ``ttrl``
    dispatcher prints it as ``ttrl fit: <message>`` and exits 1.
    """
    make_cli(None if argv is None else list(argv))
    return 0


def fit_main(argv: list[str]) -> int:
    return main(["fit", *argv])


def validate_main(argv: list[str]) -> int:
    return main(["validate", *argv])
