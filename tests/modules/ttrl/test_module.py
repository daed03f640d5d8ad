"""TTRLModule: votes -> pseudo-labels -> rewards on the trained rows, abstention, the fused view, the EMA
baseline, the monitoring metrics against hand counts, and gold never reaching a reward."""
from dataclasses import fields, replace

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader

from ttrl_lightning.answers import last_number
from ttrl_lightning.data.datamodules import collate_prompts
from ttrl_lightning.errors import UserError
from ttrl_lightning.modules import PolicySpec, TTRLModule
from ttrl_lightning.modules.step_records import VoteStep
from ttrl_lightning.modules.ttrl.specs import VotingSpec
from ttrl_lightning.modules.ttrl.monitor import ttrl_metrics
from ttrl_lightning.pseudo_labels import PSEUDO_LABELERS, pseudo_label
from ttrl_lightning.rollout import Rollouts, SamplingParams
from ttrl_lightning.rollout.requests import as_requests

TINY = PolicySpec(model="tiny:qwen2", lr=1e-2)
FUSED = "{prompt} reframe:"


class ScriptedEngine:
    """Returns fixed completions: ``script[prompt]`` is the list of texts of its rows (the first n are used);
    the token ids are the tokenizer's, so the policy can be trained on them."""

    def __init__(self, tokenizer, script: dict[str, list[str]], signals: bool = False):
        self.tokenizer, self.script, self.calls, self.signals = tokenizer, script, [], signals

    owns_weights, max_model_len = False, None  # the engine contract (rollout.base.RolloutEngine)

    @property
    def record_signals(self):
        return self.signals

    def sync_weights(self, model):
        return None

    def generate(self, model, prompts, params):
        prompts = [r.text for r in as_requests(prompts)]  # the texts the engine is asked to sample
        self.calls.append((list(prompts), params))
        tok = self.tokenizer
        texts = [t for p in prompts for t in self.script[p][: params.n]]
        enc = tok(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
        comp = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
        C = max(len(c) for c in comp)
        ids = torch.full((len(comp), C), tok.pad_token_id)
        mask = torch.zeros(len(comp), C, dtype=torch.long)
        for i, c in enumerate(comp):
            ids[i, : len(c)] = torch.tensor(c)
            mask[i, : len(c)] = 1
        n = params.n
        out = Rollouts(prompt_ids=enc["input_ids"].repeat_interleave(n, 0),
                       prompt_mask=enc["attention_mask"].repeat_interleave(n, 0), completion_ids=ids,
                       completion_mask=mask, texts=texts, group=torch.arange(len(prompts)).repeat_interleave(n),
                       n=n)
        if self.signals:  # a fixed, row-dependent entropy and log-prob (NaN outside the completion)
            row = torch.arange(len(comp), dtype=torch.float32)[:, None].expand(-1, C)
            out.signals = {name: torch.where(mask.bool(), v, float("nan")) for name, v in
                           {"entropy": 0.1 + 0.05 * (row % 4), "logprob": -0.05 - 0.02 * (row % 3)}.items()}
        return out


def _module(script, voting=None, **kw):
    """A TTRLModule on the scripted engine: M 6 votes, N 3 trained, ``last_number``, and ``voting``'s fields."""
    voting = VotingSpec(**{"num_votes": 6, "num_trained": 3, "answer_extractor": "last_number", **(voting or {})})
    m = TTRLModule(policy=TINY, voting=voting, **kw)
    m.engine = ScriptedEngine(m.tokenizer, script, signals=bool(m.signal_names))
    m.configure_model()
    return m


SCRIPT = {
    "1+4=": ["5", "5", "6", "5", "7", "5"],      # label 5; trained rows [5, 5, 6]
    "2+2=": ["x", "x", "4", "x", "3", "x"],      # unextractable majority: abstains
    "3+3=": ["6", "7", "7", "6", "7", "1"],      # label 7 (3 votes) although the gold is 6
}
BATCH = {"prompt": ["1+4=", "2+2=", "3+3="], "id": ["a", "b", "c"], "gold": ["5", "4", "6"]}


def test_majority_labels_rewards_on_first_n_rows_and_abstention():
    m = _module(SCRIPT)
    votes = m.rollout(BATCH)  # rollout only samples: all M votes
    assert votes.n == 6 and votes.texts == [t for p in BATCH["prompt"] for t in SCRIPT[p]]
    assert m.engine.calls[0][1].n == 6  # M votes sampled
    scored = m.scored(votes, BATCH)
    trained = scored.rollouts
    assert trained.n == 3 and trained.texts == ["5", "5", "6", "x", "x", "4", "6", "7", "7"]
    assert scored.rewards.tolist() == [1, 1, 0, 0, 0, 0, 0, 1, 1]
    assert scored.group_mask.tolist() == [True, False, True]
    step = scored.detail
    assert isinstance(step, VoteStep) and step.votes is votes
    assert [lab.label for lab in step.labels] == ["5", None, "7"]
    # the module's label is the registry's label of the full vote set
    assert step.labels[2] == pseudo_label("majority", [{"answer": t} for t in SCRIPT["3+3="]])


def test_monitoring_metrics_by_hand():
    m = _module(SCRIPT)
    step = m.scored(m.rollout(BATCH), BATCH)
    got = ttrl_metrics(step, BATCH["gold"], None, m.counters, step_index=0)
    # labelled: a (5 = gold 5) and c (7 != gold 6); b abstains
    assert got["label_accuracy"] == pytest.approx(0.5) and got["err_at_sel"] == pytest.approx(0.5)
    assert got["coverage"] == pytest.approx(2 / 3) and got["abstention_rate"] == pytest.approx(1 / 3)
    assert got["accepted_per_1k"] == pytest.approx(1000 * 2 / 3)
    # majority ratio per question: 4/6, 4/6 (the unextractable class), 3/6
    assert got["majority_ratio"] == pytest.approx((4 / 6 + 4 / 6 + 3 / 6) / 3)
    # reward accuracy over the trained rows of labelled questions: a: 5,5,6 rewards 1,1,0 all agree with gold;
    # c: 6,7,7 rewards 0,1,1 vs correct 1,0,0 -> all three disagree
    assert got["reward_accuracy"] == pytest.approx(3 / 6)
    # online (pre-update) majority accuracy: a right, b wrong (majority unextractable), c wrong
    assert got["online_accuracy"] == pytest.approx(1 / 3)
    # vote accuracy (avg@M of the votes): a 4/6 right (gold 5), b 1/6 (gold 4), c 2/6 (gold 6)
    assert got["vote_accuracy"] == pytest.approx((4 / 6 + 1 / 6 + 2 / 6) / 3)
    # every vote is one or two characters and EOS: its tokens, counted by the tokenizer
    want = sum(len(m.tokenizer(t, add_special_tokens=False)["input_ids"]) + 1 for p in BATCH["prompt"]
               for t in SCRIPT[p])
    assert got["vote_tokens"] == want
    # a: both right; b: label abstains (counted apart); c: both wrong (7 vs gold 6)
    c = m.counters
    assert c.label_vs_majority == {"both_right": 1, "recovered": 0, "lost": 0, "both_wrong": 1, "abstained": 1}
    assert c.label_history == [(0, "a", "5"), (0, "b", None), (0, "c", "7")]
    # cumulative acceptance over a second identical step
    ttrl_metrics(step, BATCH["gold"], None, c, step_index=1)
    assert c.questions_seen == 6 and c.questions_accepted == 4
    # without gold: the label-free metrics only, nothing counted against gold
    assert set(ttrl_metrics(step, None, None, c, step_index=2)) == {"coverage", "abstention_rate",
                                                                     "accepted_per_1k", "majority_ratio", "vote_tokens",
                                                                     "flip_rate"}
    assert c.label_vs_majority["both_right"] == 2
    # a continuous or random reward says nothing about correctness: no reward accuracy for it
    assert "reward_accuracy" not in ttrl_metrics(step, BATCH["gold"], None, c, step_index=3,
                                                 rewards_are_labels=False)
    from ttrl_lightning.modules.ttrl.labelers import labeler_spec

    labelling = ("majority", "self_harmony", "pixel", "visconf", "gold_reward")
    assert [labeler_spec(n).labels for n in labelling] == [True] * 5
    assert [labeler_spec(n).labels for n in ("self_certainty", "entropy", "random_reward")] == [False] * 3


def _train_one_step(m, batch):
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    loader = DataLoader([{k: batch[k][i] for k in batch} for i in range(len(batch["prompt"]))],
                        batch_size=len(batch["prompt"]), collate_fn=collate_prompts)
    trainer.fit(m, loader)
    return trainer


def test_gold_never_reaches_a_reward():
    shuffled = dict(BATCH, gold=["6", "5", "nonsense"])
    runs = []
    for batch in (BATCH, shuffled):
        m = _module(SCRIPT)
        rewards = m.scored(m.rollout(batch), batch)
        m2 = _module(SCRIPT)
        _train_one_step(m2, batch)
        runs.append((rewards, {k: v.detach().clone() for k, v in m2.policy.state_dict().items()}, m2))
    (r0, w0, a), (r1, w1, b) = runs
    assert torch.equal(r0.rewards, r1.rewards) and torch.equal(r0.group_mask, r1.group_mask)
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    assert any(not torch.equal(w0[k], _module(SCRIPT).policy.state_dict()[k]) for k in w0)  # it did train
    assert a.counters.label_history == b.counters.label_history


def test_kl_quantiles_are_taken_over_the_tokens_that_carry_loss():
    """``kl_p50`` / ``kl_p95`` read the kept questions' kept rows only, the tokens the KL observation
    (``train/kl``, the PID controller's input) averages: not the abstained question's, not a dropped row's."""
    import dataclasses

    m = _module(SCRIPT)
    scored = m.scored(m.rollout(BATCH), BATCH)  # 3 questions x 3 trained rows; b (rows 3-5) abstains
    token_kl = torch.tensor([[1.0], [1.0], [100.0], [50.0], [50.0], [50.0], [3.0], [3.0], [3.0]])
    mask = torch.ones(9, 1)
    rows = torch.ones(9, dtype=torch.bool)
    rows[2] = False  # a near-duplicate left out of the update
    dropped = dataclasses.replace(scored, row_mask=rows)
    got = ttrl_metrics(dropped, None, None, m.counters, step_index=0, token_kl=token_kl, completion_mask=mask)
    assert got["kl_p50"] == pytest.approx(3.0) and got["kl_p95"] == pytest.approx(3.0)  # over 1, 1, 3, 3, 3
    kept = ttrl_metrics(scored, None, None, m.counters, step_index=1, token_kl=token_kl, completion_mask=mask)
    assert kept["kl_p95"] > 50  # row 2 kept: its 100 counts; b's 50s never do
    assert kept["kl_p50"] == pytest.approx(3.0)


def test_self_harmony_samples_the_fused_view_and_gates_its_rewards():
    fused = "STRATEGY: swap\nREWRITTEN PROBLEM: 4+1=\nSOLUTION: {}"
    script = {"1+4=": ["5", "6", "6", "5", "6", "9"],
              FUSED.format(prompt="1+4="): [fused.format(a) for a in ("5", "5", "5", "6", "5", "5")]}
    m = _module(script, voting={"labeler": "self_harmony", "fused_prompt_template": FUSED})
    batch = {"prompt": ["1+4="], "id": ["a"]}
    votes = m.rollout(batch)
    assert m.engine.calls[0][0] == ["1+4=", FUSED.format(prompt="1+4=")]
    scored = m.scored(votes, batch)
    trained = scored.rollouts
    assert trained.n == 3 and trained.completion_ids.shape[0] == 6  # two groups: original, fused
    # HMS: p0(5)=2/6 p1(5)=5/6 -> 0.476; p0(6)=3/6 p1(6)=1/6 -> 0.25: label 5, majority over both views too
    expected = pseudo_label("self_harmony", [{"text": t, "answer": last_number(t)} for t in script["1+4="]]
                            + [{"text": t, "answer": last_number(t), "view": "reframed"}
                               for t in script[FUSED.format(prompt="1+4=")]])
    assert expected.label == "5"
    torch.testing.assert_close(scored.rewards, torch.tensor(expected.rewards[0:3] + expected.rewards[6:9]))
    assert scored.rewards[3:].gt(0).all() and scored.rewards[3:].lt(1).all()  # gated by the JS penalty
    # the original view's majority is 6 (3 of 6); HMS recovers 5, the gold
    ttrl_metrics(scored, ["5"], None, m.counters, step_index=0)
    assert m.counters.label_vs_majority["recovered"] == 1 and m.counters.label_vs_majority["lost"] == 0


def test_ema_baseline_advantages_by_hand():
    m = _module(SCRIPT, advantage={"rule": "ema_baseline", "baseline_momentum": 0.5})
    scored = m.scored(m.rollout(BATCH), BATCH)
    trained = scored.rollouts
    adv = m.group_advantages(scored)
    r = torch.tensor([1, 1, 0, 0, 1, 1.0])  # accepted rows (a: 5 5 6 with label 5; c: 6 7 7 with label 7)
    b = r.mean()
    expect = (r - b) / (r - b).std()
    torch.testing.assert_close(adv[[0, 1, 2, 6, 7, 8]], expect)
    assert adv[3:6].eq(0).all()
    assert m.baseline == pytest.approx(float(b))
    # second step: b <- 0.5 b + 0.5 mean (same batch: unchanged), advantages use the old b
    adv2 = m.group_advantages(scored)
    torch.testing.assert_close(adv2, adv)


@pytest.fixture
def rejecting_labeler():
    @PSEUDO_LABELERS.register("_test_rejects_second")
    def lab(rollouts, *, choices=None):
        out = pseudo_label("majority", rollouts, choices=choices)
        return replace(out, row_mask=[j != 1 for j in range(len(rollouts))])

    yield "_test_rejects_second"
    PSEUDO_LABELERS._items.pop("_test_rejects_second", None)


def test_rows_rejected_from_the_update_get_zero_advantage(rejecting_labeler):
    m = _module(SCRIPT, voting={"labeler": rejecting_labeler})
    scored = m.scored(m.rollout(BATCH), BATCH)
    adv = m.group_advantages(scored)
    assert scored.row_mask.view(3, 3)[:, 1].eq(False).all()
    assert adv.view(3, 3)[:, 1].eq(0).all()
    assert adv.view(3, 3)[0, 2] != 0  # the others keep theirs


@pytest.mark.parametrize("kwargs, needle", [
    ({"voting": {"num_votes": 2, "num_trained": 4}}, r"voting\.num_trained \(N=4"),
    ({"voting": {"labeler": "nope"}}, r"voting\.labeler must be one of"),
    ({"voting": {"labeler": "self_harmony"}}, r"voting\.fused_prompt_template"),
    ({"voting": {"num_votes": 0}}, r"voting\.num_votes must be an integer >= 1"),
    ({"voting": {"warmup_majority_steps": 3}}, r"voting\.warmup_majority_steps is an option of self_harmony"),
    ({"voting": {"answer_extractor": "nope"}}, r"voting\.answer_extractor"),
    ({"voting": {"labler": "majority"}}, r"unknown voting field\(s\) \['labler'\]"),
    ({"advantage": {"rule": "value"}}, r"advantage\.rule"),
    ({"advantage": {"baseline_momentum": 1.0}}, r"advantage\.baseline_momentum"),
    ({"eval": {"k": 0}}, r"eval\.k must be"),
    ({"eval": {"top_p": 0}}, r"eval\.top_p must be in \(0, 1\]"),
])
def test_bad_arguments_name_themselves(kwargs, needle):
    with pytest.raises(UserError, match=needle):
        TTRLModule(policy=TINY, **kwargs)


def test_the_module_keeps_no_step_result_between_hooks():
    """The step's stages hand each other records; scoring twice gives the same record, and nothing of the
    step is left on the module (its attributes are its settings, its run state and its counters)."""
    m = _module(SCRIPT)
    m.renderer  # a setting built once at first use (the prompt rule, and the processor it reads), not step state
    before = set(vars(m))
    votes = m.rollout(BATCH)
    first, second = m.scored(votes, BATCH), m.scored(votes, BATCH)
    assert torch.equal(first.rewards, second.rewards) and first.detail.ids == second.detail.ids == ["a", "b", "c"]
    assert first.rewards.numel() == first.rollouts.completion_ids.shape[0]
    assert not {"rewards", "group_mask", "row_mask"} & {f.name for f in fields(first.detail)}  # stored once
    assert set(vars(m)) == before
    assert not [k for k in vars(m) if "step" in k.lower() or k.endswith("_kl")]


def test_pixel_gets_decisive_masks_reliability_and_its_labels():
    from ttrl_lightning.pseudo_labels.pixel.labeler import batch_reliability

    m = _module(SCRIPT, voting={"labeler": "pixel", "options": {"delta": 0.05}})
    assert m.advantage.rule == m.hparams.advantage["rule"] == "ema_baseline" and m.signal_names == ("entropy", "logprob")
    scored = m.scored(m.rollout(BATCH), BATCH)
    trained, step = scored.rollouts, scored.detail
    votes = m.engine.generate(None, BATCH["prompt"], SamplingParams(n=6))
    answers = [[last_number(t) for t in SCRIPT[p]] for p in BATCH["prompt"]]
    rel = batch_reliability([[None if a == "<NO_ANSWER>" else a for a in row] for row in answers])
    for q, p in enumerate(BATCH["prompt"]):
        rows = range(q * 6, q * 6 + 6)
        rollouts = [{"text": votes.texts[r], "answer": answers[q][r - q * 6],
                     "entropy": votes.signals["entropy"][r][votes.completion_mask[r].bool()].tolist(),
                     "logprob": votes.signals["logprob"][r][votes.completion_mask[r].bool()].tolist()} for r in rows]
        expect = pseudo_label("pixel", rollouts, delta=0.05, reliability=rel[q])
        assert step.labels[q].label == expect.label and step.labels[q].rewards == expect.rewards
        assert step.labels[q].info["weights"] == pytest.approx(expect.info["weights"])
    # exact duplicates of an earlier kept rollout are rejected from the update: a's rows "5", "5", "6"
    assert scored.row_mask.view(3, 3)[0].tolist() == [True, False, True]
    assert len(step.labels[0].row_mask) == 6 and step.labels[0].row_mask[:3] == [True, False, True]
    assert trained.n == 3


def test_flip_answers_perturbation_rewrites_a_share_of_each_group_and_rescores_it():
    from ttrl_lightning.modules.perturbations import rewrite_answer, wrong_answer
    from ttrl_lightning.rollout.signal_recording import replay_token_signals

    script = {"1+4=": ["\\boxed{5}"] * 6, "3+3=": ["x \\boxed{6}", "7", "\\boxed{6}", "6", "6", "\\boxed{6}"]}
    m = _module(script, voting={"labeler": "pixel"}, perturbation={"name": "flip_answers", "share": 0.5})
    batch = {"prompt": ["1+4=", "3+3="], "id": ["a", "b"], "gold": ["5", "6"]}
    votes = m.sample_votes(batch["prompt"], 0)
    from ttrl_lightning.modules.perturbations import VOTE_PERTURBATIONS

    out = VOTE_PERTURBATIONS["flip_answers"](m, votes, batch, share=0.5)
    for q, gold in enumerate(batch["gold"]):
        texts = out.texts[q * 6:(q + 1) * 6]
        flipped = [t for t, orig in zip(texts, votes.texts[q * 6:(q + 1) * 6]) if t != orig]
        assert len(flipped) == 3 and all(last_number(t) == wrong_answer(gold) for t in flipped)
    assert rewrite_answer("a \\boxed{1} b \\boxed{2}", "9") == "a \\boxed{1} b \\boxed{9}"
    assert rewrite_answer("so 12 then 13", "9") == "so 12 then 9" and wrong_answer("6") == "16"
    # the flipped rows' signals are the policy's own on the new text: equal to a replay of the result
    replay = replay_token_signals(m.policy, out, 1.0)
    keep = out.completion_mask.bool()
    torch.testing.assert_close(out.signals["entropy"][keep], replay["entropy"][keep])
    # within the module: the labeler sees the perturbed votes (half of "a"'s votes now say 15)
    step = m.scored(m.rollout(batch), batch).detail
    assert sorted(step.answers[0]) == ["15"] * 3 + ["5"] * 3


def test_unknown_perturbation_is_named():
    with pytest.raises(UserError, match="perturbation"):
        TTRLModule(policy=TINY, perturbation={"name": "nope"})


def test_questions_with_images_are_refused_for_a_text_only_model_not_sampled_without_them():
    m = _module(SCRIPT)
    with pytest.raises(UserError, match="tiny:qwen2 is a text-only model"):
        m.rollout(dict(BATCH, images=[[], ["scene.png"], []]))
    assert not m.engine.calls


def test_agent_votes_are_labelled_with_the_visfid_of_their_tool_steps():
    """TTRL as a tool-using agent: the votes' tool steps are scored against the question's other answered
    votes (VisFid), the signals replayed over the trajectories, the first N trajectories trained on."""
    pytest.importorskip("cv2")
    from tests.rollout._scripted import ScriptedAgentEngine
    from ttrl_lightning.data.cota import agent_prompts
    from ttrl_lightning.fidelity import STEP_FIDELITY
    from ttrl_lightning.rollout.agent import AgentRollouts
    from ttrl_lightning.tools import format_tool_call, run_tool

    rows = agent_prompts(0, 1, ["count"])
    batch = collate_prompts(rows)
    # per vote: SEG query, answer. The majority answer is 2, so VisFid's references are the set S of votes
    # 0-2 (issue 21, D10): vote 3 answered too, but another answer, and is no one's reference
    plan = [("red", "2"), ("red", "2"), ("square", "2"), ("square", "3")]
    seen = {0: 0, 1: 0}

    called = [j for j, (q, _) in enumerate(plan) if q]

    def script(prompt, turn):  # the rows of a turn come in order: turn 0 all votes, turn 1 those that called
        k = seen[turn]
        seen[turn] += 1
        if turn == 0:
            query, answer = plan[k]
            return format_tool_call("SEG", {"query": query}) if query else f"Answer: {answer}<eos>"
        return f"Answer: {plan[called[k]][1]}<eos>"

    policy = PolicySpec(model="tiny:qwen2", lr=1e-2, tiny_kwargs={"max_pos": 1024})  # room for observations
    m = TTRLModule(policy=policy, voting={"labeler": "pixel", "num_votes": 4, "num_trained": 2,
                                          "answer_extractor": "agent_answer",
                                          "options": {"delta": 0.0, "duplicate_threshold": None}},
                   engine={"name": "agent", "max_steps": 2, "max_turn_tokens": 16})
    assert m.engine.record_signals
    m.engine = ScriptedAgentEngine(m.tokenizer, script, max_steps=2, record_signals=True)
    m.configure_model()
    scored = m.scored(m.rollout(batch), batch)
    trained = scored.rollouts
    assert isinstance(trained, AgentRollouts) and trained.n == 2 and len(trained.trajectories) == 2
    assert [t.tools for t in trained.trajectories] == [["SEG"], ["SEG"]]
    image = rows[0]["prompt"].image
    red, square = (run_tool("SEG", {"query": q}, image=image).artifact for q in ("red", "square"))
    a = STEP_FIDELITY["SEG"](red, square)
    assert 0 < a < 1  # the two queries found partly different objects
    lab = scored.detail.labels[0]
    # vote 0: references votes 1 (same objects: 1) and 2 (a), not 3; vote 2: votes 0 and 1; vote 3: all of S
    assert lab.info["visual_fidelity"] == pytest.approx([(1 + a) / 2, (1 + a) / 2, a, (2 * a + 1) / 3])
    assert lab.label == "2" and scored.rewards.tolist() == [1.0, 1.0]
    # the signals were replayed over the model's own tokens, observations in context
    assert set(trained.signals) >= {"entropy", "logprob"}
    assert bool(torch.isfinite(trained.signals["entropy"][trained.completion_mask.bool()]).all())
    assert bool(torch.isnan(trained.signals["entropy"][trained.observation_mask.bool()]).all())


def test_agent_pixel_fits_its_calibration_on_the_datamodules_dev_cal_split(tmp_path):
    """Agent Pixel-TTRL with ``AgentPromptDataModule(n_calibration=...)``: the dev-cal split is drawn after
    train and validation (which it leaves as they were, sharing no task with them), and at fit start the
    module samples agent votes on it and fits pixel's temperature and conformal threshold, which the steps
    then label with."""
    pytest.importorskip("cv2")
    from tests.rollout._scripted import ScriptedAgentEngine
    from ttrl_lightning.data.cota import AgentPromptDataModule

    plain = AgentPromptDataModule(kinds=["count"], n_train=2, n_val=1, batch_size=2)
    dm = AgentPromptDataModule(kinds=["count"], n_train=2, n_val=1, batch_size=2, n_calibration=3)
    plain.setup(), dm.setup()
    assert plain.calibration_questions() == []
    cal = dm.calibration_questions()
    assert len(cal) == 3 and all(row["gold"] is not None for row in cal)
    assert [r["id"] for r in dm._train + dm._val] == [r["id"] for r in plain._train + plain._val]
    assert not {r["id"] for r in cal} & {r["id"] for r in dm._train + dm._val}
    with pytest.raises(ValueError, match="n_calibration"):
        AgentPromptDataModule(n_calibration=-1)

    policy = PolicySpec(model="tiny:qwen2", lr=1e-2, tiny_kwargs={"max_pos": 1024})
    m = TTRLModule(policy=policy, voting={"labeler": "pixel", "num_votes": 4, "num_trained": 2,
                                          "answer_extractor": "agent_answer", "options": {"delta": 0.0}},
                   engine={"name": "agent", "max_steps": 2, "max_turn_tokens": 16})
    m.engine = ScriptedAgentEngine(m.tokenizer, lambda prompt, turn: "Answer: 2<eos>", max_steps=2,
                                   record_signals=True)
    fitted = {}
    original = m.fit_calibration

    def spy(questions):
        fitted["ids"] = [q["id"] for q in questions]
        return original(questions)

    m.fit_calibration = spy
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(m, AgentPromptDataModule(kinds=["count"], n_train=2, n_val=1, batch_size=2, n_calibration=3))
    assert fitted["ids"] == [r["id"] for r in cal]
    assert m.calibration["num_questions"] == 3
    assert set(m.calibration["options"]) == {"temperature", "conformal_qhat"}


def test_agent_engine_options_are_checked():
    with pytest.raises(UserError, match="engine agent: .*max_steps"):
        TTRLModule(policy=TINY, engine={"name": "agent", "max_steps": 0})
    with pytest.raises(UserError, match="engine agent: .*unexpected keyword argument 'max_step'"):
        TTRLModule(policy=TINY, engine={"name": "agent", "max_step": 2})
    with pytest.raises(UserError, match="self_harmony samples a reframed view, which the prompts of AgentEngine"):
        TTRLModule(policy=TINY, voting={"labeler": "self_harmony", "fused_prompt_template": FUSED},
                   engine={"name": "agent"})


def test_gold_reward_control_is_handed_gold_and_random_reward_a_seed_per_step_and_question():
    m = _module(SCRIPT, voting={"labeler": "gold_reward"})
    scored = m.scored(m.rollout(BATCH), BATCH)
    # gold 5, 4, 6 against the trained rows [5, 5, 6], [x, x, 4], [6, 7, 7]; no question abstains
    assert scored.rewards.tolist() == [1, 1, 0, 0, 0, 1, 1, 0, 0]
    assert scored.group_mask.tolist() == [True, True, True]
    assert [lab.label for lab in scored.detail.labels] == ["5", "4", "6"]
    with pytest.raises(UserError, match="gold_reward rewards with the gold answers.*'b'"):
        m.scored(m.rollout(BATCH), dict(BATCH, gold=["5", None, "6"]))
    r = _module(SCRIPT, voting={"labeler": "random_reward"})
    first = [lab.rewards for lab in r.scored(r.rollout(BATCH), BATCH).detail.labels]
    assert first == [_module(SCRIPT, voting={"labeler": "random_reward"}).scored(
        r.rollout(BATCH), BATCH).detail.labels[q].rewards for q in range(3)]  # the same run draws the same
    assert len({tuple(x) for x in first}) == 3  # every question its own draw
    assert all(set(x) <= {0.0, 1.0} for x in first)


def test_pixel_warns_when_its_conformal_threshold_leaves_nothing_to_label():
    """qhat >= 1 (the gold answer without a vote on the dev-cal split) puts every voted answer in every
    prediction set: pixel would abstain on every question whose votes disagree, and the fit says so."""
    def questions(golds):
        return [{"id": i, "prompt": p, "gold": g} for i, (p, g) in enumerate(zip(BATCH["prompt"], golds))]

    m = _module(SCRIPT, voting={"labeler": "pixel", "options": {"alpha": 0.5}})
    with pytest.warns(UserWarning, match="qhat = 1 .*whose votes give more than one answer"):
        fitted = m.fit_calibration(questions(["99", "98", "97"]))  # no vote is ever right
    assert fitted["options"]["conformal_qhat"] >= 1
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = m.fit_calibration(questions(["5", "4", "7"]))  # the golds hold votes: a useful threshold
    assert fitted["options"]["conformal_qhat"] < 1
    # alpha is the calibration's option: the step labels with the fitted threshold, alpha not handed on
    m.calibration = fitted
    scored = m.scored(m.rollout(BATCH), BATCH)
    assert all(lab.info["prediction_set"] is not None for lab in scored.detail.labels)


def test_a_labeler_option_it_does_not_have_is_refused_when_the_module_is_built():
    with pytest.raises(UserError, match="voting.options: pixel has no option 'detla'; its options: delta, "):
        TTRLModule(policy=TINY, voting={"labeler": "pixel", "options": {"detla": 0.2}})
    with pytest.raises(UserError, match="majority has no option 'alpha'; its options: min_share, min_margin, max_share"):
        TTRLModule(policy=TINY, voting={"options": {"alpha": 0.1}})
    TTRLModule(policy=TINY, voting={"labeler": "pixel", "options": {"alpha": 0.2, "delta": 0.05}})
    TTRLModule(policy=TINY, voting={"labeler": "pixel", "options": {"target_coverage": 0.9}})


def test_label_free_stopping_ends_a_ttrl_run():
    """LabelFreeStopping reads the step's logged majority ratio from the trainer: with a rule that fires at
    the second step (min_delta 1: no value can set a new high; no rise required), the run ends there, not at max_steps, and
    the step it records is that batch's 0-based index (1), the step its metrics are logged under."""
    from ttrl_lightning.callbacks import LabelFreeStopping

    m = _module(SCRIPT)
    stopper = LabelFreeStopping(mode="stop", min_steps=1, patience=1, min_delta=1.0, min_rise=None)
    trainer = pl.Trainer(accelerator="cpu", max_steps=5, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         callbacks=[stopper])
    rows = [{k: BATCH[k][i] for k in BATCH} for i in range(len(BATCH["prompt"]))]
    trainer.fit(m, DataLoader(rows * 5, batch_size=len(rows), collate_fn=collate_prompts))
    assert trainer.global_step == 2 and stopper.flagged["step"] == 1
    assert len(stopper.history["train/majority_ratio"]) == 2
