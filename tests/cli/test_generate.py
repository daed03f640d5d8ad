"""`ttrl generate` (ttrl_lightning/cli/generate.py, ttrl_lightning/generate/): a pool from a tiny Qwen2-VL on
generated visual questions passes `ttrl pool validate`, runs through every `ttrl bon` method and its signals
equal a teacher-forced replay; an interrupted run resumed equals an uninterrupted one; data-parallel ranks
merge into the single-process pool; bad inputs are one line naming the row."""
import json
import os
import subprocess
import sys

import pytest
import torch

import ttrl_lightning.generate as generate_pkg
from ttrl_lightning.cli import main
from ttrl_lightning.data.pool import read_records
from ttrl_lightning.data.questions import read_questions
from ttrl_lightning.eval.bon.methods import BON_METHODS
from ttrl_lightning.generate import PromptBuilder, sample_sequences
from ttrl_lightning.generate.scene_questions import write_scene_questions
from ttrl_lightning.integrations import score_rollouts
from ttrl_lightning.models import load_model, load_processor, load_tokenizer
from ttrl_lightning.rollout import SamplingParams
from ttrl_lightning.seeding import derive_seed

SETTINGS = ["--n", "2", "--max-new-tokens", "4", "--temperature", "1.0", "--top-k", "0", "--top-p", "1.0",
            "--seed", "3", "--no-progress"]


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    return write_scene_questions(str(tmp_path_factory.mktemp("scenes")), 3, seed=1, kinds=["count", "colour"])


@pytest.fixture(scope="module")
def vl_pool(scenes, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("pool") / "pool.parquet")
    assert main(["generate", "--model", "tiny:qwen2_vl", "--data", scenes, "--out", out,
                 "--views", "original", "reframed", "--shard-size", "2", *SETTINGS]) == 0
    return out


def _records(path):
    return list(read_records(path))


def test_pool_validates_and_runs_through_every_bon_method(vl_pool, tmp_path, capsys):
    assert main(["pool", "validate", vl_pool]) == 0
    printed = capsys.readouterr().out
    assert "3 questions, 2 original / 2 reframed" in printed
    assert "'image_attention', 'logprob', 'self_certainty', 'visual_engagement'" in printed
    report = str(tmp_path / "bon.json")
    rc = main(["bon", "--pool", vl_pool, "--methods", *BON_METHODS.names(), "--n", "1", "2", "--subsets", "2",
               "--bootstrap", "10", "--out", report, "--no-progress"])
    assert rc == 0
    acc = json.load(open(report))["accuracy"]
    assert {m for m in acc if not m.startswith("self_certainty_borda")} == \
        {m for m in BON_METHODS.names() if m != "self_certainty_borda"}


def test_signals_equal_a_teacher_forced_replay(vl_pool, scenes):
    """Regenerate each question's view with its seed (the pool's texts come back), then replay the sequences
    with score_rollouts: every per-token array of the pool equals the replay (fp32 tolerance)."""
    tok = load_tokenizer("tiny:qwen2_vl")
    model = load_model("tiny:qwen2_vl", tok, seed=3).eval()
    builder = PromptBuilder(tok, load_processor("tiny:qwen2_vl"))
    params = SamplingParams(n=2, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4)
    records = {r["id"]: r for r in _records(vl_pool)}
    checked = 0
    for i, q in enumerate(read_questions(scenes)):
        for v, view in enumerate(("original", "reframed")):
            inputs = builder.inputs(q, view)
            seqs, _ = sample_sequences(model, tok, inputs, params, derive_seed(3, "generate", i, v))
            t0 = inputs["input_ids"].shape[1]
            rows = [ro for ro in records[q["id"]]["rollouts"] if ro["view"] == view]
            lengths = [ro["num_tokens"] for ro in rows]
            assert [tok.decode(s[t0:t0 + n], skip_special_tokens=True) for s, n in zip(seqs, lengths)] == \
                [ro["text"] for ro in rows]
            n, c = seqs.shape[0], seqs.shape[1] - t0
            comp = torch.arange(c)[None, :] < torch.tensor(lengths)[:, None]
            batch = {"input_ids": seqs, "attention_mask": torch.cat([inputs["attention_mask"].repeat(n, 1),
                                                                     comp.long()], 1),
                     "completion_mask": torch.cat([torch.zeros(n, t0, dtype=torch.long), comp.long()], 1),
                     "pixel_values": inputs["pixel_values"].repeat(n, 1),
                     "image_grid_thw": inputs["image_grid_thw"].repeat(n, 1),
                     "mm_token_type_ids": torch.cat([inputs["mm_token_type_ids"].repeat(n, 1),
                                                     torch.zeros(n, c, dtype=torch.long)], 1)}
            replay = score_rollouts(model, batch, tokenizer=tok)
            for name in ("logprob", "entropy", "self_certainty", "visual_engagement", "image_attention"):
                want = getattr(replay, name)[:, t0:]
                for r, ro in enumerate(rows):
                    torch.testing.assert_close(torch.tensor(ro[name]), want[r, :lengths[r]], atol=3e-5,
                                               rtol=1e-4)
                    checked += 1
    assert checked == 3 * 2 * 5 * 2


