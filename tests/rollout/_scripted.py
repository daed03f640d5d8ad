"""An agent engine whose turns are scripted text instead of samples: the loop, the tools and the masks are
exercised without a trained model."""
from __future__ import annotations

from ttrl_lightning.rollout.agent import AgentEngine
from ttrl_lightning.tools.protocol import OBSERVATION_END


class ScriptedAgentEngine(AgentEngine):
    """``script(prompt_text, turn) -> text`` gives each turn's text (``turn`` = observations seen so far);
    the text is tokenised as the model's own tokens (EOS appended when it ends with ``<eos>``)."""

    def __init__(self, tokenizer, script, **kw):
        super().__init__(tokenizer, **kw)
        self.script = script
        self.context_lengths: list[int] = []

    def _turn(self, model, contexts, params, images=None):
        out = []
        for ctx in contexts:
            self.context_lengths.append(len(ctx))
            text = self.tokenizer.decode(ctx, skip_special_tokens=False)
            prompt = text.split("\n", 1)[0] + "\n"
            turn = text.count(OBSERVATION_END)
            out.append(self._encode(self.script(prompt, turn)))
        return out
