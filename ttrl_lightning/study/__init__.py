"""Studies: an experiment as a config file (``configs/study/*.yaml``), run by ``ttrl study``, its verdict a set
of paired confidence intervals.

========================  ===========================================================================
module                    what it holds
========================  ===========================================================================
:mod:`.spec`              :class:`StudySpec`, read from YAML and checked (one-line errors)
:mod:`.questions`         the question splits as files, one builder per kind (registry)
:mod:`.starts`            the start's checkpoint per start seed: checkpoint, SFT, warm-up (registry)
:mod:`.runs`              one ``ttrl fit`` run from a composed config; its curves
:mod:`.evaluate`          avg@k / maj@k with per-question counts, one evaluation seed per run seed
:mod:`.record`            the resumable record, never wiped, bound to its spec and start digests
:mod:`.stats`             paired hierarchical bootstrap, Holm, the share of the gold gain
:mod:`.report`            the tables and the plot from a record
:mod:`.runner`            :func:`run_study`: questions, starts, runs, in order
========================  ===========================================================================
"""
from .record import StudyRecord
from .spec import StudySpec, load_spec

__all__ = ["StudySpec", "StudyRecord", "load_spec"]