@pytest.mark.parametrize("stop", ["ctrl_c", "sigterm"])
def test_interrupted_run_resumes_to_the_uninterrupted_pool(vl_pool, scenes, tmp_path, monkeypatch, capsys, stop):
    """Ctrl-C, or SIGTERM (SLURM preemption, ``kill``; it used to exit 143 at once and drop the finished
    questions not yet in a shard), mid-question: the finished question is kept, the re-run completes the
    uninterrupted pool."""
    import signal

    out = str(tmp_path / "pool.parquet")
    real = generate_pkg.sample_batch
    calls = []

    def stop_at_the_fourth_view(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # question 2's reframed view: question 1 is finished, question 2 is not
            if stop == "ctrl_c":
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs at the next bytecode, here
        return real(*args, **kwargs)

    monkeypatch.setattr(generate_pkg, "sample_batch", stop_at_the_fourth_view)
    argv = ["generate", "--model", "tiny:qwen2_vl", "--data", scenes, "--out", out, "--views", "original",
            "reframed", "--shard-size", "2", *SETTINGS]
    assert main(argv) == (130 if stop == "ctrl_c" else 143)
    word = "interrupted" if stop == "ctrl_c" else "terminated (SIGTERM)"
    assert f"{word}: 1 of 3 questions" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the dispatcher put the handler back
    assert not os.path.exists(out)
    shards = sorted(os.listdir(out + ".parts"))
    assert shards == ["manifest.json", "rank0-of-1.00000.jsonl", "rank0-of-1.lock"]
    assert main(["pool", "validate", os.path.join(out + ".parts", shards[1])]) == 0  # the partial pool
    monkeypatch.setattr(generate_pkg, "sample_batch", real)
    assert main(argv) == 0
    assert "1 already in" in capsys.readouterr().out
    assert _records(out) == _records(vl_pool)
    assert main(argv) == 0  # a finished run: nothing left, the same pool again
    assert "3 already in" in capsys.readouterr().out
    assert _records(out) == _records(vl_pool)


def test_other_settings_on_a_rerun_are_refused(vl_pool, scenes, capsys):
    rc = main(["generate", "--model", "tiny:qwen2_vl", "--data", scenes, "--out", vl_pool, "--views",
               "original", "reframed", *SETTINGS[2:], "--n", "3"])
    err = capsys.readouterr().err
    assert rc == 1 and "with n=2, but this run has n=3" in err and vl_pool + ".parts" in err


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("row,model,extra,needle", [
    ({"id": "a", "prompt": "x", "image": "nowhere.png"}, "tiny:qwen2_vl", [],
     "line 2 (id='a'): field 'image'"),
    ({"id": "a", "prompt": "x", "answer": "1"}, "tiny:qwen2", [], "line 2 (id='a'): unknown field 'answer'"),
    ({"id": "a", "gold": "1"}, "tiny:qwen2", [], "line 2 (id='a'): missing field 'prompt'"),
    ({"id": "a", "prompt": "x"}, "tiny:qwen2", ["--prompt-format", "chat"],
     "prompt_format chat asks for the model's chat template, but it has none"),
    ({"id": "a", "prompt": "7" * 300}, "tiny:qwen2", [],  # tiny:qwen2 has 256 positions
     "question 'a': 300 prompt tokens + max_new_tokens 4 exceed the model's context (max_position_embeddings) "
     "(256 tokens)"),
])
def test_bad_input_names_the_row(tmp_path, capsys, row, model, extra, needle):
    data = _jsonl(tmp_path / "q.jsonl", [{"id": "q0", "prompt": "1+1=", "gold": "2"}, row])
    rc = main(["generate", "--model", model, "--data", data, "--out", str(tmp_path / "p.jsonl"), *extra,
               *SETTINGS])
    err = capsys.readouterr().err
    assert rc == 1 and needle in err and err.count("\n") == 1, err
    assert not os.path.exists(tmp_path / "p.jsonl") and not os.path.exists(tmp_path / "p.jsonl.parts")


def test_an_image_for_a_model_without_a_chat_template_names_the_row(scenes, tmp_path, capsys):
    rc = main(["generate", "--model", "tiny:qwen2", "--data", scenes, "--out", str(tmp_path / "p.jsonl"),
               *SETTINGS])
    err = capsys.readouterr().err
    assert rc == 1 and "question 1 (id='count-1-0'): has an image, but tiny:qwen2 is a text-only model" in err


def test_a_vision_checkpoint_without_a_processor_is_one_line(scenes, tmp_path, capsys):
    tok = load_tokenizer("tiny:qwen2_vl")
    folder = str(tmp_path / "vl")
    load_model("tiny:qwen2_vl", tok).save_pretrained(folder)
    tok.save_pretrained(folder)  # no preprocessor_config.json: AutoProcessor cannot be built
    rc = main(["generate", "--model", folder, "--data", scenes, "--out", str(tmp_path / "p.jsonl"),
               *SETTINGS])
    last = capsys.readouterr().err.rstrip("\n").split("\n")[-1]  # after transformers' loading bars
    want = f"ttrl generate: argument --model: the processor of {folder} cannot be loaded"
    assert rc == 1 and last.startswith(want), last


def test_an_error_mid_run_keeps_a_valid_partial_pool(tmp_path, monkeypatch, capsys):
    data = _jsonl(tmp_path / "q.jsonl", [{"id": f"q{i}", "prompt": f"{i}+1=", "gold": str(i + 1)}
                                         for i in range(3)])
    real = generate_pkg.sample_batch
    calls = []

    def fail_on_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("out of memory")
        return real(*args, **kwargs)

    monkeypatch.setattr(generate_pkg, "sample_batch", fail_on_the_third)
    out = str(tmp_path / "p.jsonl")
    with pytest.raises(RuntimeError):
        main(["generate", "--model", "tiny:qwen2", "--data", data, "--out", out, *SETTINGS])
    shard = os.path.join(out + ".parts", "rank0-of-1.00000.jsonl")
    assert [r["id"] for r in read_records(shard)] == ["q0", "q1"]
    rec = next(read_records(shard))
    assert set(rec["rollouts"][0]) >= {"logprob", "entropy", "self_certainty"}
    assert "visual_engagement" not in rec["rollouts"][0]  # a text-only model


def test_pool_merge_checks_ids(vl_pool, tmp_path, capsys):
    records = _records(vl_pool)
    from ttrl_lightning.data.pool import read_settings, write_records

    settings = read_settings(vl_pool)
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    write_records(records[:2], a, settings)
    write_records(records[1:], b, settings)
    assert main(["pool", "merge", a, b, "--out", str(tmp_path / "m.jsonl")]) == 1
    assert f"{b}: question {records[1]['id']!r} is also in {a}" in capsys.readouterr().err
    write_records(records[2:], b, settings)
    data = _jsonl(tmp_path / "q.jsonl", [{"id": r["id"], "prompt": "p"} for r in records])
    assert main(["pool", "merge", b, a, "--out", str(tmp_path / "m.parquet"), "--data", data]) == 0
    assert _records(str(tmp_path / "m.parquet")) == records  # the question file's order
    assert main(["pool", "merge", a, "--out", str(tmp_path / "m.jsonl"), "--data", data]) == 1
    assert f"the pools lack 1 of the 3 questions: {records[2]['id']!r}" in capsys.readouterr().err
    assert main(["pool", "merge", a, "--out", a]) == 1
    assert "is also an input" in capsys.readouterr().err
    before = open(data, "rb").read()
    assert main(["pool", "merge", a, b, "--out", data, "--data", data]) == 1  # it was overwritten, exit 0
    assert "is the question file --data" in capsys.readouterr().err
    assert open(data, "rb").read() == before


@pytest.mark.subprocess
def test_two_gloo_ranks_merge_into_the_single_process_pool(vl_pool, scenes, tmp_path):
    out = str(tmp_path / "ddp.parquet")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           "2",
                           "-m", "ttrl_lightning.cli", "generate", "--model",
                           "tiny:qwen2_vl", "--data", scenes, "--out", out, "--views", "original", "reframed",
                           "--device", "cpu", "--rollouts", *SETTINGS[1:]], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [str(tmp_path / f"ddp.rank{r}-of-2.parquet") for r in range(2)]
    assert [[r["id"] for r in _records(p)] for p in ranks] == [["count-1-0", "count-1-2"], ["colour-1-1"]]
    single = _records(vl_pool)
    for got in (_records(out),):
        assert [r["id"] for r in got] == [r["id"] for r in single]
        for g, s in zip(got, single):
            assert [ro["text"] for ro in g["rollouts"]] == [ro["text"] for ro in s["rollouts"]]
            for gr, sr in zip(g["rollouts"], s["rollouts"]):
                for name in ("logprob", "entropy", "self_certainty", "visual_engagement", "image_attention"):
                    torch.testing.assert_close(torch.tensor(gr[name]), torch.tensor(sr[name]), atol=1e-5,
                                               rtol=1e-5)
    merged = str(tmp_path / "again.jsonl")
    assert main(["pool", "merge", *ranks, "--out", merged, "--data", scenes]) == 0
    assert _records(merged) == _records(out)


