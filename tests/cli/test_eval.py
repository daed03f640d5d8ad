"""`ttrl eval` (ttrl_lightning/cli/eval.py, cli/policy_source.py): the printed and written numbers are those of
the sampled completions, a `ttrl fit` checkpoint evaluates its trained policy, and every bad input is one line
naming the flag, file or row (exit 1)."""
import json
import re

import lightning.pytorch as pl
import pytest
import torch

from ttrl_lightning.cli import main
from ttrl_lightning.data.datamodules import SFTDataModule
from ttrl_lightning.data.questions import questions_from_task
from ttrl_lightning.eval.sampled import evaluate_sampled, sampled_metrics
from ttrl_lightning.models import build_char_tokenizer, load_model
from ttrl_lightning.modules import PolicySpec, SFTModule
from ttrl_lightning.rollout import Rollouts, SamplingParams
from ttrl_lightning.rollout.requests import as_requests


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _run(capsys, *argv):
    rc = main(["eval", *argv, "--no-progress"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_tiny_model_end_to_end(tmp_path, capsys):
    """The report's completions are what evaluate_sampled samples with the same model and settings, and the
    printed and written metrics are sampled_metrics of those completions."""
    out = str(tmp_path / "r" / "report.json")
    rc, printed, _ = _run(capsys, "--model", "tiny:qwen2", "--task", "arith", "--n", "3", "--task-seed", "5",
                          "--k", "2", "--max-new-tokens", "6", "--temperature", "1.0", "--seed", "3",
                          "--batch-size", "2", "--out", out)
    assert rc == 0
    lines = printed.splitlines()
    assert lines[0] == ("sampling: k=2 temperature=1.0 top_p=0.95 top_k=0 max_new_tokens=6 seed=3 "
                        "batch_size=2 answer_extractor=final_answer engine=hf")
    assert [line.split()[0] for line in lines[1:4]] == ["avg@2", "maj@2", "pass@2"]
    report = json.load(open(out))
    assert set(report["metrics"]) == {"k", "num_questions", "avg@2", "maj@2", "pass@2"}
    assert report["settings"]["task_seed"] == 5 and report["settings"]["max_new_tokens"] == 6

    tok = build_char_tokenizer()
    questions = questions_from_task("arith", 3, 5)
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=6, seed=3)
    direct, texts = evaluate_sampled(load_model("tiny:qwen2", tok, seed=3), tok, questions, 2, params, batch_size=2)
    assert [q["completions"] for q in report["questions"]] == texts
    assert [q["id"] for q in report["questions"]] == [q["id"] for q in questions]
    assert report["metrics"] == direct.as_dict() == sampled_metrics(texts, [q["gold"] for q in questions]).as_dict()


class StandIn:
    """The engine contract a stand-in for the HF engine keeps (``rollout.RolloutEngine``)."""

    owns_weights, max_model_len, record_signals = False, None, False
    takes_text_prompts, takes_images, cli_options, default_batch_size = True, False, (), 1

    @classmethod
    def check_available(cls):
        return None

    def sync_weights(self, model):
        return None


def _use_engine(monkeypatch, cls) -> None:
    """``--engine hf`` builds ``cls`` (the command asks the registry, never the class by its name)."""
    from ttrl_lightning.rollout import ROLLOUT_ENGINES

    monkeypatch.setitem(ROLLOUT_ENGINES._items, "hf", cls)


class BoxedGold(StandIn):
    """A stand-in for the HF engine: sample j of an arithmetic prompt ``"x<op>y..="`` answers its value
    ``\\boxed{v}`` when j < (x % 3), else ``\\boxed{-1}``."""

    def __init__(self, tokenizer, **kwargs):
        pass

    def generate(self, model, prompts, params):
        texts = []
        for p in (r.text for r in as_requests(prompts)):
            assert re.fullmatch(r"[0-9+-]+=", p)
            first, value = int(re.match(r"[0-9]+", p).group(0)), eval(p[:-1])  # digits, + and - only
            texts += [f"\\boxed{{{value if j < first % 3 else -1}}}" for j in range(params.n)]
        return Rollouts(None, None, None, None, texts, None, params.n)


def test_printed_and_written_numbers_of_known_completions(tmp_path, capsys, monkeypatch):
    """A question file whose completions are scripted: the printed percentages and the report are the
    hand-computed avg@4 / maj@4 / pass@4."""

    _use_engine(monkeypatch, BoxedGold)
    # a % 3 = 0, 1, 2, 2: correct samples 0, 1, 2, 2 of 4
    data = _jsonl(tmp_path / "q.jsonl", [{"id": i, "prompt": f"{a}+1=", "gold": str(a + 1)}
                                         for i, a in enumerate([3, 4, 5, 2])])
    out = str(tmp_path / "report.json")
    rc, printed, _ = _run(capsys, "--model", "tiny:llama", "--data", data, "--k", "4", "--max-new-tokens", "2",
                          "--out", out)
    assert rc == 0
    # avg: (0 + 1 + 2 + 2) / 4 / 4; maj: 0 and 1 correct lose to -1, the 2-2 ties go to the answer sampled
    # first (the correct one); pass: all but the first question
    avg, maj, pas = 5 / 16, 2 / 4, 3 / 4
    values = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+@4)\s+([\d.]+)%", printed, re.M)}
    assert values == {"avg@4": round(100 * avg, 2), "maj@4": round(100 * maj, 2), "pass@4": round(100 * pas, 2)}
    report = json.load(open(out))
    assert report["metrics"] == {"k": 4, "num_questions": 4, "avg@4": avg, "maj@4": maj, "pass@4": pas}
    assert [q["correct"] for q in report["questions"]] == [0, 1, 2, 2]
    assert [q["id"] for q in report["questions"]] == ["0", "1", "2", "3"]
    assert report["settings"]["data"] == data and report["settings"]["model_kind"] == "tiny"


