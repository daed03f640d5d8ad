"""Labeler specs: one spec per labeler, and pixel's decisive-token masks on agent rollouts laid on the very
indices of the per-token signals (issue 21, D5), successful tool calls only (D6)."""
import pytest
import torch

from ttrl_lightning.data.pool import VIEWS
from ttrl_lightning.modules.ttrl.labelers import TTRL_LABELERS, LabelerSpec, labeler_spec, pixel_inputs
from ttrl_lightning.pseudo_labels import PSEUDO_LABELERS, QuestionVotes, decisive_token_mask
from ttrl_lightning.rollout.agent import AgentRollouts, Trajectory
from ttrl_lightning.rollout.records import records_from_rollouts


def test_every_spec_names_a_registered_labeler_and_defaults_are_plain():
    assert set(TTRL_LABELERS.names()) <= set(PSEUDO_LABELERS.names())
    assert labeler_spec("no-such-labeler") == LabelerSpec()
    assert labeler_spec("self_harmony").views == VIEWS[:2] and labeler_spec("self_harmony").fused
    assert labeler_spec("pixel").advantage == "ema_baseline" and labeler_spec("majority").advantage == "group"


def _two_step_group():
    """Two agent rows. Row 0: a SEG call that ran (columns 0-2), its observation (3-4), a ZOOM call that
    failed (5-6), its observation (7-8), the answer (9-10), padding (11). Row 1: no tool, answer only (0-3)."""
    written = torch.tensor([[1, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0],
                            [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]])
    attention = torch.tensor([[1] * 11 + [0], [1] * 4 + [0] * 8])
    C = written.shape[1]
    steps = [{"name": "SEG", "args": {"query": "red"}, "text": '{"boxes": []}'},
             {"name": "ZOOM", "args": {"box": [0, 0, 1]}, "text": '{"error": "bad_arguments"}'}]
    trajs = [Trajectory("q", "c", "2", steps, [0.1, None]), Trajectory("q", "c", "3", [], [])]
    column = torch.arange(C, dtype=torch.float32)[None].expand(2, -1)
    entropy = torch.where(written.bool(), column, float("nan"))  # the entropy of column j is j
    return AgentRollouts(
        prompt_ids=torch.ones(2, 2, dtype=torch.long), prompt_mask=torch.ones(2, 2, dtype=torch.long),
        completion_ids=torch.arange(2 * C).view(2, C), completion_mask=written, texts=["a", "b"],
        group=torch.zeros(2, dtype=torch.long), n=2, signals={"entropy": entropy, "logprob": -entropy / 10},
        completion_attention=attention, observation_mask=attention - written,
        step_spans=[[(0, 3, 3, 5), (5, 7, 7, 9)], []], trajectories=trajs)


def test_decisive_masks_lie_on_the_model_tokens_of_successful_calls_and_the_answer():
    votes = _two_step_group()
    masks = votes.decisive_token_masks()
    # row 0's model tokens are columns 0 1 2 5 6 9 10: the SEG turn and the answer; the failed ZOOM turn not
    assert masks[0] == [True, True, True, False, False, True, True]
    assert masks[1] == [True] * 4  # no tool: the whole completion is the answer step
    records = records_from_rollouts(votes, ["q"], signals=("entropy", "logprob"))
    entropy = records[0]["rollouts"][0]["entropy"]
    assert len(entropy) == len(masks[0])
    assert [e for e, d in zip(entropy, masks[0]) if d] == [0, 1, 2, 9, 10]  # the decisive columns' signals
    # the columnar group a labeler reads holds the same tokens as the pool record, observations out
    group = QuestionVotes.from_tensors(["2", "3"], votes.texts, ["original"] * 2, votes.signals, votes.completion_mask)
    assert group.token_signal(0, "entropy", "pixel").tolist() == entropy
    assert group.token_signal(1, "entropy", "pixel").tolist() == [0, 1, 2, 3]
    assert group.signals["entropy"].lengths.tolist() == [7, 4]
    # the old reading: the legacy ids on the first n columns, observations included -> all True, shifted
    old = decisive_token_mask(votes.completion_ids[0, :7].tolist(), -1, -2, -3)
    assert old == [True] * 7 and old != masks[0]


def test_pixel_inputs_use_the_span_masks_for_agent_rollouts():
    votes = _two_step_group()
    for ro, traj in zip(votes.trajectories, ("2", "3")):
        assert ro.answer == traj
    group = QuestionVotes.from_tensors(["2", "2"], votes.texts, ["original"] * 2, votes.signals, votes.completion_mask)
    extra = pixel_inputs(None, votes, [group])
    assert extra[0]["decisive_masks"] == votes.decisive_token_masks()


def test_a_span_count_that_disagrees_with_the_steps_is_refused():
    votes = _two_step_group()
    votes.step_spans[0] = votes.step_spans[0][:1]
    with pytest.raises(ValueError, match="1 step spans for 2 recorded tool steps"):
        votes.decisive_token_masks()


def test_pixel_calibration_fits_on_the_score_training_applies(monkeypatch):
    """Pixelis sec. 3.2.3: the weights w_j = exp(-H_j) Cal_j VisFid_j r_j label the training questions, so the
    conformal threshold is fitted on the same weights, VisFid included (split conformal covers only the score
    it was fitted on)."""

    from ttrl_lightning.modules.ttrl import labelers as ttrl_labelers
    from ttrl_lightning.pseudo_labels.pixel.labeler import calibrate_pixel

    def ro(answer, h, lp):
        return {"answer": answer, "text": answer, "entropy": [h], "logprob": [lp]}

    groups = [[ro("5", 0.1, -0.1), ro("6", 0.1, -0.2), ro("5", 0.3, -0.4)],
              [ro("7", 0.2, -0.1), ro("8", 0.1, -0.9), ro("8", 0.2, -0.3)],
              [ro("1", 0.2, -0.2), ro("2", 0.1, -0.1), ro("1", 0.4, -0.5)]]
    golds = ["5", "8", "1"]
    vis = [[0.1, 1.0, 0.2], [1.0, 0.3, 0.1], None]
    extra = [{"decisive_masks": None, "reliability": None, **({"visual_fidelity": v} if v else {})} for v in vis]
    monkeypatch.setattr(ttrl_labelers, "pixel_inputs", lambda context, votes, groups: extra)
    context = ttrl_labelers.LabellingContext(options={"alpha": 0.4})  # the hooks need no module
    fitted = ttrl_labelers.pixel_calibration(context, None, groups, golds, [None] * 3)
    with_vis = calibrate_pixel(groups, golds, alpha=0.4, visual_fidelity=vis)
    without = calibrate_pixel(groups, golds, alpha=0.4)
    assert fitted["conformal_qhat"] == with_vis.conformal_qhat != without.conformal_qhat
    # a target coverage is the calibration's option too, fitted on the same weights
    context = ttrl_labelers.LabellingContext(options={"target_coverage": 0.9})
    fitted = ttrl_labelers.pixel_calibration(context, None, groups, golds, [None] * 3)
    assert fitted["conformal_qhat"] == calibrate_pixel(groups, golds, target_coverage=0.9,
                                                       visual_fidelity=vis).conformal_qhat