def test_a_checkpoint_replaced_at_the_same_path_is_refused_on_resume(tmp_path, capsys):
    """The manifest records the model by content (SHA-256 of the folder's files), not only by its path: a
    re-run after another model was saved at the same path is refused (it mixed the two models' rollouts into
    one pool, whose avg@k belonged to neither)."""
    from ttrl_lightning.models import build_char_tokenizer

    tok = build_char_tokenizer()
    folder = str(tmp_path / "model")

    def save(seed):
        load_model("tiny:qwen2", tok, seed=seed).save_pretrained(folder)
        tok.save_pretrained(folder)

    save(0)
    data = _jsonl(tmp_path / "q.jsonl", [{"id": f"q{i}", "prompt": f"{i}+1=", "gold": str(i + 1)} for i in range(2)])
    argv = ["generate", "--model", folder, "--data", data, "--out", str(tmp_path / "p.jsonl"), *SETTINGS]
    assert main(argv) == 0
    capsys.readouterr()
    save(1)
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ttrl generate: ") and "holds rollouts made with model_sha256=" in err, err
    save(0)  # the same weights again: the same content
    assert main(argv) == 0 and "2 already in" in capsys.readouterr().out
    # the same folder spelled another way (a trailing slash, relative to another directory): resumed, not
    # refused (its content decides, as it does for a replaced checkpoint)
    for spelling in (folder + "/", os.path.relpath(folder)):
        respelled = [spelling if x == folder else x for x in argv]
        assert main(respelled) == 0 and "2 already in" in capsys.readouterr().out