@pytest.fixture(scope="module")
def sft_ckpt(tmp_path_factory):
    """A `ttrl fit`-style checkpoint of a tiny SFTModule after one optimizer step (lr 0.05)."""
    module = SFTModule(policy=PolicySpec(model="tiny:qwen2", lr=0.05, seed=0))
    trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", limit_val_batches=0)
    trainer.fit(module, SFTDataModule(task="arith", n_train=4, n_val=2, batch_size=4))
    path = tmp_path_factory.mktemp("ckpt") / "sft.ckpt"
    trainer.save_checkpoint(str(path))
    return str(path), module.policy.eval()


def test_checkpoint_round_trip(sft_ckpt, tmp_path, capsys):
    """`--model x.ckpt` samples with the trained policy: the completions equal those of the module's policy,
    and differ from the untrained model it started from."""
    path, policy = sft_ckpt
    out = str(tmp_path / "ckpt.json")
    args = ["--task", "arith", "--n", "2", "--k", "2", "--temperature", "1.0", "--max-new-tokens", "8", "--out"]
    rc, printed, _ = _run(capsys, "--model", path, *args, out)
    assert rc == 0
    report = json.load(open(out))
    assert report["settings"]["model_kind"] == "ckpt"
    tok = build_char_tokenizer()
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=8, seed=0)
    _, texts = evaluate_sampled(policy, tok, questions_from_task("arith", 2, 0), 2, params)
    assert [q["completions"] for q in report["questions"]] == texts
    base = str(tmp_path / "base.json")
    assert _run(capsys, "--model", "tiny:qwen2", *args, base)[0] == 0
    assert [q["completions"] for q in json.load(open(base))["questions"]] != texts


def test_checkpoint_of_a_tiny_policy_gets_the_tiny_default_length(sft_ckpt, capsys, monkeypatch):

    _use_engine(monkeypatch, BoxedGold)
    rc, printed, _ = _run(capsys, "--model", sft_ckpt[0], "--task", "arith", "--n", "2", "--k", "1")
    assert rc == 0 and "max_new_tokens=32" in printed.splitlines()[0]


def test_checkpoint_that_does_not_fit_its_spec(sft_ckpt, tmp_path, capsys):
    path, _ = sft_ckpt
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["hyper_parameters"]["policy"]["tiny_kwargs"] = {"hidden": 16}
    bad = tmp_path / "resized.ckpt"
    torch.save(checkpoint, bad)
    rc, _, err = _run(capsys, "--model", str(bad), "--task", "arith", "--n", "1", "--k", "1")
    assert rc == 1 and "resized.ckpt: the policy weights do not fit the model its spec builds" in err, err
    assert "size mismatch" in err and len(err.strip().splitlines()) == 1


