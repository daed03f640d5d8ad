"""The real-model benchmark's study goal (benchmarks/training/real_model_ttrl.py ``_goal``), worked by hand on a
report built here: no model is run."""
import pytest

pytest.importorskip("matplotlib")

from benchmarks.training.real_model_ttrl import _figure, _goal, _horizon_table, _table  # noqa: E402


def _run(arm, seed, curve):
    return {"arm": arm, "seed": seed, "task": "t", "curves": {"val/avg@8": [list(p) for p in curve]}}


def _report(arms):
    """arms: {arm: [(final held-out avg, curve), ...]} one per seed; the checkpoint's held-out avg is 0.30."""
    runs, summary = {}, {"before": {"held_out": {"avg": 0.30}}, "arms": {}}
    for arm, seeds in arms.items():
        ends = [end for end, _ in seeds]
        summary["arms"][arm] = {"seeds": list(range(len(seeds))),
                                "held_out": {"avg": sum(ends) / len(ends), "avg_spread": max(ends) - min(ends)}}
        for seed, (_, curve) in enumerate(seeds):
            runs[f"t/{arm}/seed{seed}"] = _run(arm, seed, curve)
    return {"runs": runs, "summary": {"t": summary}, "before": {"t": {"held_out": {"avg": 0.30}}},
            "settings": {"k": 16}}


def test_the_goal_by_hand():
    report = _report({
        "random_reward": [(0.20, [(8, 0.25)]), (0.22, [(8, 0.25)])],
        # end 0.40 (spread 0.04): 0.10 above the checkpoint and 0.19 above random; lowest mean point 0.28 at
        # step 8, 0.02 below the checkpoint, within the spread: met
        "good": [(0.38, [(8, 0.27), (16, 0.35)]), (0.42, [(8, 0.29), (16, 0.41)])],
        # the same end, but its mean curve dips to 0.25 (0.05 below the checkpoint, more than 0.04): not met
        "dips": [(0.38, [(8, 0.24), (16, 0.35)]), (0.42, [(8, 0.26), (16, 0.41)])],
        # ends 0.32 with spread 0.04: above the checkpoint by 0.02 only
        "flat": [(0.30, [(8, 0.30)]), (0.34, [(8, 0.31)])],
        "one_seed": [(0.50, [(8, 0.45)])],
        "gold_reward": [(0.90, [(8, 0.80)]), (0.90, [(8, 0.80)])],
    })
    lines = [line for line in _goal(report, "t", 8).splitlines() if line and not line.startswith("goal, ")]
    said = {line.split(" (")[0]: line for line in lines}
    assert set(said) == {"good", "dips", "flat", "one_seed"}  # the controls are not label-free arms
    assert said["good"].endswith("goal met") and "lowest mean avg@8 28.0 (step 8)" in said["good"]
    # a failed condition is named with the figure it was decided on: the mean curve's lowest point (0.25 at
    # step 8) against its step 0 (0.30, the checkpoint: no start validation here), the end against the checkpoint
    assert said["dips"].endswith("not met, it fails: never more than the spread below the checkpoint: lowest "
                                 "-5.0 vs its step 0")
    assert said["flat"].endswith("not met, it fails: ends above the checkpoint by more than the spread: +2.0")
    assert said["one_seed"].endswith("not decided (one seed: its spread is unknown)")
    # without a random control the last check cannot hold
    del report["summary"]["t"]["arms"]["random_reward"]
    assert "ends above random by more than the spread: no random control" in _goal(report, "t", 8)


def test_the_long_horizon_table_gives_each_runs_step_means():
    """Per run: the step means of reward accuracy, flip rate and coverage (n/a where a metric was not logged)
    and its minutes, beside the held-out peak."""
    report = _report({"majority": [(0.30, [(8, 0.26), (16, 0.34)])], "random_reward": [(0.20, [(8, 0.25)])]})
    report["settings"]["val_every"] = 8
    majority, rand = report["runs"]["t/majority/seed0"], report["runs"]["t/random_reward/seed0"]
    majority["curves"].update({"train/reward_accuracy": [[0, 0.5], [1, 0.6], [2, 0.7]],
                               "train/flip_rate": [[1, 0.25], [2, 0.5]], "train/coverage": [[0, 1.0], [1, 0.5]]})
    rand["curves"]["train/coverage"] = [[0, 1.0]]  # a random reward is not a label: no reward accuracy
    majority["seconds"], rand["seconds"] = 1800.0, 90.0
    table = [line for line in _horizon_table(report, "t", 8).splitlines() if line]
    assert table[1].endswith("reward acc flip rate coverage   min")
    row = {line.split()[0]: line.split() for line in table[2:]}
    assert row["t/majority/seed0"][1:4] == ["34.0", "(", "16)"]  # the peak (its step)
    assert row["t/majority/seed0"][-4:] == ["0.60", "0.38", "0.75", "30.0"]
    assert row["t/random_reward/seed0"][-4:] == ["n/a", "n/a", "1.00", "1.5"]


