"""Every arm of the real-model benchmark (benchmarks/training/real_model_ttrl.py ``ARMS``) is a valid ``ttrl fit``
command line on the benchmark's config, and sets what its name says: the config is parsed, no model is built."""
import json

import pytest

from benchmarks.training.real_model_ttrl import ARMS, CONFIG, _field, arm_options
from ttrl_lightning.cli.configs import config_path
from ttrl_lightning.cli.fit import parse_config

#: arm -> what its parsed config must hold beyond the labeler: (voting.options, advantage.rule, negative_shift)
EXPECTED = {
    "majority+gate_negative": ({"min_share": 0.5, "min_margin": 0.15}, None, 0.5),
    "majority+max_share": ({"max_share": 0.8}, None, None),
    "majority+fixed_adv": (None, "fixed", None),
    "majority+max_share+fixed_adv": ({"max_share": 0.8}, "fixed", None),
    "pixel+coverage_0.9": ({"target_coverage": 0.9}, None, None),
}


@pytest.fixture(scope="module")
def base():
    return parse_config(["--config", config_path(CONFIG)]).model.init_args


def _options(value):
    return json.loads(value) if isinstance(value, str) else (dict(value) if value else None)


@pytest.mark.parametrize("arm", list(ARMS))
def test_every_arm_parses_to_what_its_name_says(arm, base):
    labeler, extra = arm_options(arm, base)
    parsed = parse_config(["--config", config_path(CONFIG), "--model.init_args.voting.labeler", labeler, *extra])
    m = parsed.model.init_args
    assert m.voting.labeler == labeler == arm.split("+")[0]
    options, rule, shift = EXPECTED.get(arm, (None, None, None))
    assert (_options(m.voting.options) or None) == options
    default = base.advantage
    assert _field(m.advantage, "rule") == (rule or _field(default, "rule"))
    assert _field(m.advantage, "negative_shift") == (shift if shift is not None else _field(default, "negative_shift"))
    if arm == "self_harmony":  # the two views share the budget: M/2 votes and N/2 trained each
        assert m.voting.num_votes == base.voting.num_votes // 2
        assert m.voting.num_trained == base.voting.num_trained // 2
