"""Strict option types and the parser whose errors are user errors (ttrl_lightning/cli/arguments.py)."""
import argparse

import pytest

from ttrl_lightning.cli.arguments import (MAX_SEED, CommandParser, OptionError, finite_float, given, integer,
                                          nonnegative_float, nonnegative_int, positive_float, positive_int,
                                          refuse_duplicates, seed, strict_bool, unit_float)
from ttrl_lightning.errors import UserError


@pytest.mark.parametrize("fn, good, bad", [
    (integer, {"3": 3, "-2": -2, "+7": 7}, ["3.0", "1e3", "true", "", "x", "0x10"]),
    (positive_int, {"1": 1, "32": 32}, ["0", "-3", "2.5", "nan"]),
    (nonnegative_int, {"0": 0, "2000": 2000}, ["-5", "1.0"]),
    (seed, {"0": 0, str(MAX_SEED): MAX_SEED}, ["-1", str(MAX_SEED + 1), "1.5"]),
    (finite_float, {"1.25": 1.25, "-3": -3.0, "1e-3": 1e-3}, ["nan", "inf", "-inf", "1e400", "x", ""]),
    (positive_float, {"0.3": 0.3}, ["0", "-1", "nan", "inf"]),
    (nonnegative_float, {"0": 0.0, "1.25": 1.25}, ["-0.1", "nan"]),
    (unit_float, {"0": 0.0, "1": 1.0, "0.5": 0.5}, ["1.01", "-0.01", "nan"]),
])
def test_types_accept_and_refuse(fn, good, bad):
    for text, value in good.items():
        assert fn(text) == value
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match=repr(text).replace("+", r"\+")):
            fn(text)


def test_strict_bool():
    for text in ("true", "True", "1", "yes", "YES"):
        assert strict_bool(text) is True
    for text in ("false", "0", "no", "No"):
        assert strict_bool(text) is False
    for text in ("flase", "ture", "", "2", "y", "on"):
        with pytest.raises(argparse.ArgumentTypeError, match="true/false"):
            strict_bool(text)


def test_parser_errors_are_user_errors_naming_the_flag():
    p = CommandParser(prog="ttrl x")
    p.add_argument("--subsets", type=positive_int, default=100)
    p.add_argument("--target", default="a")
    with pytest.raises(OptionError, match=r"^argument --subsets: must be an integer >= 1, got '0' "
                                          r"\(see `ttrl x --help`\)$") as info:
        p.parse_args(["--subsets", "0"])
    assert isinstance(info.value, UserError)
    with pytest.raises(OptionError, match="unrecognized arguments: --targ"):  # no abbreviations
        p.parse_args(["--targ", "b"])
    assert p.parse_args(["--target=b"]).target == "b"
    assert given(["--target=b"], "--target") and given(["--target", "b"], "--target")
    assert not given(["--targets", "b"], "--target")


def test_help_shows_every_default(capsys):
    p = CommandParser(prog="ttrl x", epilog="exit codes: ...")
    p.add_argument("--n", nargs="+", type=positive_int, default=[8, 16], help="budgets")
    p.add_argument("--alpha", type=unit_float, default=None, help="alpha when given")
    p.add_argument("--pool", required=True, help="the pool")
    p.add_argument("--quiet", action="store_true", help="no bar")
    with pytest.raises(SystemExit) as info:
        p.parse_args(["--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "budgets (default: 8 16)" in text
    assert "alpha when given (default" not in text and "the pool (default" not in text
    assert "no bar (default" not in text and "exit codes: ..." in text


def test_refuse_duplicates():
    p = CommandParser(prog="ttrl x")
    refuse_duplicates(p, "--n", [8, 16, 32])
    with pytest.raises(OptionError, match=r"argument --n: 16 is given twice"):
        refuse_duplicates(p, "--n", [8, 16, 16])
