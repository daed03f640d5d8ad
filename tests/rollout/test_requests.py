"""The sampling request and the one prompt renderer: images travel as a named field, every refusal has one
home, and ``ttrl fit``, ``ttrl eval`` and ``ttrl generate`` refuse the same input with the same words."""
import dataclasses

import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.data.questions import read_questions
from ttrl_lightning.errors import UserError
from ttrl_lightning.generate.scene_questions import write_scene_questions
from ttrl_lightning.models import TinyVLProcessor, load_processor, load_tokenizer
from ttrl_lightning.prompt_format import format_prompt
from ttrl_lightning.rollout import HFGenerateEngine
from ttrl_lightning.rollout.requests import PromptRenderer, SamplingRequest, as_requests
from ttrl_lightning.tools.agent_format import AgentPrompt

#: a tiny chat template: system turn, user turn, generation prompt (ChatML, as Qwen2's)
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    return write_scene_questions(str(tmp_path_factory.mktemp("scenes")), 2, seed=1, kinds=["colour"])


@pytest.fixture
def chat_tok():
    tok = load_tokenizer("tiny:qwen2")
    tok.chat_template = CHATML
    return tok


def test_a_request_is_frozen_and_carries_its_images_as_a_field():
    r = SamplingRequest("What colour?", ["a.png"], "original", "q1")
    assert r.images == ("a.png",)  # a tuple, whatever sequence was given
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.text = "x"
    other = r.with_text("Which colour?")
    assert (other.text, other.images, other.view, other.question_id) == ("Which colour?", ("a.png",), "original",
                                                                          "q1")
    with pytest.raises(TypeError, match="must be a str"):
        SamplingRequest(None)


def test_only_a_plain_string_becomes_a_request_so_nothing_it_carries_is_dropped():
    """An ``AgentPrompt`` (a record of a prompt and its pixels) and a ``str`` subclass (which may carry
    attributes) are refused, not silently turned into text."""

    class Tagged(str):
        pass

    assert as_requests(["2+3="]) == [SamplingRequest("2+3=")]
    with pytest.raises(TypeError, match="AgentPrompt"):
        as_requests([AgentPrompt("look", image=None)])
    with pytest.raises(TypeError, match="Tagged"):
        as_requests([Tagged("look")])


def test_render_applies_the_prompt_rule_once(chat_tok):
    """``render`` is ``prompt_format.format_prompt`` per request: templated under ``auto``/``chat`` for a model
    with a template, as written under ``plain``, never twice, images, view and id kept."""
    r = SamplingRequest("2+3=", (), "reframed", "q")
    (out,) = PromptRenderer(chat_tok).render([r])
    assert out.text == format_prompt("2+3=", "chat", chat_tok) and out.text != "2+3="
    assert (out.view, out.question_id) == ("reframed", "q")
    assert PromptRenderer(chat_tok).render([out]) == [out]  # already templated: kept
    assert PromptRenderer(chat_tok, prompt_format="plain").render([r])[0].text == "2+3="
    assert PromptRenderer(load_tokenizer("tiny:qwen2")).render([r])[0].text == "2+3="  # no template: plain
    with pytest.raises(UserError, match="prompt_format chat asks for the model's chat template, but it has none"):
        PromptRenderer(load_tokenizer("tiny:qwen2"), prompt_format="chat")


def test_fused_puts_the_instruction_inside_the_user_turn(chat_tok):
    renderer = PromptRenderer(chat_tok)
    templated = renderer.render(["2+3="])[0]
    fused = renderer.fused(templated, "{prompt} reframe:")
    assert fused.view == "reframed"
    assert fused.text == format_prompt("2+3= reframe:", "chat", chat_tok)
    assert fused.text.index("reframe:") < fused.text.index("<|im_start|>assistant")
    plain = PromptRenderer(chat_tok, prompt_format="plain").fused(SamplingRequest("2+3="), "{prompt} reframe:")
    assert plain.text == "2+3= reframe:"


def test_an_image_question_renders_with_one_placeholder_per_image(scenes):
    tok, proc = load_tokenizer("tiny:qwen2_vl"), load_processor("tiny:qwen2_vl")
    q = read_questions(scenes)[0]
    (out,) = PromptRenderer(tok, proc).render([SamplingRequest(q["prompt"], q["images"])])
    assert out.images == tuple(q["images"])
    assert out.text == format_prompt(q["prompt"], "chat", tok, proc, images=1)
    assert out.text.count("<|image_pad|>") == 1


