"""One prompt rule (``prompt_format``) for ttrl fit, ttrl eval and ttrl generate: the same question gives the
same model input in all three, the chat template is applied under ``auto`` when the model has one, and a
prompt that already holds it is never wrapped twice (issue 22, item 2; issue 21, D15)."""
import pytest

from ttrl_lightning.errors import UserError
from ttrl_lightning.generate import PromptBuilder
from ttrl_lightning.models import load_tokenizer
from ttrl_lightning.modules import PolicySpec, TTRLModule
from ttrl_lightning.prompt_format import format_prompt, is_templated, resolve_prompt_format

#: a ChatML template with a system turn, as SmolLM2-Instruct's (the real one is tested in tests/test_real_models.py)
CHATML = ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
          "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
WRAPPED = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n2+3=<|im_end|>\n"
           "<|im_start|>assistant\n")


@pytest.fixture
def chat_tok():
    tok = load_tokenizer("tiny:qwen2")
    tok.chat_template = CHATML
    return tok


def test_formats_and_auto(chat_tok):
    plain_tok = load_tokenizer("tiny:qwen2")
    assert format_prompt("2+3=", "chat", chat_tok) == WRAPPED
    assert format_prompt("2+3=", "auto", chat_tok) == WRAPPED
    assert format_prompt("2+3=", "plain", chat_tok) == "2+3="
    assert format_prompt("2+3=", "auto", plain_tok) == "2+3="  # no template: as written (the tiny demo)
    assert resolve_prompt_format("auto", plain_tok) == "plain"
    with pytest.raises(UserError, match="prompt_format chat asks for the model's chat template, but it has none"):
        format_prompt("2+3=", "chat", plain_tok)
    with pytest.raises(UserError, match="prompt_format must be one of auto, chat, plain"):
        resolve_prompt_format("chatml", chat_tok)


def test_a_templated_prompt_is_never_wrapped_twice(chat_tok):
    assert format_prompt(WRAPPED, "chat", chat_tok) == WRAPPED
    assert is_templated(WRAPPED, chat_tok) and not is_templated("2+3=", chat_tok)
    # another system turn, the same generation prompt at the end: still recognised
    other = WRAPPED.replace("You are a helpful assistant.", "Answer with a number.")
    assert format_prompt(other, "auto", chat_tok) == other
    # a prompt that merely mentions a role word is wrapped
    assert format_prompt("the assistant says 2+3=", "chat", chat_tok).endswith("<|im_start|>assistant\n")


def test_fit_and_generate_give_the_same_model_input(chat_tok):
    m = TTRLModule(policy=PolicySpec(model="tiny:qwen2"),
                   voting={"labeler": "self_harmony", "fused_prompt_template": "{prompt} reframe:"})
    m.tokenizer = chat_tok
    original, fused = (r.text for r in m.vote_prompts(["2+3="]))
    builder = PromptBuilder(chat_tok, None, "auto")
    assert original == builder.text({"prompt": "2+3=", "images": []}, "original") == WRAPPED
    # the fused prompt is built from the question as written, then templated: its instruction lies in the
    # user turn, before the assistant's header (D15), never after it
    assert fused == format_prompt("2+3= reframe:", "chat", chat_tok)
    assert fused.index("reframe:") < fused.index("<|im_start|>assistant")
    # a question file whose prompt already holds the template gives the same input
    assert m.vote_prompts([WRAPPED])[0].text == WRAPPED


def test_a_module_refuses_chat_without_a_template():
    with pytest.raises(UserError, match="chat asks for the model's chat template"):
        TTRLModule(policy=PolicySpec(model="tiny:qwen2"), prompt_format="chat")


def test_agent_prompts_keep_their_pixels():
    """An AgentPrompt is a record of its text and its pixels; the agent engine templates it, so the module's
    prompt rule leaves it as it is, also for a model with a chat template (the tiny vision-language one). An
    engine that samples text prompts refuses it instead of sampling its text without the pixels."""
    pytest.importorskip("cv2")
    from ttrl_lightning.data.cota import agent_prompts
    from ttrl_lightning.modules import GRPOModule
    from ttrl_lightning.rollout.agent import AgentEngine

    prompt = agent_prompts(0, 1, ["count"])[0]["prompt"]
    assert not isinstance(prompt, str) and prompt.image is not None
    m = GRPOModule(policy=PolicySpec(model="tiny:qwen2"))
    m.tokenizer = load_tokenizer("tiny:qwen2_vl")
    assert m.tokenizer.chat_template
    with pytest.raises(TypeError, match="got AgentPrompt"):  # the HF engine: text prompts only
        m.model_prompts([prompt])
    assert m.model_prompts(["2+3="])[0].text != "2+3="  # a text prompt gets the template
    m.engine = AgentEngine(m.tokenizer)
    (out,) = m.model_prompts([prompt])
    assert out is prompt and out.image is prompt.image


def test_the_three_misreadings_of_pre_templated_text(chat_tok):
    """A question ending with the assistant header was left unwrapped (sampled without a user turn); a user
    turn without the generation prompt was wrapped a second time; the reframed view of a templated prompt put
    its instruction before the system turn. Now: one line each for the partial templates, and the instruction
    inside the user turn."""
    from ttrl_lightning.generate.prompts import FUSED_REFRAME_INSTRUCTION

    with pytest.raises(UserError, match=r"holds part of the model's chat template but not a user turn"):
        format_prompt("2+3=<|im_end|>\n<|im_start|>assistant\n", "auto", chat_tok)
    user_turn_only = "<|im_start|>user\n2+3=<|im_end|>\n"
    with pytest.raises(UserError, match=r"but not the generation prompt at its end"):
        format_prompt(user_turn_only, "auto", chat_tok)
    # without the default system turn, but whole: given as written
    no_system = "<|im_start|>user\n2+3=<|im_end|>\n<|im_start|>assistant\n"
    assert format_prompt(no_system, "auto", chat_tok) == no_system
    builder = PromptBuilder(chat_tok, None, "auto")
    reframed = builder.text({"prompt": WRAPPED, "images": [], "reframed_prompt": None}, "reframed")
    assert reframed == WRAPPED.replace("<|im_start|>user\n", "<|im_start|>user\n" + FUSED_REFRAME_INSTRUCTION)
    assert reframed.index("<|im_start|>system") < reframed.index("First restate")
    # the same question as written gives the same reframed input
    assert builder.text({"prompt": "2+3=", "images": [], "reframed_prompt": None}, "reframed") == reframed
    # TTRL's fused view of a templated question: the instruction in the user turn, before the assistant header
    m = TTRLModule(policy=PolicySpec(model="tiny:qwen2"),
                   voting={"labeler": "self_harmony", "fused_prompt_template": "{prompt} reframe:"})
    m.tokenizer = chat_tok
    templated, plain = m.vote_prompts([WRAPPED])[1].text, m.vote_prompts(["2+3="])[1].text
    assert templated == plain == format_prompt("2+3= reframe:", "chat", chat_tok)