def _bad_inputs(tmp_path):
    good = _jsonl(tmp_path / "good.jsonl", [{"id": "a", "prompt": "1+1=", "gold": "2"}])
    (tmp_path / "empty.ckpt").write_bytes(b"")
    torch.save({"weights": torch.zeros(1)}, tmp_path / "foreign.ckpt")
    torch.save({"state_dict": {}, "hyper_parameters": {"lr": 1.0}}, tmp_path / "nospec.ckpt")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "folder").mkdir()
    (tmp_path / "weights.bin").write_bytes(b"x")
    from PIL import Image

    Image.new("RGB", (2, 2)).save(tmp_path / "i.png")
    tiny = ["--model", "tiny:qwen2"]
    return [
        (tiny + ["--data", good, "--k", "0"], r"argument --k: must be an integer in \[1, 4096\], got '0'"),
        (tiny + ["--data", good, "--top-p", "0"], r"argument --top-p: must be a number in \(0, 1\], got '0'"),
        (tiny + ["--data", good, "--temperature", "-1"], r"argument --temperature: must be a finite number >= 0"),
        (tiny + ["--data", good, "--max-new-tokens", "1.5"], r"argument --max-new-tokens: must be an integer >= 1"),
        (tiny + ["--data", good, "--seed", "x"], r"argument --seed: must be an integer in \[0, "),
        (tiny + ["--data", good, "--task", "arith"], r"argument --task: not allowed with argument --data"),
        (tiny, r"one of the arguments --data --task is required"),
        (tiny + ["--data", good, "--n", "4"], r"argument --n: only with --task"),
        (tiny + ["--task", "algebra"], r"argument --task: unknown task 'algebra'; known: .*arith, arith3"),
        (tiny + ["--task", "arith", "--out", str(tmp_path / "r.txt")], r"argument --out: the report is a \.json file"),
        (tiny + ["--data", good, "--out", good.replace(".jsonl", ".json")], None),  # fine: not the same file
        (["--model", "tiny:gpt9", "--task", "arith"], r"argument --model: unknown tiny architecture 'gpt9'; known: tiny:"),
        (["--model", str(tmp_path / "nope"), "--task", "arith"], r"argument --model: .*nope does not exist"),
        (["--model", str(tmp_path / "folder"), "--task", "arith"], r"folder without config\.json"),
        (["--model", str(tmp_path / "weights.bin"), "--task", "arith"], r"weights\.bin is a file but not a Lightning \.ckpt"),
        (["--model", str(tmp_path / "empty.ckpt"), "--task", "arith"], r"empty\.ckpt is empty \(0 bytes\)"),
        (["--model", str(tmp_path / "foreign.ckpt"), "--task", "arith"], r"foreign\.ckpt is not a Lightning checkpoint \(no state_dict"),
        (["--model", str(tmp_path / "nospec.ckpt"), "--task", "arith"], r"nospec\.ckpt has no policy spec"),
        (["--model", str(tmp_path / "hf"), "--task", "arith"], r"argument --max-new-tokens: required for a real checkpoint"),
        (tiny + ["--data", _jsonl(tmp_path / "dup.jsonl", [{"id": "a", "prompt": "x", "gold": "1"},
                                                            {"id": "a", "prompt": "y", "gold": "2"}])],
         r"dup\.jsonl, line 2 \(id='a'\): duplicate id 'a', already used by line 1"),
        (tiny + ["--data", _jsonl(tmp_path / "col.jsonl", [{"id": "a", "question": "x", "answer": "1"}])],
         r"col\.jsonl, line 1 \(id='a'\): unknown field 'answer'"),
        (tiny + ["--data", _jsonl(tmp_path / "nogold.jsonl", [{"id": "a", "prompt": "x", "gold": "1"},
                                                               {"id": "b", "prompt": "y"}])],
         r"nogold\.jsonl: 1 question\(s\) have no gold answer, which ttrl eval needs: 'b'"),
        (tiny + ["--data", _jsonl(tmp_path / "img.jsonl", [{"id": "a", "prompt": "x", "gold": "1", "image": "i.png"}])],
         r"img\.jsonl, question 1 \(id='a'\): has an image, but tiny:qwen2 is a text-only model"),
        (tiny + ["--data", str(tmp_path / "missing.jsonl")], r"missing\.jsonl: question file not found"),
        # the context (tiny:qwen2: 256 positions), checked before sampling; the OOM traceback it was
        (tiny + ["--data", good, "--max-new-tokens", "100000"],
         r"question 'a': 4 prompt tokens \+ max_new_tokens 100000 exceed the model's context \(256 tokens\)"),
        (tiny + ["--data", _jsonl(tmp_path / "long.jsonl", [{"id": "long", "prompt": "7" * 300, "gold": "1"}])],
         r"question 'long': 300 prompt tokens \+ max_new_tokens \d+ exceed the model's context"),
    ]


