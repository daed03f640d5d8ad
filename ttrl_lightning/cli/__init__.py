"""The ``ttrl`` command: one module per subcommand and this dispatcher.

Subcommands are registered by name (``SUBCOMMANDS``) and imported lazily, so ``ttrl bon`` never pays for
importing Lightning or transformers. Each entry is ``name -> ("module:function", one-line help)``; the
function takes the remaining argv list and returns an exit code.

========== ===================================== ==========================================
command    module                                what it does
========== ===================================== ==========================================
bon        :mod:`ttrl_lightning.cli.bon`         best-of-N evaluation of a rollout pool
pool       :mod:`ttrl_lightning.cli.pool`        simulate / validate / convert / merge rollout pools
fit        :mod:`ttrl_lightning.cli.fit`         training (LightningCLI), every phase
validate   :mod:`ttrl_lightning.cli.fit`         validation with a training config
eval       :mod:`ttrl_lightning.cli.eval`        avg@k / maj@k / pass@k of sampled completions
generate   :mod:`ttrl_lightning.cli.generate`    a rollout pool with per-token signals from a model
demo       :mod:`ttrl_lightning.cli.demo`        the README's main job (CPU)
study      :mod:`ttrl_lightning.cli.study`       an experiment from a config file, with intervals
questions  :mod:`ttrl_lightning.cli.questions`   a generated task (text or images) as questions
index      :mod:`ttrl_lightning.cli.index`       audit / describe an exemplar index
model      :mod:`ttrl_lightning.cli.model`       import a real checkpoint (SmolLM2, GGUF)
========== ===================================== ==========================================

``python -m ttrl_lightning.cli <command> ...`` is the same command without the console script (what
``torchrun -m`` and ``srun python -m`` launch). Packaged configs are found with
:func:`ttrl_lightning.cli.configs.config_path`.

Errors and exit codes, the same for every command (:func:`main`):

* 0: success;
* 1: a user error -- a :class:`~ttrl_lightning.errors.UserError` (bad option, refused file) or a missing,
  unreadable or directory path (``FileNotFoundError``, ``IsADirectoryError``, ``NotADirectoryError``,
  ``PermissionError``): one line ``ttrl <command>: <message>`` on stderr, no traceback; an unknown command
  is one line too;
* 130: interrupted (Ctrl-C): one line ``ttrl <command>: interrupted`` (``ttrl bon`` reports what it
  finished first and returns 130 itself);
* 143: terminated (SIGTERM: SLURM preemption, ``kill``, ``timeout``): handled as Ctrl-C
  (:mod:`.termination`: the same cleanup, ``ttrl generate`` keeps every finished question), then 143.

``--debug`` anywhere on the command line (removed before the command parses its options, and set as
``TTRL_DEBUG=1`` while it runs) or ``TTRL_DEBUG=1`` lets these errors propagate with their traceback.
"""
from __future__ import annotations

import contextlib
import errno
import importlib
import os
import sys

from ..errors import UserError
from .termination import interrupt_exit, sigterm_as_interrupt

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    # name: ("module:function", one-line help)
    "bon": ("ttrl_lightning.cli.bon:bon_main", "best-of-N evaluation of selection methods on a rollout pool"),
    "pool": ("ttrl_lightning.cli.pool:pool_main",
             "rollout pools: `ttrl pool simulate|validate|convert|merge`"),
    "fit": ("ttrl_lightning.cli.fit:fit_main",
            "train (LightningCLI): `ttrl fit --config configs/<phase>/<name>.yaml`"),
    "validate": ("ttrl_lightning.cli.fit:validate_main",
                 "validate a model with a training config (LightningCLI)"),
    "eval": ("ttrl_lightning.cli.eval:eval_main",
             "avg@k / maj@k / pass@k of k sampled completions per question (a model on a question set)"),
    "generate": ("ttrl_lightning.cli.generate:generate_main",
                 "sample N rollouts per question from a model into a rollout pool with per-token signals"),
    "demo": ("ttrl_lightning.cli.demo:demo_main", "the README's main job on the embedded default (CPU)"),
    "study": ("ttrl_lightning.cli.study:study_main",
              "an experiment as a config file: arms x seeds, per-question evaluation, paired 95% intervals"),
    "index": ("ttrl_lightning.cli.index:index_main",
              "exemplar index files: `ttrl index audit|info` (leakage audit of the retrieval index)"),
    "questions": ("ttrl_lightning.cli.questions:questions_main",
                  "a generated task (reasoning_gym:<name>, or scenes: image questions) as a question file for fit, "
                  "eval and generate"),
    "model": ("ttrl_lightning.cli.model:model_main",
              "real checkpoints: `ttrl model import --out DIR` (the packaged SmolLM2, or --gguf FILE)"),
}