def test_a_second_run_on_one_out_is_refused_and_duplicate_identical_shards_are_kept_once(tmp_path, capsys):
    """Two concurrent runs on one --out both exited 1 and left duplicate shards that failed every re-run:
    the run holding the rank's lock makes the second say so in one line; a question found in two shards
    with byte-identical records (written before the lock existed) is read once; different records stay an
    error naming both shards."""
    import fcntl
    import shutil

    data = _jsonl(tmp_path / "q.jsonl", [{"id": f"q{i}", "prompt": f"{i}+1=", "gold": str(i + 1)} for i in range(3)])
    out = str(tmp_path / "p.jsonl")
    argv = ["generate", "--model", "tiny:qwen2", "--data", data, "--out", out, "--shard-size", "2", *SETTINGS]
    os.makedirs(out + ".parts")
    with open(os.path.join(out + ".parts", "rank0-of-1.lock"), "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # another run holds it
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.strip().splitlines()[-1] == (f"ttrl generate: another run writes {out}.parts (rank 0 of 1); "
                                                "wait for it to finish, or use another --out")
    assert main(argv) == 0
    first = _records(out)
    shard = os.path.join(out + ".parts", "rank0-of-1.00000.jsonl")
    shutil.copy(shard, os.path.join(out + ".parts", "rank0-of-1.00007.jsonl"))
    assert main(argv) == 0 and _records(out) == first
    rec = _records(shard)[0]
    rec["rollouts"][0]["text"] += "!"
    from ttrl_lightning.data.pool import write_records

    write_records([rec], os.path.join(out + ".parts", "rank0-of-1.00008.jsonl"))
    assert main(argv) == 1
    assert f"question {rec['id']!r} is also in" in capsys.readouterr().err


def test_pool_merge_refuses_rank_pools_of_other_settings(tmp_path, capsys):
    """Rank pools made with another temperature (or model, engine, token limit) were joined silently: the
    settings inside each pool written by ttrl generate must agree, and the merged pool keeps them. A pool
    without settings is refused unless --allow-unknown-settings."""
    from ttrl_lightning.data.pool import read_settings, write_records

    data = _jsonl(tmp_path / "q.jsonl", [{"id": f"q{i}", "prompt": f"{i}+1=", "gold": str(i + 1)} for i in range(2)])
    pools = []
    for name, temperature in (("a", "1.0"), ("b", "0.7")):
        out = str(tmp_path / f"{name}.jsonl")
        assert main(["generate", "--model", "tiny:qwen2", "--data", data, "--out", out, *SETTINGS,
                     "--temperature", temperature]) == 0
        pools.append(out)
    settings = [read_settings(p) for p in pools]
    assert settings[0]["temperature"] == 1.0 and settings[1]["temperature"] == 0.7
    assert settings[0]["engine"] == "hf"
    write_records(_records(pools[0])[:1], pools[0], settings[0])  # disjoint halves of the two runs
    write_records(_records(pools[1])[1:], pools[1], settings[1])
    capsys.readouterr()
    assert main(["pool", "merge", *pools, "--out", str(tmp_path / "m.jsonl")]) == 1
    err = capsys.readouterr().err
    assert f"{pools[1]} was made with temperature=0.7, but {pools[0]} with temperature=1.0" in err, err
    write_records(_records(pools[1]), pools[1], {**settings[0], "engine": "vllm"})
    assert main(["pool", "merge", *pools, "--out", str(tmp_path / "m.jsonl")]) == 1
    assert "was made with engine='vllm'" in capsys.readouterr().err
    write_records(_records(pools[1]), pools[1], settings[0])
    assert main(["pool", "merge", *pools, "--out", str(tmp_path / "m.parquet")]) == 0
    assert read_settings(str(tmp_path / "m.parquet")) == settings[0]
    # the same question file under another spelling (a trailing slash, a link) with the same content: merged;
    # another content under the same spelling: refused
    assert settings[0].get("data_sha256")
    for data_path in (data + "/../" + os.path.basename(data), str(tmp_path / "link.jsonl")):
        if data_path.endswith("link.jsonl") and not os.path.exists(data_path):
            os.symlink(data, data_path)
        write_records(_records(pools[1]), pools[1], {**settings[0], "data": data_path})
        assert main(["pool", "merge", *pools, "--out", str(tmp_path / "m.jsonl")]) == 0, capsys.readouterr().err
    write_records(_records(pools[1]), pools[1], {**settings[0], "data": data, "data_sha256": "0" * 64})
    assert main(["pool", "merge", *pools, "--out", str(tmp_path / "m.jsonl")]) == 1
    assert "was made with data_sha256=" in capsys.readouterr().err
    write_records(_records(pools[1]), pools[1])  # written by another tool: no settings
    assert main(["pool", "merge", *pools, "--out", str(tmp_path / "m2.jsonl")]) == 1
    assert f"{pools[1]}: has no settings" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "m2.jsonl")
    assert main(["pool", "merge", *pools, "--out", str(tmp_path / "m2.jsonl"), "--allow-unknown-settings"]) == 0
    assert read_settings(str(tmp_path / "m2.jsonl")) is None
