"""RaPR / RaCPR (our reading, docstring of eval.process_metrics) on hand-worked chains; the report."""
import pytest

from ttrl_lightning.eval.process_metrics import matched_steps, process_report, racpr, rapr
from ttrl_lightning.rollout.agent import Trajectory


def test_hand_worked_chains():
    ref = ["OCR", "ZOOM", "OCR"]
    # a failed ZOOM then a good one: 3 matched of 4 calls -> RaPR 1, RaCPR F1(3/4, 1) = 6/7
    tools, errors = ["OCR", "ZOOM", "ZOOM", "OCR"], [None, "empty_crop", None, None]
    assert rapr(tools, errors, ref) == 1.0
    assert racpr(tools, errors, ref) == pytest.approx(2 * 0.75 * 1 / 1.75)
    # wrong order: LCS(SEG, OCR; OCR ZOOM OCR) = 1 -> RaPR 1/3, RaCPR F1(1/2, 1/3) = 0.4
    assert rapr(["SEG", "OCR"], [None, None], ref) == pytest.approx(1 / 3)
    assert racpr(["SEG", "OCR"], [None, None], ref) == pytest.approx(0.4)
    assert rapr([], [], ref) == racpr([], [], ref) == 0.0
    assert racpr(["OCR"], ["bad_call"], ["OCR"]) == 0.0


def test_gates_drop_low_fidelity_and_incoherent_steps():
    tools, errors = ["OCR", "ZOOM", "OCR"], [None, None, None]
    ref = ["OCR", "ZOOM", "OCR"]
    assert matched_steps(tools, errors, ref, fidelity=[0.9, 0.1, None]) == 2  # ZOOM below gamma = 0.2
    emb = [[1.0, 0.0], [0.0, 1.0], [0.1, 1.0]]  # cos(step 0, step 1) = 0 < tau = 0.3
    assert matched_steps(tools, errors, ref, embeddings=emb) == 2
    assert matched_steps(tools, errors, ref, embeddings=emb, tau=-1.0) == 3
    with pytest.raises(ValueError, match="fidelity"):
        matched_steps(tools, errors, ref, fidelity=[1.0])


def _traj(steps, latencies):
    return Trajectory("q", "", None, steps, latencies)


def test_report_counts_errors_lengths_and_latency():
    ok = '{"count":1}'
    bad = '{"error":"bad_call","message":"x"}'
    t1 = _traj([{"name": "SEG", "args": {}, "text": ok}], [0.5])
    t2 = _traj([{"name": None, "args": None, "text": bad}, {"name": "seg", "args": {}, "text": ok}],
               [None, None])
    t3 = _traj([], [])
    rep = process_report([t1, t2, t3], [["SEG"], ["SEG"], ["SEG"]], [True, False, False])
    assert rep.accuracy == pytest.approx(1 / 3) and rep.calls == 3
    assert rep.tool_error_rate == pytest.approx(1 / 3) and rep.chain_length == pytest.approx(1.0)
    assert rep.rapr == pytest.approx(2 / 3)
    assert rep.racpr == pytest.approx((1 + 2 * 0.5 / 1.5) / 3)
    assert rep.latency == {"SEG": 0.5}
    with pytest.raises(ValueError, match="2 references"):
        process_report([t1], [["SEG"], ["SEG"]], [True])
