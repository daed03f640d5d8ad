"""Short argument errors for ``ttrl fit|validate``: jsonargparse's nested report condensed to one line.

LightningCLI (jsonargparse) answers a wrong option with the whole usage (about 50 lines) and a nested report
of every type it tried, e.g. for ``--model.init_args.temperature=abc``::

    Parser key "model":
      Does not validate against any of the Union subtypes
      Subtypes: [<class 'lightning.pytorch.core.module.LightningModule'>, <class 'NoneType'>]
      Errors:
        - Problem with given class_path 'ttrl_lightning.modules.GRPOModule':
            Parser key "temperature":
              Expected a <class 'float'>. Got value: abc
        - Expected a <class 'NoneType'>
      Given value type: <class 'jsonargparse._util.NestedArg'>
      Given value: NestedArg(key='temperature', val='abc')

:func:`condense` keeps the path of keys and what is wrong::

    model.init_args.temperature: Expected a <class 'float'>. Got value: abc (GRPOModule)

:class:`ShortErrorParser` raises it as a :class:`CommandLineError`, which ``ttrl fit`` prints as one line
(exit code 1). With ``TTRL_DEBUG=1`` (or ``--debug``) jsonargparse's full report is printed instead.
"""
from __future__ import annotations

import re

from lightning.pytorch.cli import LightningArgumentParser

from ttrl_lightning.errors import UserError

_KEY = re.compile(r'^Parser key "([^"]+)":\s*(.*)$')
_CLASS = re.compile(r"^(?:- )?Problem with given class_path '([^']+)':\s*(.*)$")
#: lines of the report that describe jsonargparse's attempts, not the user's mistake
_NOISE = (
    re.compile(r"^Does not validate against any of the Union subtypes"),
    re.compile(r"^Subtypes: "),
    re.compile(r"^Errors:$"),
    re.compile(r"^Given value( type)?: "),
    re.compile(r"^Subclass types expect one of:"),
    re.compile(r"^- a (class path|dict with|dict without)"),
)
#: a union alternative that was not meant (``- Expected a <class 'NoneType'>``)
_OTHER_ALTERNATIVE = re.compile(r"^- Expected a ")


class CommandLineError(UserError):
    """A wrong option or config value of ``ttrl fit|validate``, as one line."""


def condense(message: str) -> str:
    """One line saying which key is wrong and why (see the module doc); the text itself when it is one line
    already."""
    lines = [line for line in message.splitlines() if line.strip()]
    if len(lines) <= 1:
        return message.strip()
    path: list[tuple[int, str]] = []  # (indent, key part) of the keys enclosing the current line
    classes: list[tuple[int, str]] = []
    leaves: list[tuple[str, str]] = []
    alternatives: list[tuple[str, str]] = []
    for raw in lines:
        indent = len(raw) - len(raw.lstrip())
        text = raw.strip()
        path = [p for p in path if p[0] < indent]
        classes = [c for c in classes if c[0] < indent]
        m = _KEY.match(text)
        if m:
            path.append((indent, m.group(1)))
            text = m.group(2)
        m = _CLASS.match(text)
        if m:
            path.append((indent, "init_args"))
            classes.append((indent, m.group(1)))
            text = m.group(2)
        if not text or any(n.match(text) for n in _NOISE):
            continue
        where = ".".join(p for _, p in path)
        cls = f" ({classes[-1][1].rpartition('.')[2]})" if classes else ""
        target = alternatives if _OTHER_ALTERNATIVE.match(text) else leaves
        target.append((where, text.removeprefix("- ") + cls))
    found = leaves or alternatives
    if not found:
        return " ".join(line.strip() for line in lines)
    where, what = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{where}: {what}{more}" if where else what + more


class ShortErrorParser(LightningArgumentParser):
    """LightningCLI's parser, raising :class:`CommandLineError` with the condensed message instead of printing
    the usage and exiting (only where it would exit: jsonargparse's internal tries are left alone)."""

    #: set by ``ttrl fit --debug`` / ``TTRL_DEBUG=1``: keep jsonargparse's full report
    verbose = False

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or self.verbose:
            return super().error(message, ex)
        raise CommandLineError(with_moved_option(condense(message))) from ex


_NOT_ACCEPTED = re.compile(r"^(\S*init_args): (?:Option|Key) '([\w.]+)' is not (?:accepted|expected)")


def with_moved_option(line: str) -> str:
    """``line``, plus where the option moved when it names a former flat module option (``temperature`` ->
    ``sampling.temperature``: ``modules.specs.MOVED_ARGUMENTS``)."""
    from ttrl_lightning.modules.specs import MOVED_ARGUMENTS

    m = _NOT_ACCEPTED.match(line)
    if m and m.group(2) in MOVED_ARGUMENTS:
        return f"{line}: it moved to {m.group(1)}.{MOVED_ARGUMENTS[m.group(2)]}"
    return line
