"""StepLogitsSignalRecorder (integrations/generation.py) records what the package's token_stats recorder records."""
import torch

from tests.integrations._tiny_models import llama, text_batch
from ttrl_lightning.integrations import StepLogitsSignalRecorder
from ttrl_lightning.integrations import GenerationSignalRecorder


def test_step_logits_equal_the_token_stats_recorder():
    model = llama()
    model.lm_head.bias = torch.nn.Parameter(torch.randn(model.lm_head.weight.shape[0]))  # a head with a bias
    prompt = {k: v[:, :6] for k, v in text_batch().items() if k != "completion_mask"}
    runs = []
    for cls in (GenerationSignalRecorder, StepLogitsSignalRecorder):
        rec = cls(model, prompt["input_ids"], prompt["attention_mask"], temperature=0.7)
        torch.manual_seed(0)
        with torch.no_grad(), rec:
            seqs = model.generate(**prompt, max_new_tokens=5, do_sample=True, top_k=0, pad_token_id=0,
                                  num_return_sequences=2)
        runs.append((seqs, rec.signals(seqs)))
    (s0, a), (s1, b) = runs
    assert torch.equal(s0, s1) and b.completion_mask.any()
    for name in ("logprob", "entropy", "self_certainty", "image_attention"):
        x, y = getattr(a, name), getattr(b, name)
        if name == "image_attention":
            assert x is None and y is None
            continue
        m = a.completion_mask
        torch.testing.assert_close(y[m], x[m], atol=2e-5, rtol=1e-5)
        assert not torch.equal(x[m], torch.zeros_like(x[m]))
