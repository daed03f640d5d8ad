"""The rollout-engine contract is the ``RolloutEngine`` Protocol (rollout/base.py): every registered engine
declares it, and a new engine is one class plus its registration: the sampling commands offer it from the
registry, with the options it declares and nothing else."""
import pytest

from ttrl_lightning.cli.arguments import CommandParser, OptionError
from ttrl_lightning.cli.engines import add_engine_arguments, sampling_engines
from ttrl_lightning.models import build_char_tokenizer
from ttrl_lightning.rollout import ROLLOUT_ENGINES, RolloutEngine, build_engine
from ttrl_lightning.rollout.hf import HFGenerateEngine

CONTRACT = ("owns_weights", "max_model_len", "takes_text_prompts", "cli_options", "check_available", "generate",
            "sync_weights")


@pytest.mark.parametrize("name", ROLLOUT_ENGINES.names())
def test_every_registered_engine_declares_the_contract(name):
    cls = ROLLOUT_ENGINES[name]
    missing = [attr for attr in CONTRACT if not hasattr(cls, attr)]
    assert not missing, (name, missing)
    assert isinstance(cls.owns_weights, bool) and isinstance(cls.cli_options, tuple)


def test_the_hf_engine_is_the_protocol_and_reads_nothing_by_getattr():
    engine = build_engine("hf", build_char_tokenizer(), record_signals=True)
    assert isinstance(engine, RolloutEngine) and engine.record_signals and not engine.owns_weights
    assert engine.max_model_len is None


@pytest.fixture
def toy_engine():
    @ROLLOUT_ENGINES.register("_toy")
    class ToyEngine(HFGenerateEngine):
        cli_options = ("max_model_len",)

        def __init__(self, tokenizer, max_model_len=None, **kw):
            super().__init__(tokenizer, **kw)
            self.max_model_len = max_model_len

    yield ToyEngine
    ROLLOUT_ENGINES._items.pop("_toy", None)


def test_a_new_engine_is_offered_by_the_sampling_commands_with_its_options(toy_engine):
    assert "_toy" in sampling_engines() and "agent" not in sampling_engines()
    p = CommandParser(prog="ttrl eval")
    add_engine_arguments(p)
    args = p.parse_args(["--engine", "_toy", "--max-model-len", "64"])
    from ttrl_lightning.cli.engines import build_sampling_engine, check_engine_options

    check_engine_options(p, args, ["--engine", "_toy", "--max-model-len", "64"])
    engine = build_sampling_engine(args, build_char_tokenizer())
    assert isinstance(engine, toy_engine) and engine.max_model_len == 64
    hf = p.parse_args(["--engine", "hf", "--max-model-len", "64"])
    with pytest.raises(OptionError, match="argument --max-model-len: only with --engine _toy or vllm"):
        check_engine_options(p, hf, ["--engine", "hf", "--max-model-len", "64"])