class _TextEngine:
    takes_images = False


@pytest.mark.parametrize("case, message", [
    ("text-only", r"q\.jsonl, question 2 \(id='b'\): has an image, but tiny:qwen2 is a text-only model"),
    ("engine", r"question 2 \(id='b'\): has an image, but the rollout engine _TextEngine does not sample images"),
    ("plain", r"question 2 \(id='b'\): has an image, which needs the chat template .* but prompt_format is plain"),
    ("no-template", r"question 2 \(id='b'\): has an image, which needs the chat template .* but m has no chat "
                    r"template"),
    ("mixed", r"question 2 \(id='b'\) has an image and q\.jsonl, question 1 \(id='a'\) has none; a pool needs it, "
              r"so give every question an image or none"),
])
def test_each_refusal_names_the_request(case, message):
    vl_tok, proc = load_tokenizer("tiny:qwen2_vl"), load_processor("tiny:qwen2_vl")
    requests = [SamplingRequest("x", (), question_id="a"), SamplingRequest("y", ("i.png",), question_id="b")]
    renderer, engine, uniform = {
        "text-only": (PromptRenderer(load_tokenizer("tiny:qwen2"), None, model="tiny:qwen2", source="q.jsonl"),
                      None, None),
        "engine": (PromptRenderer(vl_tok, proc, source="q.jsonl"), _TextEngine(), None),
        "plain": (PromptRenderer(vl_tok, proc, "plain", source="q.jsonl"), None, None),
        "no-template": (PromptRenderer(load_tokenizer("tiny:qwen2"), TinyVLProcessor(load_tokenizer("tiny:qwen2")),
                                       model="m", source="q.jsonl"), None, None),
        "mixed": (PromptRenderer(vl_tok, proc, source="q.jsonl"), None, "a pool needs it"),
    }[case]
    with pytest.raises(UserError, match=message):
        renderer.check(requests, engine, uniform_images=uniform)
    renderer.check(requests[:1], engine)  # the text question alone passes


def test_the_hf_engine_reads_the_images_of_a_request_and_a_plain_string_is_a_text_prompt(scenes):
    """The same request sampled twice gives the same rows; its images reach the rows (``Rollouts.images``), a
    plain string none."""
    from ttrl_lightning.models import load_model
    from ttrl_lightning.rollout import SamplingParams

    tok, proc = load_tokenizer("tiny:qwen2_vl"), load_processor("tiny:qwen2_vl")
    model = load_model("tiny:qwen2_vl", tok, seed=0).eval()
    renderer = PromptRenderer(tok, proc)
    q = read_questions(scenes)[0]
    request, text = renderer.render([SamplingRequest(q["prompt"], q["images"]), "What is 2+3?"])
    engine = HFGenerateEngine(tok, processor=proc)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=3, seed=5)
    a, b = engine.generate(model, [request, text.text], params), engine.generate(model, [request, text], params)
    assert a.texts == b.texts
    assert [len(row) for row in a.images] == [1, 1, 0, 0]


@pytest.mark.parametrize("command", ["fit", "eval", "generate"])
def test_fit_eval_and_generate_refuse_an_image_for_a_text_only_model_in_the_same_words(command, scenes, tmp_path,
                                                                                       capsys):
    """The refusal has one home (``PromptRenderer.check``): the three commands give it in the same words."""
    words = "has an image, but tiny:qwen2 is a text-only model (no vision config, no processor)"
    if command == "fit":
        from ttrl_lightning.modules import PolicySpec, TTRLModule

        qs = read_questions(scenes)
        m = TTRLModule(policy=PolicySpec(model="tiny:qwen2"), voting={"num_votes": 2, "num_trained": 1},
                       calibrate=False)
        m.configure_model()
        with pytest.raises(UserError) as err:
            m.rollout({key: [q[key] for q in qs] for key in ("id", "prompt", "gold", "choices", "images")})
        assert words in str(err.value) and str(err.value).startswith("TTRLModule, question 1 (id=")
        return
    extra = ["--out", str(tmp_path / "p.jsonl")] if command == "generate" else []
    rc = main([command, "--model", "tiny:qwen2", "--data", scenes, "--max-new-tokens", "2", "--no-progress", *extra])
    err = capsys.readouterr().err
    assert rc == 1 and f"{scenes}, question 1 (id=" in err and words in err and err.count("\n") == 1, err
