"""SFT trace encoding and batching: labels, action mask, observation spans; the seeded epoch order."""
import pytest
import torch

from ttrl_lightning.data.datamodules import EpochSeededSampler, collate_traces, encode_trace
from ttrl_lightning.data.tasks import Segment
from ttrl_lightning.masking import IGNORE_INDEX
from ttrl_lightning.models import build_char_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def test_encode_trace_masks(tok):
    segs = [Segment("3+4=", "prompt"), Segment("<call>add(3,4)</call>", "action"), Segment("<out>7</out>", "observation"),
            Segment("7<eos>", "text")]
    enc = encode_trace(tok, segs)
    toks = tok.convert_ids_to_tokens(enc["input_ids"])
    assert toks == ["3", "+", "4", "=", "<call>", "a", "d", "d", "(", "3", ",", "4", ")", "</call>", "<out>", "7",
                    "</out>", "7", "<eos>"]
    assert enc["action_mask"] == [0] * 4 + [1] * 10 + [0] * 5
    # the tokens with a label (trained on): the call and the final text; not the prompt, not the observation
    labelled = [0] * 4 + [1] * 10 + [0] * 3 + [1, 1]
    assert enc["labels"] == [t if keep else IGNORE_INDEX for t, keep in zip(enc["input_ids"], labelled)]
    assert enc["observation_span"] == [0] * 15 + [1] + [0] * 3  # the content only: delimiters stay visible
    batch = collate_traces([enc, encode_trace(tok, segs[:2])], pad_id=tok.pad_token_id)
    assert batch["labels"].shape == (2, 19) and batch["labels"][1, 14:].eq(-100).all()
    assert batch["labels"][0].tolist() == enc["labels"]
    assert batch["observation_span"][0].tolist() == enc["observation_span"]
    assert batch["attention_mask"][1].tolist() == [1] * 14 + [0] * 5
    cut = collate_traces([enc], pad_id=tok.pad_token_id, max_length=16)
    assert cut["labels"][0].tolist() == enc["labels"][:16]


def test_observation_spans_count_per_trace_and_bare_observations(tok):
    segs = [Segment("1+2+3=", "prompt"), Segment("<call>add(1,2)</call>", "action"),
            Segment("<out>3</out>", "observation"), Segment("<call>add(3,3)</call>", "action"),
            Segment("6", "observation"), Segment("6", "text")]
    enc = encode_trace(tok, segs)
    toks = tok.convert_ids_to_tokens(enc["input_ids"])
    spans = {k: [t for t, s in zip(toks, enc["observation_span"]) if s == k] for k in (1, 2)}
    assert spans == {1: ["3"], 2: ["6"]}  # an observation without delimiters is all content
    with pytest.raises(ValueError, match="unknown segment kind"):
        encode_trace(tok, [Segment("x", "thought")])


def test_epoch_seeded_sampler_draws_from_the_shuffle_stream():
    """The order of epoch e is randperm under seed * 1_000_003 + e (the numbers of every earlier run)."""
    s = EpochSeededSampler(10, seed=3)
    s.set_epoch(2)
    expected = torch.randperm(10, generator=torch.Generator().manual_seed(3 * 1_000_003 + 2)).tolist()
    assert list(s) == expected and sorted(expected) == list(range(10))
