"""Strict option parsing shared by the commands: argparse ``type=`` functions and a parser whose errors are
:class:`~ttrl_lightning.errors.UserError` s.

A lenient option gives wrong numbers silently (``--subsets 0`` averages over nothing and prints ``nan``,
``--reframed flase`` meant ``False``), so every option is checked when the command line is parsed, and the
message names the flag: ``argument --subsets: must be an integer >= 1, got '0'``.

* ``type=`` functions: :func:`integer`, :func:`positive_int`, :func:`nonnegative_int`, :func:`seed`,
  :func:`finite_float`, :func:`positive_float`, :func:`nonnegative_float`, :func:`unit_float`,
  :func:`strict_bool`; each raises ``argparse.ArgumentTypeError``, which argparse prefixes with the flag.
* :class:`CommandParser`: an ``ArgumentParser`` whose ``error`` raises :class:`OptionError` (a ``UserError``)
  instead of printing the usage and exiting 2, so the dispatcher prints one line and exits 1 like any other
  user error; ``--help`` still prints and exits 0. Its subparsers are ``CommandParser`` s too; abbreviated
  flags are refused; the help shows every default (:class:`HelpFormatter`).
* :func:`given`: whether a flag was given on the command line (to tell an explicit value from a default).
* :func:`refuse_duplicates`: a repeated value of a list option (``--n 8 8``) would be evaluated twice.
* :data:`EXIT_CODES`: the help epilog every command shares.
"""
from __future__ import annotations

import argparse
import math
import re
from typing import Iterable, NoReturn

from ..errors import UserError

__all__ = ["CommandParser", "EXIT_CODES", "HelpFormatter", "OptionError", "finite_float", "integer",
           "nonnegative_float", "nonnegative_int", "positive_float", "positive_int", "given",
           "refuse_duplicates", "seed", "strict_bool", "unit_float"]

#: The exit codes of ``ttrl bon`` and ``ttrl pool`` (help epilog).
EXIT_CODES = """exit codes:
  0    success
  1    user error: a bad option, or a file that is missing or refused; one line on stderr names the flag,
       or the file, record and field (`--debug` or TTRL_DEBUG=1 shows the traceback)
  130  interrupted (Ctrl-C)"""

#: The largest seed: ``torch.Generator.manual_seed`` takes 64-bit values and seeds are derived as
#: ``seed * 1_000_003 + ...`` (:mod:`ttrl_lightning.seeding`), so seeds stay below 2**32.
MAX_SEED = 2 ** 32 - 1

_INTEGER = re.compile(r"[+-]?[0-9]+")
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


class OptionError(UserError):
    """A bad command-line option: the message names the flag (``argument --n: ...``)."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's and epilog's line breaks and appends ``(default: X)`` to the help of every
    option that has a default value (not to required options, flags, or options whose default is "not
    given")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("%(default)" in text or action.required or action.nargs == 0
                or action.default in (None, argparse.SUPPRESS)):
            return text
        default = action.default
        if isinstance(default, (list, tuple)):
            return f"{text} (default: {' '.join(map(str, default))})"
        return f"{text} (default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises :class:`OptionError` on a bad command line (see the module doc),
    shows defaults in its help (:class:`HelpFormatter`) and takes no abbreviated flags (``--targ`` is not
    ``--target``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise OptionError(f"{message} (see `{self.prog} --help`)")


def _number_error(text: str, what: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"must be {what}, got {text!r}")


def integer(text: str) -> int:
    """A whole number written as digits (``3``; not ``3.0``, ``1e3`` or ``true``)."""
    if not _INTEGER.fullmatch(text.strip()):
        raise _number_error(text, "an integer")
    return int(text)


def _bounded_int(text: str, low: int, what: str, high: int | None = None) -> int:
    if len(text.strip()) > 40 or not _INTEGER.fullmatch(text.strip()):  # int() refuses 4,300+ digits
        raise _number_error(text, what)
    value = int(text)
    if value < low or (high is not None and value > high):
        raise _number_error(text, what)
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _bounded_int(text, 1, "an integer >= 1")


#: the most samples per question a sampling command takes (TTRL votes 64, pass@k studies go to 1,024): one
#: prompt's samples are one batch, and a larger count overflowed inside the sampler (``--k 10^20``)
MAX_SAMPLES = 4096


def samples_per_question(text: str) -> int:
    """Samples per question: an integer in [1, ``MAX_SAMPLES``]."""
    return _bounded_int(text, 1, f"an integer in [1, {MAX_SAMPLES}]", MAX_SAMPLES)


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    return _bounded_int(text, 0, "an integer >= 0")


def seed(text: str) -> int:
    """A random seed: an integer in [0, 2**32 - 1]."""
    return _bounded_int(text, 0, f"an integer in [0, {MAX_SEED}]", MAX_SEED)


def finite_float(text: str) -> float:
    """A real number, finite in float64 (not ``nan``, ``inf`` or ``1e400``)."""
    try:
        value = float(text)
    except ValueError:
        raise _number_error(text, "a finite number") from None
    if not math.isfinite(value):
        raise _number_error(text, "a finite number")
    return value


def _bounded_float(text: str, ok, what: str) -> float:
    try:
        value = finite_float(text)
    except argparse.ArgumentTypeError:
        raise _number_error(text, what) from None
    if not ok(value):
        raise _number_error(text, what)
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    return _bounded_float(text, lambda v: v > 0, "a finite number > 0")


def nonnegative_float(text: str) -> float:
    """A finite number >= 0."""
    return _bounded_float(text, lambda v: v >= 0, "a finite number >= 0")


def unit_float(text: str) -> float:
    """A number in [0, 1]."""
    return _bounded_float(text, lambda v: 0 <= v <= 1, "a number in [0, 1]")


def strict_bool(text: str) -> bool:
    """``true``/``false``, ``yes``/``no`` or ``1``/``0`` (any case); anything else is refused."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"must be true/false, yes/no or 1/0, got {text!r}")


def given(argv: Iterable[str], flag: str) -> bool:
    """Whether ``flag`` is on the command line (``--flag V`` or ``--flag=V``; abbreviations are refused)."""
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def refuse_duplicates(parser: argparse.ArgumentParser, flag: str, values: Iterable, key=None) -> None:
    """``parser.error`` naming ``flag`` when two of ``values`` are equal (under ``key``)."""
    seen = {}
    for v in values:
        k = key(v) if key else v
        if k in seen:
            parser.error(f"argument {flag}: {v!r} is given twice (as {seen[k]!r} and {v!r})"
                         if seen[k] != v else f"argument {flag}: {v!r} is given twice")
        seen[k] = v
