"""Answer extraction and answer equivalence (VisConf appendix A, "Answer extraction and normalization").

Three public functions and one shared label, one module each:

* :func:`extract_answer` (:mod:`.extract`) -- the final answer of one response: the last well-formed
  ``\\boxed{...}`` (or ``\\fbox{...}``), multiple-choice answers canonicalised to the upper-case option letter
  (:mod:`.choices`), then conservative final-line / final-sentence fallbacks ("The answer is X",
  "Answer: X", "Final answer: X"); :data:`NO_ANSWER` when nothing is found.
* :func:`answers_equal` (:mod:`.equivalence`) -- are two extracted answers the same answer?
  Normalised-string fast path, then numeric / LaTeX equivalence through ``math_verify``
  (``0.5 == \\frac{1}{2} == 1/2``, ``x=3 == 3``, ``10^{2} == 100``). :data:`NO_ANSWER` never equals
  anything, itself included.
* :func:`canonical_answer_classes` (:mod:`.classes`) -- group one question's answers into equivalence
  classes for voting; here all :data:`NO_ANSWER` strings share one class (VisConf votes them as one shared
  label).
* :data:`ANSWER_EXTRACTORS` (:mod:`.extractors`) -- extractors by name (``final_answer`` = :func:`extract_answer`,
  ``last_number`` for arithmetic tasks), so training and evaluation read answers the same way.
* :data:`NO_ANSWER` (:mod:`.label`) -- the shared label of an unextractable response.

:mod:`.latex` holds the brace-aware LaTeX scanning both extraction and equivalence use; :mod:`.budget` the
screen and the soft time limit of a comparison; :mod:`.symbolic` math-verify's parse and verify of one pair,
which :mod:`.symbolic_worker` runs in a worker process that is killed when it overruns; :mod:`.fused_format` the
text format of Self-Harmony's fused Reframe-and-Solve generation (read by ``data.tasks`` and ``pseudo_labels``).
"""
from .classes import canonical_answer_classes
from .equivalence import answers_equal, equivalence_stats
from .extract import extract_answer
from .extractors import ANSWER_EXTRACTORS, last_number
from .label import NO_ANSWER

__all__ = [
    "NO_ANSWER",
    "extract_answer",
    "answers_equal",
    "canonical_answer_classes",
    "equivalence_stats",
    "ANSWER_EXTRACTORS",
    "last_number",
]