def test_a_log_written_before_gaps_loses_its_repeats_at_the_steps_that_labelled_nothing():
    """Steps 1 and 2 labelled no question (coverage 0): their label accuracy, reward accuracy and KL P95 are
    the repeats of step 0's that Lightning logged; they are dropped and the run's means taken again. An arm that
    trains its unlabelled questions (the negative branch) keeps its KL there."""
    from benchmarks.training.real_model_ttrl import _without_repeats

    def run(arm):
        return {"arm": arm, "curves": {
            "train/coverage": [[0, 0.5], [1, 0.0], [2, 0.0], [3, 1.0]],
            "train/label_accuracy": [[0, 1.0], [1, 1.0], [2, 1.0], [3, 0.0]],
            "train/reward_accuracy": [[0, 0.9], [1, 0.9], [2, 0.9], [3, 0.3]],
            "train/kl_p95": [[0, 0.2], [1, 0.2], [2, 0.2], [3, 0.4]],
            "train/vote_accuracy": [[0, 0.1], [1, 0.2], [2, 0.3], [3, 0.4]]}}

    plain = _without_repeats(run("pixel"))
    assert plain["curves"]["train/label_accuracy"] == [[0, 1.0], [3, 0.0]] and plain["label_accuracy"] == 0.5
    assert plain["curves"]["train/reward_accuracy"] == [[0, 0.9], [3, 0.3]]
    assert plain["kl_p95"] == pytest.approx(0.3) and len(plain["curves"]["train/vote_accuracy"]) == 4
    negative = _without_repeats(run("majority+gate_negative"))
    assert negative["label_accuracy"] == 0.5 and negative["kl_p95"] == pytest.approx(0.25)
    # a log with gaps has nothing to drop
    assert _without_repeats(_without_repeats(run("majority")))["label_accuracy"] == 0.5


def test_the_curve_starts_at_the_start_validation_of_its_seed():
    """Step 0 of a held-out curve is the start measured as the run's validation measures it (its seed's start
    validation), and the goal's "never below" compares the curve with it; without one (an older report) step 0
    is the checkpoint's avg@k."""
    # the checkpoint's avg@16 is 0.30; the validation draws of the unchanged start read 0.25 and 0.27
    seeds = [(0.40, [(8, 0.24), (16, 0.35)]), (0.42, [(8, 0.26), (16, 0.41)])]  # spread 0.02, lowest mean 0.25
    report = _report({"random_reward": [(0.20, [(8, 0.25)]), (0.22, [(8, 0.25)])], "arm": seeds})
    report["settings"]["val_every"] = 8
    for run in report["runs"].values():
        run["seconds"] = 60.0
    line = [x for x in _goal(report, "t", 8).splitlines() if x.startswith("arm ")][0]
    assert "lowest mean avg@8 25.0 (step 8) vs its step 0 30.0" in line and "never more than the spread" in line
    report["start_val"] = {"t": {"0": 0.25, "1": 0.27}}
    line = [x for x in _goal(report, "t", 8).splitlines() if x.startswith("arm ")][0]
    assert "lowest mean avg@8 25.0 (step 8) vs its step 0 26.0" in line and line.endswith("goal met")
    rows = {r.split()[0]: r.split() for r in _horizon_table(report, "t", 8).splitlines()[3:]}
    assert rows["t/arm/seed0"][1:4] == ["35.0", "(", "16)"]
    # a peak below the start is the start itself: the random control's seed 1 never beats its 0.27
    assert rows["t/random_reward/seed1"][1:4] == ["27.0", "(", "0)"]


