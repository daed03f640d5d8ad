"""``grpo.reference_storage: disk`` (``modules.disk_weights``): the initial reference's parameters in a file
between reference passes. The same weights give the same run, bit for bit, as the reference held in memory; a
checkpoint names the file instead of copying it, and resumes as the uninterrupted run; a changed or missing
file, or a checkpoint resumed under the other storage, is refused in one line."""
import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ttrl_lightning.callbacks import RankStateDump
from ttrl_lightning.data.datamodules import PromptDataModule
from ttrl_lightning.errors import UserError
from ttrl_lightning.modules.disk_weights import DiskWeights
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec


def _tied_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval().requires_grad_(False)


def test_the_weights_leave_memory_between_uses_and_come_back_the_same(tmp_path):
    model = _tied_llama()
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    want = model(input_ids=ids).logits
    before = {n: p.clone() for n, p in model.named_parameters()}
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    disk = DiskWeights.write(model, str(tmp_path / "ref" / "w.safetensors"))
    # between uses: every parameter is a meta tensor of its shape; the buffers stay in memory
    assert all(p.is_meta for p in model.parameters())
    assert all(not b.is_meta for b in model.buffers())
    with disk.loaded() as loaded:
        assert loaded is model
        for n, p in model.named_parameters():
            assert torch.equal(p, before[n]) and not p.requires_grad
        # the tied head is the embedding again (one tensor, not two copies)
        assert model.lm_head.weight is model.model.embed_tokens.weight
        torch.testing.assert_close(model(input_ids=ids).logits, want, rtol=0, atol=0)
    assert all(p.is_meta for p in model.parameters())
    for n, b in model.named_buffers():
        assert torch.equal(b, buffers[n])
    # the tied pair is one tensor in the file
    from safetensors import safe_open

    with safe_open(disk.path, "pt") as fh:
        assert len(list(fh.keys())) == len(before)
    assert disk.state()["sha256"] == disk.digest and len(disk.digest) == 64


def test_a_changed_or_missing_file_is_refused(tmp_path):
    model = _tied_llama()
    disk = DiskWeights.write(model, str(tmp_path / "w.safetensors"))
    DiskWeights.adopt(_tied_llama(), disk.path, disk.digest)  # the same file: taken
    with open(disk.path, "r+b") as fh:  # one byte of the tensors' data changed
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 1]))
    with pytest.raises(UserError, match="changed since the checkpoint was saved"):
        DiskWeights.adopt(_tied_llama(), disk.path, disk.digest)
    with pytest.raises(UserError, match="is gone"):
        DiskWeights.adopt(_tied_llama(), str(tmp_path / "nothing.safetensors"), disk.digest)


def test_the_spec_refuses_disk_without_an_initial_reference():
    with pytest.raises(UserError, match="reference_storage must be one of memory, disk, got 'ssd'"):
        GRPOSpec(reference_storage="ssd")
    with pytest.raises(UserError, match="keeps the initial reference on disk; grpo.reference is 'external'"):
        GRPOSpec(reference="external", reference_storage="disk")


def _sevens(prompts, completions, **kw):
    """A toy reward (the share of '7' characters): nonzero advantages, so the policy moves off the reference."""
    return [c.count("7") / max(len(c), 1) for c in completions]


def _run(tmp, steps, storage, ckpt_path=None, save_every=None, seed=0):
    from ttrl_lightning.modules import GRPOModule, PolicySpec

    pl.seed_everything(0)
    module = GRPOModule(policy=PolicySpec(model="tiny:qwen2", lr=5e-3, seed=seed), rewards=[_sevens],
                        num_generations=4, sampling=SamplingSpec(max_new_tokens=5),
                        grpo=GRPOSpec(kl_coef=0.1, reference="initial", reference_storage=storage,
                                      num_iterations=2))
    cbs = [RankStateDump(str(tmp / "dump"))]
    if save_every:
        cbs.append(ModelCheckpoint(dirpath=str(tmp / "ckpt"), every_n_train_steps=save_every, save_top_k=-1))
    trainer = pl.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                         enable_checkpointing=bool(save_every), callbacks=cbs, default_root_dir=str(tmp))
    trainer.fit(module, PromptDataModule(task="arith", n_train=32, batch_size=4, seed=0), ckpt_path=ckpt_path)
    return torch.load(tmp / "dump" / "rank0.pt", weights_only=False), module


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def test_a_run_with_its_reference_on_disk_is_the_run_in_memory_and_resumes(tmp_path):
    memory, _ = _run(tmp_path / "memory", 12, "memory")
    disk, module = _run(tmp_path / "disk", 12, "disk")
    _same(memory["policy"], disk["policy"])  # the same log-probs, so the same updates, bit for bit
    assert memory["kl_coef"] == disk["kl_coef"]
    assert all(p.is_meta for p in module.reference_model.parameters())  # nothing held after the fit
    assert list((tmp_path / "disk").rglob("initial.rank0.safetensors"))
    # the file holds the initial weights, which the updates moved away from (the reference is not the policy)
    from safetensors.torch import load_file

    initial = load_file(str(next((tmp_path / "disk").rglob("initial.rank0.safetensors"))))
    assert any(not torch.equal(initial[k], disk["policy"][k]) for k in initial)

    # interrupted after 3 batches (6 optimizer steps: 2 iterations a batch) and resumed: the checkpoint names the file (no copy of the reference in it)
    _run(tmp_path / "part", 6, "disk", save_every=6)
    ckpt = next((tmp_path / "part" / "ckpt").glob("*.ckpt"))
    saved = torch.load(ckpt, weights_only=False)["grpo"]
    assert "reference_state" not in saved and saved["reference_file"]["path"].endswith("initial.rank0.safetensors")
    resumed, _ = _run(tmp_path / "part", 12, "disk", ckpt_path=str(ckpt))
    _same(disk["policy"], resumed["policy"])
    with pytest.raises(UserError, match="resume it with that setting"):
        _run(tmp_path / "part", 12, "memory", ckpt_path=str(ckpt))
    # a checkpoint with the reference in it resumes on disk too (a new file of its state)
    _run(tmp_path / "mem_part", 6, "memory", save_every=6)
    mem_ckpt = next((tmp_path / "mem_part" / "ckpt").glob("*.ckpt"))
    again, _ = _run(tmp_path / "mem_part", 12, "disk", ckpt_path=str(mem_ckpt))
    _same(memory["policy"], again["policy"])


