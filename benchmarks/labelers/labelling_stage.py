"""Benchmark: TTRL's labelling stage, columnar (one sort, one layout) vs the former per-question loops.

The stage turns one step's votes (an engine's ``Rollouts``) into the ``RolloutRewards`` of the rows trained
on: group the votes by question, label each question (``pseudo_label``), lay the rewards and row masks out
on the first N rows of every prompt. ``modules.ttrl.labelling.label_votes`` (what ``TTRLModule.label_votes``
calls) groups the rows by one stable sort of their prompt index and lays the labels' [Q, V * M] rewards out by
one view/transpose; it is called here as the free function it is, with a ``LabellingContext`` and no module.
The baseline is the former code, kept here as the reference: a ``torch.nonzero`` per question and view to
find its rows, and a double Python loop over views and questions that copies each label's rewards and mask
into the [V * Q, N] layout.

Both run on the same votes (a tiny policy's tokenizer; synthetic answers and per-token signals, so no model is
sampled), for each labeler, in interleaved rounds; the outputs are checked equal (rewards, group and row masks,
labels) before any time is reported. Printed per labeler: the whole stage (grouping, labelling, layout) and the
form changes alone (grouping and layout, labelling excluded), ours / baseline per round, and the verdict
rule of ``benchmarks.common`` (no claim of a speed-up unless every round shows one). Writes JSON.

    python -m benchmarks.labelers.labelling_stage                     # 16 questions x 64 votes, 5 rounds
    python -m benchmarks.labelers.labelling_stage --questions 32 --votes 128 --rounds 7
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

from benchmarks.common import paired_ratios, paired_verdict

LABELERS = {  # VotingSpec fields of each labeler's run
    "majority": {},
    "self_harmony": {"fused_prompt_template": "{prompt} Reframe it, then solve."},
    "pixel": {"options": {"delta": 0.05}},
    "visconf": {},
}


class Setup:
    """What the stage reads besides the votes: the ``VotingSpec``, the labeler's spec, the ``LabellingContext``
    (a tiny policy's tokenizer) and the signals recorded (the labeler's)."""

    def __init__(self, voting: dict):
        from ttrl_lightning.models import load_tokenizer
        from ttrl_lightning.modules.ttrl import LabellingContext, labeler_spec
        from ttrl_lightning.modules.ttrl.specs import VotingSpec

        self.voting = VotingSpec(**voting)
        self.labeler = labeler_spec(self.voting.labeler)
        self.context = LabellingContext(load_tokenizer("tiny:qwen2"), 0, 0, self.voting.options)
        self.signal_names = tuple(self.labeler.signals)

    def label_votes(self, votes, batch):
        from ttrl_lightning.modules.ttrl.labelling import label_votes

        return label_votes(votes, batch, self.voting, self.context, signal_names=self.signal_names)

    def vote_views(self, num_questions: int) -> list[str]:
        from ttrl_lightning.modules.ttrl.labelling import vote_views

        return vote_views(self.labeler, num_questions)


def synthetic_votes(setup, Q: int, M: int, views: int, seed: int):
    """Q questions x views prompts x M votes: answers drawn from a few numbers per question, 1-12 completion
    tokens per vote, the labeler's per-token signals (NaN outside the completion, as an engine records them)."""
    from ttrl_lightning.rollout.base import Rollouts

    g = torch.Generator().manual_seed(seed)
    P, R = Q * views, Q * views * M
    lengths = torch.randint(1, 13, (R,), generator=g)
    C = int(lengths.max())
    mask = (torch.arange(C)[None, :] < lengths[:, None]).long()
    answers = torch.randint(0, 4, (R,), generator=g) + (torch.arange(R) // M % Q)
    texts = [f"so the answer is {int(a)}" for a in answers]
    signals = {}
    for name in setup.signal_names:
        values = torch.rand(R, C, generator=g) * (-1.0 if name == "logprob" else 1.0)
        signals[name] = torch.where(mask.bool(), values, float("nan"))
    ids = torch.randint(5, 100, (R, C), generator=g) * mask
    prompt = torch.ones(R, 4, dtype=torch.long)
    return Rollouts(prompt_ids=prompt, prompt_mask=torch.ones_like(prompt), completion_ids=ids,
                    completion_mask=mask, texts=texts, group=torch.arange(P).repeat_interleave(M), n=M,
                    signals=signals)


# ---------------------------------------------------------------------- the former code (the baseline)
def former_vote_groups(setup, votes, num_questions, views, choices):
    """The former ``votes_by_question``: a ``torch.nonzero`` per question and view."""
    from ttrl_lightning.answers import ANSWER_EXTRACTORS
    from ttrl_lightning.pseudo_labels.question_votes import QuestionVotes

    extract = ANSWER_EXTRACTORS[setup.voting.answer_extractor]
    prompt_of = votes.group.cpu()
    groups = []
    for q in range(num_questions):
        per_prompt = [torch.nonzero(prompt_of == p).flatten() for p in range(q, len(views), num_questions)]
        rows = torch.cat(per_prompt)
        view_of = [views[q + v * num_questions] for v, r in enumerate(per_prompt) for _ in range(len(r))]
        texts = [votes.texts[r] for r in rows.tolist()]
        signals = {s: votes.signals[s][rows] for s in setup.signal_names}
        groups.append(QuestionVotes.from_tensors([extract(t, choices[q]) for t in texts], texts, view_of, signals,
                                             votes.completion_mask[rows]))
    return groups


def former_layout(labels, Q: int, V: int, M: int, N: int):
    """The former double loop: each label's rewards and row mask copied into the [V * Q, N] layout."""
    rewards = torch.zeros(V * Q, N)
    update = torch.ones(V * Q, N, dtype=torch.bool)
    keep = torch.ones(V * Q, dtype=torch.bool)
    for v in range(V):
        for q, lab in enumerate(labels):
            g = v * Q + q
            rewards[g] = torch.tensor(lab.rewards[v * M: v * M + N], dtype=torch.float32)
            if lab.row_mask is not None:
                update[g] = torch.tensor(list(lab.row_mask)[v * M: v * M + N], dtype=torch.bool)
            keep[g] = not lab.abstain
    return rewards.reshape(-1), keep, update.reshape(-1)


def label_all(setup, votes, groups, choices):
    from ttrl_lightning.pseudo_labels import pseudo_label

    extra = setup.labeler.inputs(setup.context, votes, groups) if setup.labeler.inputs else \
        [{} for _ in groups]
    return [pseudo_label(setup.voting.labeler, group, choices=choices[q], **setup.voting.options,
                         **extra[q]) for q, group in enumerate(groups)]


def former_stage(setup, votes, batch, labels: list | None = None):
    """The former grouping, labelling (or the given ``labels``: the form changes alone) and layout."""
    Q = len(batch["prompt"])
    views = setup.vote_views(Q)
    choices = [None] * Q
    groups = former_vote_groups(setup, votes, Q, views, choices)
    labels = label_all(setup, votes, groups, choices) if labels is None else labels
    return former_layout(labels, Q, len(views) // Q, setup.voting.num_votes, setup.voting.num_trained)


def time_once(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    from ttrl_lightning.modules.ttrl.labelling import votes_by_question
    from ttrl_lightning.safe_files import atomic_write

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--questions", type=int, default=16)
    p.add_argument("--votes", type=int, default=64, help="M votes per prompt")
    p.add_argument("--trained", type=int, default=32, help="N rows trained on per prompt")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--labelers", nargs="+", choices=sorted(LABELERS), default=list(LABELERS))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="outputs/bench/labelling_stage.json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    results = {}
    for name in args.labelers:
        voting = {"labeler": name, "num_votes": args.votes, "num_trained": args.trained,
                  "answer_extractor": "last_number", **LABELERS[name]}
        setup = Setup(voting)
        Q = args.questions
        batch = {"prompt": [f"q{i}" for i in range(Q)], "id": [f"q{i}" for i in range(Q)]}
        votes = synthetic_votes(setup, Q, args.votes, len(setup.labeler.views), seed=0)
        ours = setup.label_votes(votes, batch)
        base_rewards, base_keep, base_rows = former_stage(setup, votes, batch)
        if not (torch.equal(ours.rewards, base_rewards) and torch.equal(ours.group_mask, base_keep)
                and torch.equal(ours.row_mask, base_rows)):
            print(f"{name}: the columnar stage and the former loops disagree; no timing reported")
            return 1
        former_groups = former_vote_groups(setup, votes, Q, setup.vote_views(Q), [None] * Q)
        if [list(g.answers) for g in former_groups] != ours.detail.answers:
            print(f"{name}: the vote groups differ; no timing reported")
            return 1
        views = setup.vote_views(Q)
        V, M, N = len(views) // Q, args.votes, args.trained
        stage = {"ours": [], "baseline": []}
        forms = {"ours": [], "baseline": []}
        for _ in range(args.rounds):
            stage["ours"].append(time_once(lambda: setup.label_votes(votes, batch)))
            stage["baseline"].append(time_once(lambda: former_stage(setup, votes, batch)))

            def ours_forms():
                votes_by_question(votes, Q, views, [None] * Q, setup.signal_names, setup.voting.answer_extractor)
                module_layout(setup, ours.detail.labels, Q, V, M, N)

            forms["ours"].append(time_once(ours_forms))
            forms["baseline"].append(time_once(lambda: former_stage(setup, votes, batch, labels=ours.detail.labels)))
        r_stage = paired_ratios(stage["baseline"], stage["ours"])
        r_forms = paired_ratios(forms["baseline"], forms["ours"])
        results[name] = {"stage_s": stage, "forms_s": forms, "stage_speedup": r_stage, "forms_speedup": r_forms,
                         "stage_verdict": paired_verdict(r_stage, 1.0), "forms_verdict": paired_verdict(r_forms, 1.0)}
        print(f"{name:>13}: stage {statistics.median(stage['ours']) * 1e3:8.1f} ms vs former "
              f"{statistics.median(stage['baseline']) * 1e3:8.1f} ms, former/ours x{statistics.median(r_stage):.2f} "
              f"({results[name]['stage_verdict']}); form changes alone {statistics.median(forms['ours']) * 1e3:.1f} "
              f"ms vs {statistics.median(forms['baseline']) * 1e3:.1f} ms, x{statistics.median(r_forms):.2f} "
              f"({results[name]['forms_verdict']})")
    payload = {"settings": vars(args), "machine": platform.processor() or platform.machine(),
               "torch": torch.__version__, "results": results}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with atomic_write(args.out) as fh:
        json.dump(payload, fh, indent=2)
    print(f"wrote {args.out}")
    return 0


def module_layout(setup, labels, Q, V, M, N):
    """Ours: the layout of ``label_votes`` on labels already computed."""
    from ttrl_lightning.modules.ttrl.labelling import trained_layout

    rewards = torch.tensor([lab.rewards for lab in labels], dtype=torch.float32)
    rows = torch.tensor([lab.row_mask if lab.row_mask is not None else [True] * (V * M) for lab in labels])
    return trained_layout(rewards, V, M, N), trained_layout(rows, V, M, N)


if __name__ == "__main__":
    sys.exit(main())
