"""The precision a CPU run gets when its config names none (cli/precision.py, hardware.py): bf16-mixed on a
CPU with bf16 dot products in hardware (AVX512-BF16, AMX), 32-true elsewhere, printed once; a precision the
config or command line sets is kept; GPU runs keep Lightning's default. The CPU is faked here: this machine's
own features decide nothing a test asserts."""
import pytest
import torch

from ttrl_lightning.cli.configs import config_path
from ttrl_lightning.cli.fit import make_cli
from ttrl_lightning.cli.precision import choose_precision, fill_precision
from ttrl_lightning.hardware import cpu_features, describe_float_features, native_bf16

AVX2 = {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": False}
AVX512 = {**AVX2, "avx512f": True}  # AVX-512 without BF16 (Skylake-X): bf16 is emulated
AVX512_BF16 = {**AVX512, "avx512_bf16": True}  # Cooper Lake, Zen 4
AMX = {**AVX512_BF16, "amx_bf16": True, "amx_tile": True}  # Sapphire Rapids


@pytest.mark.parametrize("features,expected", [(AVX2, "32-true"), (AVX512, "32-true"),
                                               (AVX512_BF16, "bf16-mixed"), (AMX, "bf16-mixed")])
def test_a_cpu_run_gets_bf16_mixed_only_where_bf16_is_in_hardware(features, expected):
    for accelerator in ("cpu", "CPU", "auto", None):
        precision, why = choose_precision(accelerator, features, cuda_available=False)
        assert precision == expected
        other = "32-true" if expected == "bf16-mixed" else "bf16-mixed"
        assert f"--trainer.precision {other} forces" in why and describe_float_features(features) in why


def test_gpu_runs_keep_lightnings_default():
    assert choose_precision("gpu", AMX, cuda_available=True) == (None, "not a CPU run")
    assert choose_precision("auto", AMX, cuda_available=True)[0] is None
    assert choose_precision("cuda", AVX2, cuda_available=False)[0] is None
    assert choose_precision("cpu", AMX, cuda_available=True)[0] == "bf16-mixed"  # asked for the CPU


def test_a_precision_that_is_set_is_kept():
    given = {"accelerator": "cpu", "precision": "32-true"}
    assert fill_precision(given, AMX, cuda_available=False) is None and given["precision"] == "32-true"
    unset = {"accelerator": "cpu", "precision": None}
    line = fill_precision(unset, AMX, cuda_available=False)
    assert unset["precision"] == "bf16-mixed" and line.startswith("precision: bf16-mixed (this CPU has bf16")


def test_cpu_features_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: fpu sse avx2 avx512f avx512_bf16\n\n"
                    "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n")
    got = cpu_features(str(info))
    assert got["model"] == "Some CPU 9000"
    assert (got["avx2"], got["avx512f"], got["avx512_bf16"], got["amx_bf16"]) == (True, True, True, False)
    assert native_bf16(got) and not native_bf16(cpu_features(str(tmp_path / "missing")))


FAST_TTRL = ["--config", config_path("ttrl/tiny_demo.yaml"), "--model.init_args.policy.model", "tiny:llama",
             "--trainer.max_steps", "1", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
             "--trainer.enable_model_summary", "false",
             "--trainer.limit_val_batches", "0", "--model.init_args.sampling.max_new_tokens", "4"]


@pytest.mark.parametrize("features,forced,expected", [(AMX, None, "bf16-mixed"), (AVX2, None, "32-true"),
                                                      (AMX, "32-true", "32-true"), (AVX2, "bf16-mixed", "bf16-mixed")])
def test_ttrl_fit_says_what_it_chose_and_runs_with_it(tmp_path, monkeypatch, capsys, features, forced, expected):
    monkeypatch.setattr("ttrl_lightning.cli.precision.cpu_features", lambda: features)
    # the tiny config pins 32-true (the same numbers on every CPU): null takes the pin off
    args = ["fit", *FAST_TTRL, "--trainer.default_root_dir", str(tmp_path), "--trainer.precision", forced or "null"]
    cli = make_cli(args)
    err = capsys.readouterr().err
    assert cli.trainer.precision == expected and cli.trainer.global_step == 1
    said = [line for line in err.splitlines() if line.startswith("precision: ")]
    assert said == ([] if forced else [f"precision: {expected} ({choose_precision('cpu', features, False)[1]})"])


def test_a_float64_run_trains_and_its_log_probs_come_from_logits(tmp_path, capsys):
    """``--trainer.precision 64-true`` (a float64 model) was a TypeError traceback at the first step: the fused
    log-prob kernel takes float32, float16 and bfloat16 only. A float64 LM head now takes the materialised
    logits (``logprobs.fused_unsupported_reason`` says why) and the run trains."""
    from ttrl_lightning.models import load_model, load_tokenizer
    from ttrl_lightning.modules.logprobs import fused_unsupported_reason

    model = load_model("tiny:llama", load_tokenizer("tiny:llama")).double()
    assert fused_unsupported_reason(model) == ("its LM head is float64 and the fused kernel takes float32, "
                                               "float16 or bfloat16")
    assert fused_unsupported_reason(model.float()) is None
    cli = make_cli(["fit", *FAST_TTRL, "--trainer.default_root_dir", str(tmp_path),
                    "--trainer.precision", "64-true"])
    assert cli.trainer.global_step == 1 and next(cli.model.policy.parameters()).dtype == torch.float64