def test_bad_inputs_are_one_line_naming_the_flag_file_or_row(tmp_path, capsys, monkeypatch):

    _use_engine(monkeypatch, BoxedGold)  # the one good case samples nothing real
    for argv, match in _bad_inputs(tmp_path):
        rc, _, err = _run(capsys, *argv, "--k" if "--k" not in argv else "--batch-size", "1")
        if match is None:
            assert rc == 0, err
            continue
        assert rc == 1, (argv, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ttrl eval: "), (argv, err)
        assert re.search(match, lines[0]), (match, lines[0])


def test_help_says_what_each_metric_means(capsys):
    with pytest.raises(SystemExit) as done:
        main(["eval", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "avg@k the mean over questions of the share of the k samples that are correct" in text
    assert "pass@k at least one of the k samples is correct" in text and "pass@64" in text
    assert "maj@k the majority answer of the k samples is correct" in text


def test_answer_extractor_flag_reads_bare_numbers(capsys, monkeypatch, tmp_path):
    """`--answer-extractor last_number` scores completions such as "19" that final_answer cannot read."""
    from ttrl_lightning.rollout import Rollouts

    class BareGold(StandIn):

        def __init__(self, tokenizer, **_):
            self.tok = tokenizer

        def generate(self, model, prompts, params):
            prompts = [r.text for r in as_requests(prompts)]
            golds = {q["prompt"]: q["gold"] for q in questions_from_task("arith", 3, 0)}
            texts = [golds[p] for p in prompts for _ in range(params.n)]
            R = len(texts)
            one = torch.ones(R, 1, dtype=torch.long)
            return Rollouts(one, one, one, one, texts, torch.arange(len(prompts)).repeat_interleave(params.n),
                            params.n)

    _use_engine(monkeypatch, BareGold)
    base = ["--model", "tiny:qwen2", "--task", "arith", "--n", "3", "--k", "2", "--no-progress"]
    rc, printed, _ = _run(capsys, *base)
    assert rc == 0 and "avg@2     0.00%" in printed
    rc, printed, _ = _run(capsys, *base, "--answer-extractor", "last_number")
    assert rc == 0 and "avg@2   100.00%" in printed and "answer_extractor=last_number" in printed


def test_image_questions_are_sampled_with_their_images(tmp_path, capsys):
    """A vision-language model evaluates scene questions through the HF engine's image path: the report's
    completions are the engine's on the ImagePrompt s (the same seed, the same samples)."""
    from ttrl_lightning.generate.scene_questions import write_scene_questions

    data = write_scene_questions(str(tmp_path / "scenes"), 3, seed=2, kinds=["colour"])
    out = tmp_path / "r.json"
    rc, printed, err = _run(capsys, "--model", "tiny:qwen2_vl", "--data", data, "--k", "2", "--max-new-tokens", "5",
                            "--seed", "4", "--out", str(out))
    assert rc == 0, err
    assert "avg@2" in printed
    report = json.loads(out.read_text())
    assert len(report["questions"]) == 3 and all(len(q["completions"]) == 2 for q in report["questions"])
    rc, _, err = _run(capsys, "--model", "tiny:qwen2_vl", "--data", data, "--k", "2", "--max-new-tokens", "5",
                      "--prompt-format", "plain")
    assert rc == 1 and "has an image, which needs the chat template to place its image tokens, but prompt_format is " \
        "plain" in err


@pytest.mark.parametrize("k", ["100000000000000000000", "4097", "9" * 5000])
def test_a_sample_count_past_the_bound_is_one_line(k, capsys):
    """``--k 10^20`` overflowed inside the sampler after the model was loaded (a traceback); 5,000 digits made
    ``int()`` itself raise. Both are now the argument's one line, as ``ttrl generate --n`` is."""
    rc, _, err = _run(capsys, "--model", "tiny:qwen2", "--task", "arith", "--n", "2", "--k", k)
    assert rc != 0 and "argument --k: must be an integer in [1, 4096]" in err and "Traceback" not in err
    rc = main(["generate", "--model", "tiny:qwen2", "--task", "arith", "--out", "x.jsonl", "--n", k])
    assert rc != 0 and "argument --n/--rollouts: must be an integer in [1, 4096]" in capsys.readouterr().err