def _usage() -> str:
    lines = ["usage: ttrl <command> [options]", "", "commands:"]
    for name, (_, help_) in SUBCOMMANDS.items():
        lines.append(f"  {name:<10} {help_}")
    lines.append("")
    lines.append("`ttrl <command> --help` for the options of one command.")
    return "\n".join(lines)


#: Exit code of a user error (an interrupt's: ``termination.EXIT_INTERRUPTED`` / ``EXIT_TERMINATED``).
EXIT_USER_ERROR = 1

#: Errors printed as one line (exit 1): the user's input, and paths the user gave that cannot be used.
USER_ERRORS = (UserError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError,
               FileExistsError)
#: errno values of an ``OSError`` that a user's path causes (besides the subclasses above): a symlink loop, a
#: name too long, a read-only file system
PATH_ERRNOS = (errno.ELOOP, errno.ENAMETOOLONG, errno.EROFS)

DEBUG_FLAG, DEBUG_ENV = "--debug", "TTRL_DEBUG"


def _debugging(argv: list[str]) -> tuple[bool, bool, list[str]]:
    """Whether tracebacks are asked for (``--debug``, or ``TTRL_DEBUG`` set to anything but empty, 0, false,
    no), whether by the flag, and ``argv`` without ``--debug``."""
    rest = [a for a in argv if a != DEBUG_FLAG]
    env = os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")
    flag = len(rest) < len(argv)
    return env or flag, flag, rest


@contextlib.contextmanager
def _debug_environment(flag: bool):
    """``--debug`` is ``TTRL_DEBUG=1`` for the command it runs (commands and the processes they start read
    the variable); the previous value is restored afterwards."""
    if not flag:
        yield
        return
    saved = os.environ.get(DEBUG_ENV)
    os.environ[DEBUG_ENV] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(DEBUG_ENV, None)
        else:
            os.environ[DEBUG_ENV] = saved


def _one_line(error: BaseException) -> str:
    """The message of a user error on one line; an ``OSError`` as ``path: reason`` (with what the reason means
    when a folder could not be made: a file in the way, a symlink loop)."""
    if isinstance(error, OSError) and error.filename is not None:
        reason = error.strerror or str(error)
        if isinstance(error, FileExistsError):
            blocker = "a broken or looping symlink" if os.path.islink(error.filename) and not \
                os.path.exists(error.filename) else "a file"
            reason += f" and is not a folder (a folder was to be made there: {blocker} is in the way)"
        elif error.errno == errno.ELOOP:
            reason += " (a symlink loop)"
        text = f"{error.filename}: {reason}"
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    """Run ``ttrl <command> ...``; ``argv`` defaults to ``sys.argv[1:]``. Returns the exit code (0, 1 for a
    user error printed as one line, 130 when interrupted; see the module doc); ``--help`` raises
    ``SystemExit(0)`` as argparse does."""
    debug, flag, argv = _debugging(list(sys.argv[1:] if argv is None else argv))
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"ttrl: unknown command {name!r}; commands: {', '.join(SUBCOMMANDS)} (see `ttrl --help`)",
              file=sys.stderr)
        return EXIT_USER_ERROR
    target, _ = SUBCOMMANDS[name]
    module_name, fn_name = target.split(":")
    try:
        with _debug_environment(flag), sigterm_as_interrupt():
            fn = getattr(importlib.import_module(module_name), fn_name)
            rc = fn(rest)
    except OSError as e:
        if debug or not (isinstance(e, USER_ERRORS) or e.errno in PATH_ERRNOS):
            raise
        print(f"ttrl {name}: {_one_line(e)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except USER_ERRORS as e:
        if debug:
            raise
        print(f"ttrl {name}: {_one_line(e)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as e:
        if debug:
            raise
        said, code = interrupt_exit(e)
        print(f"ttrl {name}: {said}", file=sys.stderr)
        return code
    return int(rc or 0)
