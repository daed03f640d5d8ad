"""A study as a file: :class:`StudySpec`, read from YAML by :func:`load_spec` and checked as it is read.

A study is a start (a checkpoint, an SFT run per start seed, or a gold-reward warm-up), question splits with
sizes, a TTRL config, arms (each a labeler plus **config overrides as data**: nested YAML merged into the TTRL
config), the run seeds, the evaluation (splits, samples per question, temperature, evaluation seeds apart from
the run seeds) and the comparisons to report. ``configs/study/*.yaml`` hold the project's studies; every key is
described beside the dataclass field it fills.

Every error in a spec is one line naming the file and the key (an unknown key, arm or split, a split larger than
its pool, a value of the wrong type): :class:`SpecError`, a :class:`~ttrl_lightning.errors.UserError`.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError

__all__ = ["SpecError", "StartSpec", "SplitSource", "QuestionsSpec", "ArmSpec", "TrainSpec", "EvaluationSpec",
           "ReportSpec", "StudySpec", "load_spec", "spec_from_dict", "CONTROL_LABELERS", "GOLD_LABELER"]

#: the labelers that are controls, not label-free methods: what a method's gain is measured against
CONTROL_LABELERS = ("random_reward", "null_reward", "format_reward")
#: the labeler that reads the gold answers (RLVR's upper bound)
GOLD_LABELER = "gold_reward"


class SpecError(UserError):
    """A study spec that cannot be run: the message names the file and the key."""


@dataclass(frozen=True)
class StartSpec:
    """Where every arm starts.

    ``kind``: ``checkpoint`` (``path``: a checkpoint folder or ``.ckpt``), ``sft`` (``config``: an SFT config,
    packaged name or path, run once per ``seeds`` entry for ``steps`` steps with ``overrides``; with
    ``exclude_splits`` its traces skip every question of the study's splits) or ``warmup`` (gold-reward RL from
    ``path`` on the questions of split ``split`` for ``epochs`` epochs, with the study's TTRL config and
    ``overrides``: SRT's curriculum step)."""

    kind: str = "checkpoint"
    path: str | None = None
    config: str | None = None
    seeds: list[int] = field(default_factory=lambda: [0])
    steps: int | None = None
    overrides: dict = field(default_factory=dict)
    exclude_splits: bool = True
    split: str | None = None
    epochs: int = 1


@dataclass(frozen=True)
class SplitSource:
    """One split: ``n`` distinct questions of ``task`` (a generated task or ``reasoning_gym:<name>``, with
    ``task_kwargs``) drawn with ``seed``, ``instruction`` appended; for ``kind: scenes``, ``task`` is the scene
    question kind."""

    n: int
    task: str
    seed: int = 0
    task_kwargs: dict = field(default_factory=dict)
    instruction: str | None = None


@dataclass(frozen=True)
class QuestionsSpec:
    """The study's question splits, cut in order and pairwise disjoint by problem (``data.splits``).

    ``kind``: ``task`` (text questions) or ``scenes`` (image questions, ``generate.scene_questions``);
    ``task``, ``seed``, ``task_kwargs``, ``instruction``: the defaults of every split; ``splits``: name -> a
    size, or a mapping of a size ``n`` and any default to override (another task for an "other task" split)."""

    kind: str = "task"
    task: str | None = None
    seed: int = 0
    task_kwargs: dict = field(default_factory=dict)
    instruction: str | None = None
    splits: dict = field(default_factory=dict)

    def sources(self, source: str = "") -> dict[str, SplitSource]:
        out = {}
        for name, value in self.splits.items():
            given = {"n": value} if not isinstance(value, Mapping) else dict(value)
            merged = {"task": self.task, "seed": self.seed, "task_kwargs": dict(self.task_kwargs),
                      "instruction": self.instruction, **given}
            out[name] = _build(SplitSource, merged, f"{source + ': ' if source else ''}questions.splits.{name}")
        return out


@dataclass(frozen=True)
class ArmSpec:
    """One arm: its ``labeler`` (default: the arm's name) and ``overrides``, nested config merged into the TTRL
    config after the study's own (``{"model": {"init_args": {"voting": {"num_votes": 8}}}}``)."""

    labeler: str = ""
    overrides: dict = field(default_factory=dict)

    @property
    def role(self) -> str:
        """``gold`` (reads the gold answers), ``control`` (:data:`CONTROL_LABELERS`), ``label_budget`` (gold on a
        share of the questions: ``voting.gold_budget`` in its overrides) or ``label_free``."""
        if self.labeler == GOLD_LABELER:
            return "gold"
        if self.labeler in CONTROL_LABELERS:
            return "control"
        voting = ((self.overrides.get("model") or {}).get("init_args") or {}).get("voting") or {}
        return "label_budget" if voting.get("gold_budget") else "label_free"


@dataclass(frozen=True)
class TrainSpec:
    """The TTRL runs: ``config`` (packaged name or path), the splits they train on (``split``), validate on
    (``validation``; None: no curve) and calibrate on (``calibration``: pixel's labelled dev-cal split), ``steps``
    (None: the config's), ``epochs`` (None: the config's) and ``overrides`` for every arm; ``keep_checkpoints``:
    False deletes a run's checkpoints once it is in the record (a real model's are GBs)."""

    config: str = ""
    split: str = "train"
    validation: str | None = None
    calibration: str | None = None
    steps: int | None = None
    epochs: int | None = None
    overrides: dict = field(default_factory=dict)
    keep_checkpoints: bool = True


@dataclass(frozen=True)
class EvaluationSpec:
    """The evaluation of the start and of every run: avg@k / maj@k on ``splits`` with ``k`` samples per question
    at ``temperature`` / ``top_p`` (None: the TTRL config's ``eval`` values) and ``max_new_tokens`` (None: its
    sampling's). Run seed ``s`` is evaluated, and the start beside it, with evaluation seed ``seed_offset + s``:
    evaluation seeds are never training seeds."""

    splits: list[str] = field(default_factory=list)
    k: int = 8
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    seed_offset: int = 1000
    batch_size: int = 32

    def seed_for(self, run_seed: int) -> int:
        return self.seed_offset + run_seed


@dataclass(frozen=True)
class ReportSpec:
    """What the report compares: every arm on ``split`` against the start and each of ``controls`` (arm names),
    the gold-gain share against ``gold`` (an arm name, or None); ``alpha``, ``bootstrap`` replicates and their
    fixed ``bootstrap_seed``."""

    split: str = ""
    controls: list[str] = field(default_factory=list)
    gold: str | None = None
    alpha: float = 0.05
    bootstrap: int = 10_000
    bootstrap_seed: int = 0


@dataclass(frozen=True)
class StudySpec:
    """A whole study (module docstring). ``out``: the folder of its record and runs; ``numerics``: ``portable``
    (the demo's pinned float kernels, ``cli.numerics``) or ``native``."""

    name: str
    out: str
    start: StartSpec
    questions: QuestionsSpec
    train: TrainSpec
    arms: dict[str, ArmSpec]
    seeds: list[int]
    evaluation: EvaluationSpec
    report: ReportSpec
    numerics: str = "native"
    description: str = ""
    source: str = field(default="", compare=False)

    def identity(self) -> dict:
        """What the record is bound to: everything that changes a measured number (arms and seeds aside,
        which a study may extend; the output folder, the description and the file's own path aside)."""
        d = dataclasses.asdict(self)
        for key in ("arms", "seeds", "out", "description", "source", "name", "report"):
            d.pop(key)
        d["start"].pop("seeds")
        d["train"].pop("keep_checkpoints")
        return d

    def run_key(self, arm: str, start_seed: int, seed: int) -> str:
        return f"{arm}/start{start_seed}/seed{seed}"


# -- reading -------------------------------------------------------------------------------------------------

_SECTIONS = {"start": StartSpec, "questions": QuestionsSpec, "train": TrainSpec, "evaluation": EvaluationSpec,
             "report": ReportSpec}


def _type_ok(value: Any, annotation: str) -> bool:
    if value is None:
        return "None" in annotation
    if annotation.startswith("int") or annotation == "int | None":
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation.startswith("float"):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if annotation.startswith("str"):
        return isinstance(value, str)
    if annotation.startswith("bool"):
        return isinstance(value, bool)
    if annotation.startswith("dict"):
        return isinstance(value, Mapping)
    if annotation.startswith("list[int]"):
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if annotation.startswith("list[str]"):
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return True


def _build(cls, given: Any, where: str):
    """``cls(**given)`` with every key known and of its field's type; else a one-line :class:`SpecError`."""
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise SpecError(f"{where}: a mapping is expected, got {type(given).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    for key, value in given.items():
        if key not in fields:
            raise SpecError(f"{where}: unknown key {key!r} (known: {', '.join(fields)})")
        if not _type_ok(value, str(fields[key].type)):
            raise SpecError(f"{where}.{key}: {value!r} is not of type {fields[key].type}")
    missing = [n for n, f in fields.items() if n not in given and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise SpecError(f"{where}: missing key {missing[0]!r}")
    return cls(**{k: (dict(v) if isinstance(v, Mapping) else v) for k, v in given.items()})


def _positive(value: int | None, where: str, low: int = 1) -> None:
    if value is not None and value < low:
        raise SpecError(f"{where}: must be >= {low}, got {value}")


def spec_from_dict(data: Any, source: str = "<spec>") -> StudySpec:
    """A checked :class:`StudySpec` from a parsed YAML mapping (``source`` names it in errors)."""
    from ..modules.ttrl.labelers import TTRL_LABELERS

    if not isinstance(data, Mapping):
        raise SpecError(f"{source}: a study spec is a mapping, got {type(data).__name__}")
    top = {f.name for f in dataclasses.fields(StudySpec) if f.name != "source"}
    for key in data:
        if key not in top:
            raise SpecError(f"{source}: unknown key {key!r} (known: {', '.join(sorted(top))})")
    for key in ("name", "out", "start", "questions", "train", "arms", "seeds", "evaluation", "report"):
        if key not in data:
            raise SpecError(f"{source}: missing key {key!r}")
    sections = {name: _build(cls, data[name], f"{source}: {name}") for name, cls in _SECTIONS.items()}
    from .questions import QUESTION_KINDS  # the builders' registries name the kinds (imported here: they import this)
    from .starts import START_KINDS

    for name, registry in (("start", START_KINDS), ("questions", QUESTION_KINDS)):
        if sections[name].kind not in registry:
            raise SpecError(f"{source}: {name}.kind {sections[name].kind!r} is not one of "
                            f"{', '.join(registry.names())}")
    arms_given = data["arms"]
    if not isinstance(arms_given, Mapping) or not arms_given:
        raise SpecError(f"{source}: arms must be a non-empty mapping of arm name -> {{labeler, overrides}}")
    arms = {}
    for name, value in arms_given.items():
        value = {} if value is None else value
        arm = _build(ArmSpec, value, f"{source}: arms.{name}")
        arm = dataclasses.replace(arm, labeler=arm.labeler or str(name).split("+")[0])
        if arm.labeler not in TTRL_LABELERS:
            raise SpecError(f"{source}: arms.{name}: unknown labeler {arm.labeler!r} (known: "
                            f"{', '.join(sorted(TTRL_LABELERS))})")
        arms[str(name)] = arm
    seeds = data["seeds"]
    if not _type_ok(seeds, "list[int]") or not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise SpecError(f"{source}: seeds must be a non-empty list of distinct integers >= 0, got {seeds!r}")
    for key in ("name", "out"):
        if not isinstance(data[key], str) or not data[key].strip():
            raise SpecError(f"{source}: {key} must be a non-empty string")
    numerics = data.get("numerics", "native")
    if numerics not in ("portable", "native"):
        raise SpecError(f"{source}: numerics must be portable or native, got {numerics!r}")
    spec = StudySpec(name=data["name"], out=data["out"], arms=arms, seeds=list(seeds), numerics=numerics,
                     description=str(data.get("description", "")), source=source, **sections)
    _check(spec, source)
    return spec


def _check(spec: StudySpec, source: str) -> None:
    """Cross-field checks: every split named exists, sizes and counts are in range, the report's arms exist."""
    q, t, e, r, s = spec.questions, spec.train, spec.evaluation, spec.report, spec.start
    splits = q.sources(source)
    if not splits:
        raise SpecError(f"{source}: questions.splits is empty")
    for name, src in splits.items():
        _positive(src.n, f"{source}: questions.splits.{name}.n")
        if not src.task:
            raise SpecError(f"{source}: questions.splits.{name}: no task (set questions.task or the split's task)")

    def known_split(value: str | None, where: str) -> None:
        if value is not None and value not in splits:
            raise SpecError(f"{source}: {where}: unknown split {value!r} (splits: {', '.join(splits)})")

    known_split(t.split, "train.split")
    known_split(t.validation, "train.validation")
    known_split(t.calibration, "train.calibration")
    known_split(s.split, "start.split")
    if not e.splits:
        raise SpecError(f"{source}: evaluation.splits is empty")
    for name in e.splits:
        known_split(name, "evaluation.splits")
    known_split(r.split, "report.split")
    if r.split not in e.splits:
        raise SpecError(f"{source}: report.split {r.split!r} is not evaluated (evaluation.splits: "
                        f"{', '.join(e.splits)})")
    if not t.config:
        raise SpecError(f"{source}: train.config is missing")
    _positive(t.steps, f"{source}: train.steps")
    _positive(t.epochs, f"{source}: train.epochs")
    _positive(e.k, f"{source}: evaluation.k")
    _positive(e.batch_size, f"{source}: evaluation.batch_size")
    _positive(e.max_new_tokens, f"{source}: evaluation.max_new_tokens")
    if e.seed_offset <= max(spec.seeds) and e.seed_offset >= 0:
        raise SpecError(f"{source}: evaluation.seed_offset {e.seed_offset} would make an evaluation seed equal a "
                        f"run seed (seeds up to {max(spec.seeds)}); use an offset above every run seed")
    if e.temperature is not None and e.temperature < 0:
        raise SpecError(f"{source}: evaluation.temperature must be >= 0, got {e.temperature}")
    for name in r.controls:
        if name not in spec.arms:
            raise SpecError(f"{source}: report.controls: unknown arm {name!r} (arms: {', '.join(spec.arms)})")
    if r.gold is not None and r.gold not in spec.arms:
        raise SpecError(f"{source}: report.gold: unknown arm {r.gold!r} (arms: {', '.join(spec.arms)})")
    if not 0 < r.alpha < 1:
        raise SpecError(f"{source}: report.alpha must be in (0, 1), got {r.alpha}")
    _positive(r.bootstrap, f"{source}: report.bootstrap", 100)
    if s.kind == "checkpoint" and not s.path:
        raise SpecError(f"{source}: start.path is needed for start.kind checkpoint")
    if s.kind == "sft" and not s.config:
        raise SpecError(f"{source}: start.config is needed for start.kind sft")
    if s.kind == "warmup" and not (s.path and s.split):
        raise SpecError(f"{source}: start.path and start.split are needed for start.kind warmup")
    if not _type_ok(s.seeds, "list[int]") or not s.seeds or len(set(s.seeds)) != len(s.seeds) or min(s.seeds) < 0:
        raise SpecError(f"{source}: start.seeds must be a non-empty list of distinct integers >= 0")
    _positive(s.steps, f"{source}: start.steps")
    _positive(s.epochs, f"{source}: start.epochs")


def load_spec(path: str) -> StudySpec:
    """The :class:`StudySpec` in the YAML file ``path`` (a packaged name such as ``study/demo.yaml`` is found
    with ``cli.configs.config_path``)."""
    from omegaconf import OmegaConf

    from ..cli.configs import config_path

    resolved = path if os.path.exists(path) else config_path(path)
    if not os.path.isfile(resolved):
        raise SpecError(f"{path}: no such study config")
    try:
        data = OmegaConf.to_container(OmegaConf.load(resolved), resolve=True)
    except Exception as e:  # noqa: BLE001  (a YAML or interpolation error: one line)
        raise SpecError(f"{path}: not a readable YAML study config ({str(e).splitlines()[0][:200]})")
    return spec_from_dict(data, path)