def test_a_warm_up_redone_with_other_weights_moves_the_old_starts_measurements_and_names_its_runs(tmp_path):
    """A study resumed on a new machine redoes its warm-up (the checkpoint folder is not committed). Same weights
    (same digest): nothing moves. Other weights: the earlier warm-up, scan, checkpoint row and start validations
    move to ``earlier_starts`` (to be measured again), the runs stay, and those from the other start are named."""
    from benchmarks.training.real_model_ttrl import _another_start, _other_starts, folder_digest

    with pytest.raises(SystemExit, match="no \\*.safetensors"):
        folder_digest(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    first = folder_digest(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")  # not weights: the digest ignores it
    assert folder_digest(str(tmp_path)) == first
    (tmp_path / "model.safetensors").write_bytes(b"weightz")
    assert folder_digest(str(tmp_path)) != first

    report = _report({"majority": [(0.30, [(8, 0.26)])]})
    report["runs"]["t/majority/seed0"]["start_digest"] = "a"
    report.update(scan={"t": {"avg": 0.2}}, start_val={"t": {"0": 0.22}}, warmup={"digest": "a"})
    _another_start(report, {"digest": "a"})
    assert "earlier_starts" not in report and report["before"]["t"] and _other_starts(report) == []
    report["warmup"] = {"digest": "b", "commit": "c2"}
    _another_start(report, {"digest": "a", "commit": "c1"})
    moved = report["earlier_starts"][0]
    assert moved["warmup"]["digest"] == "a" and moved["before"]["t"] and moved["start_val"] == {"t": {"0": 0.22}}
    assert report["scan"] == report["before"] == {} and "start_val" not in report
    assert _other_starts(report) == ["t/majority/seed0"] and report["runs"]["t/majority/seed0"]


def test_the_table_gives_one_seed_no_spread():
    """An arm of one seed (screened) prints "-" for its spread, not 0.0; an arm of two prints max - min."""
    def split(avgs, before):
        return {"avg": sum(avgs) / len(avgs), "maj": 0.5, "avg_gain": sum(avgs) / len(avgs) - before,
                "avg_spread": max(avgs) - min(avgs)}

    metrics = {"label_accuracy": None, "kl_p95": None, "vote_tokens_per_s": None, "seconds": 600.0,
               "seconds_per_step": None}
    summary = {"before": {"held_out": {"avg": 0.30, "maj": 0.40}},
               "arms": {"screened": {"seeds": [0], "held_out": split([0.35], 0.30), **metrics},
                        "three": {"seeds": [0, 1, 2], "held_out": split([0.30, 0.40, 0.35], 0.30),
                                  **metrics}}}
    table = _table({"summary": {"t": summary}, "settings": {"seeds": [0, 1, 2]}}, "t", 16)
    rows = {line.split()[0]: line for line in table.splitlines() if line}
    assert "35.0 ( +5.0,    -)" in rows["screened"]
    assert "35.0 ( +5.0, 10.0)" in rows["three"]


def test_every_panel_names_how_many_seeds_each_arm_holds():
    """A screened arm's curve is one seed, the others a mean over three: every panel's legend says which (the
    seeds that drew that panel's curve), and the title does not claim one set of seeds for all."""
    import matplotlib.pyplot as plt

    report = _report({"three": [(0.35, [(8, 0.30)]), (0.36, [(8, 0.31)]), (0.37, [(8, 0.32)])],
                      "screened": [(0.40, [(8, 0.33)])]})
    report["settings"].update(val_every=8, val_k=8, model="models/m", seeds=[0, 1, 2])
    for r in report["runs"].values():
        r["curves"]["train/vote_accuracy"] = [[1, 0.3], [2, 0.4]]
        if r["seed"] != 2:  # seed 2 of "three" logged no KL (as pixel logs none): its KL curve is two seeds
            r["curves"]["train/kl_p95"] = [[1, 0.01], [2, 0.02]]
    fig = _figure(report)
    try:
        legends = [sorted(t.get_text() for t in ax.get_legend().get_texts()) for ax in fig.axes]
        assert legends == [["screened (1 seed)", "three (3 seeds)"], ["screened (1 seed)", "three (2 seeds)"],
                           ["screened (1 seed)", "three (3 seeds)"]]
        assert "[0, 1, 2]" not in fig._suptitle.get_text()
    finally:
        plt.close(fig)