def test_a_second_run_in_the_folder_keeps_the_first_runs_reference(tmp_path):
    """The reference file was ``<root>/reference/initial.rank0.safetensors`` for every run of a folder: a second
    run (another model) overwrote it, and the first run's checkpoint could no longer resume ("changed since the
    checkpoint was saved"). Each run now writes its own version (``initial-v1...``, as Lightning versions
    ``config-v1.yaml``), and the resumed run finds its own file."""
    whole, _ = _run(tmp_path / "whole", 12, "disk")
    _run(tmp_path / "run", 6, "disk", save_every=6)
    ckpt = next((tmp_path / "run" / "ckpt").glob("*.ckpt"))
    first = torch.load(ckpt, weights_only=False)["grpo"]["reference_file"]
    _run(tmp_path / "run", 2, "disk", seed=1)  # another run in the folder, from other initial weights
    _run(tmp_path / "run", 2, "disk", seed=2)
    names = sorted(p.name for p in (tmp_path / "run" / "reference").iterdir())
    assert names == ["initial-v1.rank0.safetensors", "initial-v2.rank0.safetensors", "initial.rank0.safetensors"]
    from ttrl_lightning.modules.disk_weights import file_digest

    assert file_digest(first["path"]) == first["sha256"]  # the first run's file, as its checkpoint names it
    resumed, _ = _run(tmp_path / "run", 12, "disk", ckpt_path=str(ckpt))
    _same(whole["policy"], resumed["policy"])
    assert len(list((tmp_path / "run" / "reference").iterdir())) == 3  # the resumed run wrote no new file


def test_a_moved_run_folder_finds_its_reference_by_name_and_digest(tmp_path):
    import shutil

    whole, _ = _run(tmp_path / "whole", 12, "disk")
    _run(tmp_path / "run", 6, "disk", save_every=6)
    shutil.move(str(tmp_path / "run"), str(tmp_path / "moved"))
    ckpt = next((tmp_path / "moved" / "ckpt").glob("*.ckpt"))
    resumed, _ = _run(tmp_path / "moved", 12, "disk", ckpt_path=str(ckpt))
    _same(whole["policy"], resumed["policy"])


def test_a_reference_version_is_claimed_once(tmp_path):
    from ttrl_lightning.modules.disk_weights import claim_reference_version, reference_file_name

    folder = tmp_path / "reference"
    assert [claim_reference_version(str(folder)) for _ in range(3)] == [0, 1, 2]
    (folder / "initial-v3.rank1.safetensors").write_bytes(b"")  # another rank's file of a version: taken
    (folder / "initial-v4.rank0.safetensors.partial").write_bytes(b"")  # a write cut short: taken
    assert claim_reference_version(str(folder)) == 5
    assert reference_file_name(0, 2) == "initial.rank2.safetensors"
    assert reference_file_name(5, 0) == "initial-v5.rank0.safetensors"


def test_a_full_disk_under_the_reference_file_is_one_line(tmp_path, monkeypatch):
    """safetensors' own error for a write that found no room (no errno; was a traceback): one line naming the
    file, and no partial file left."""
    import os

    import safetensors.torch

    from ttrl_lightning.errors import UserError
    from ttrl_lightning.models import load_model

    def full(tensors, filename, *args, **kwargs):
        open(filename, "wb").write(b"x" * 10)
        raise safetensors.SafetensorError('Error while serializing: I/O error: No space left on device '
                                          '(os error 28)')

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    path = tmp_path / "reference" / "initial.rank0.safetensors"
    with pytest.raises(UserError, match=r"initial.rank0.safetensors: the KL reference's weights file could not "
                                        r"be written \(a write failed: Error while serializing"):
        DiskWeights.write(load_model("tiny:llama"), str(path))
    assert os.listdir(path.parent) == []
