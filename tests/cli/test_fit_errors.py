"""`ttrl fit` user errors (ttrl_lightning/cli/fit.py, cli/parse_errors.py): one line naming what is wrong,
exit code 1, no traceback; `--debug` / TTRL_DEBUG=1 show the full report."""
import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.cli.configs import config_path
from ttrl_lightning.cli.parse_errors import CommandLineError, condense
from ttrl_lightning.errors import UserError

GRPO = ["--config", config_path("rft/tiny_grpo_fast.yaml"), "--trainer.logger=false"]


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch, tmp_path):
    monkeypatch.delenv("TTRL_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)  # nothing may land in the checkout


@pytest.mark.parametrize("option, message", [
    # module arguments checked when the module is built
    ("--model.init_args.rewards=[exact_answer, nosuch]",
     "unknown reward 'nosuch'; known: digits_only, exact_answer"),
    ("--model.init_args.policy.lr=-0.001", "policy.lr must be > 0, got -0.001"),
    ("--model.init_args.policy.model=tiny:bogus",  # was 45 lines of traceback
     "policy.model: unknown tiny architecture 'bogus'; known: tiny:"),
    ("--model.init_args.policy.dtype=int8",
     "policy.dtype must be one of float32, bfloat16, float16, float64"),
    ("--model.init_args.sampling.top_p=0", "sampling.top_p must be in (0, 1], got 0.0"),
    ("--model.init_args.grpo.reference=ema", "grpo.reference must be one of initial, none, external"),
    ("--model.init_args.num_generations=0", "GRPOModule argument num_generations must be an integer >= 1"),
    # jsonargparse's own errors, condensed
    ("--model.init_args.sampling.temperature=abc",
     "model.init_args.sampling.temperature: Expected a <class 'float'>. Got value: abc (GRPOModule)"),
    # a former flat option: where it moved
    ("--model.init_args.temperature=0.5",
     "model.init_args: Option 'temperature' is not accepted (GRPOModule): it moved to "
     "model.init_args.sampling.temperature"),
    ("--model.init_args.kl_coef=0.2",
     "model.init_args: Option 'kl_coef' is not accepted (GRPOModule): it moved to model.init_args.grpo.kl_coef"),
    ("--model.init_args.nosuch=1", "model.init_args: Option 'nosuch' is not accepted (GRPOModule)"),
    ("--trainer.max_stepz=3", "unrecognized arguments: --trainer.max_stepz=3"),
])
def test_user_errors_are_one_line(option, message, capsys, tmp_path):
    rc = main(["fit", *GRPO, option, f"--trainer.default_root_dir={tmp_path / 'run'}"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert err == f"ttrl fit: {message}" + err[len("ttrl fit: ") + len(message):]  # starts with it
    assert err.count("\n") == 1 and "Traceback" not in err and "usage:" not in out + err
    assert not (tmp_path / "run").exists()


TTRL = ["--config", config_path("ttrl/tiny_vllm.yaml"), "--model.init_args.engine=hf", "--trainer.logger=false"]
CCRFT = ["--config", config_path("rft/tiny_ccrft.yaml"), "--trainer.logger=false"]


@pytest.mark.parametrize("args, message", [
    # TTRL's and CC-RFT's former flat options: where each moved
    ([*TTRL, "--model.init_args.pseudo_labeler=pixel"],
     "model.init_args: Option 'pseudo_labeler' is not accepted (TTRLModule): it moved to "
     "model.init_args.voting.labeler"),
    ([*TTRL, "--model.init_args.eval_k=8"],
     "model.init_args: Option 'eval_k' is not accepted (TTRLModule): it moved to model.init_args.eval.k"),
    ([*TTRL, "--model.init_args.baseline_momentum=0.9"],
     "model.init_args: Option 'baseline_momentum' is not accepted (TTRLModule): it moved to "
     "model.init_args.advantage.baseline_momentum"),
    ([*CCRFT, "--model.init_args.w_curiosity=0"],
     "model.init_args: Option 'w_curiosity' is not accepted (CCRFTModule): it moved to "
     "model.init_args.curiosity_coherence.w_curiosity"),
    # the grouped options check themselves, named by their place
    ([*TTRL, "--model.init_args.voting.num_trained=9"], "voting.num_trained (N=9, the rows trained on) must be <="),
    ([*TTRL, "--model.init_args.voting.labeler=nope"], "voting.labeler must be one of"),
    ([*TTRL, "--model.init_args.eval.k=0"], "eval.k must be an integer >= 1, got 0"),
])
def test_grouped_options_errors_are_one_line(args, message, capsys, tmp_path):
    rc = main(["fit", *args, f"--trainer.default_root_dir={tmp_path / 'run'}"])
    out, err = capsys.readouterr()
    assert rc == 1 and err.startswith(f"ttrl fit: {message}"), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_model_errors_are_refused_before_training(capsys, tmp_path):
    """The negative learning rate used to fail inside torch.optim after the model was built and the trainer
    set up: now the spec refuses it while the classes are built."""
    rc = main(["fit", *GRPO, "--model.init_args.policy.lr=-1", f"--trainer.default_root_dir={tmp_path}"])
    out, err = capsys.readouterr()
    assert rc == 1 and err == "ttrl fit: policy.lr must be > 0, got -1.0\n"
    assert "Qwen2ForCausalLM" not in out  # no model summary: the trainer never started


def test_debug_shows_the_full_report(monkeypatch):
    with pytest.raises(UserError, match="unknown reward 'nosuch'"):
        main(["fit", *GRPO, "--model.init_args.rewards=[nosuch]", "--debug"])
    monkeypatch.setenv("TTRL_DEBUG", "1")
    with pytest.raises(UserError, match="policy.lr must be > 0"):
        main(["fit", *GRPO, "--model.init_args.policy.lr=-1"])
    with pytest.raises(SystemExit) as e:  # jsonargparse's own report (usage + nested errors), exit 2
        main(["fit", *GRPO, "--model.init_args.sampling.temperature=abc"])
    assert e.value.code == 2


_UNION_REPORT = '''Parser key "trainer.logger":
  Does not validate against any of the Union subtypes
  Subtypes: [<class 'lightning.pytorch.loggers.logger.Logger'>, <class 'bool'>, <class 'NoneType'>]
  Errors:
    - Problem with given class_path 'lightning.pytorch.loggers.CSVLogger':
        the following arguments are required: save_dir
    - Expected a <class 'bool'>
    - Expected a <class 'NoneType'>
  Given value type: <class 'jsonargparse._namespace.Namespace'>
  Given value: Namespace(class_path='lightning.pytorch.loggers.CSVLogger')'''


def test_condense_keeps_the_key_and_the_reason():
    assert condense(_UNION_REPORT) == ("trainer.logger.init_args: the following arguments are required: "
                                       "save_dir (CSVLogger)")
    assert condense("unrecognized arguments: --x") == "unrecognized arguments: --x"
    only_alternatives = 'Parser key "a":\n  Does not validate against any of the Union subtypes\n' \
                        "  Errors:\n    - Expected a <class 'int'>\n    - Expected a <class 'NoneType'>"
    assert condense(only_alternatives) == "a: Expected a <class 'int'> (and 1 more)"
    assert issubclass(CommandLineError, UserError)


def test_ctrl_c_during_fit_exits_130_and_gives_ctrl_c_back(tmp_path, monkeypatch, capsys):
    """Lightning answers Ctrl-C with a graceful shutdown and ``sys.exit(1)`` (SIGINT left ignored): ``ttrl fit``
    exits 130, as the README's exit-code table says of every command, and Ctrl-C works again afterwards."""
    import signal

    from lightning.pytorch.loops.fit_loop import _FitLoop

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(_FitLoop, "run", interrupted)
    before = signal.getsignal(signal.SIGINT)
    rc = main(["fit", *GRPO, f"--trainer.default_root_dir={tmp_path / 'run'}", "--trainer.max_steps=2"])
    assert rc == 130 and "ttrl fit: interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before


def test_sigterm_during_fit_exits_143(tmp_path, monkeypatch, capsys):
    """SIGTERM (SLURM preemption, ``kill``) during ``fit``: the same graceful shutdown as Ctrl-C, then exit 143
    and one line saying so, as the README's exit-code table says (it exited 130)."""
    import os
    import signal

    from lightning.pytorch.loops.fit_loop import _FitLoop

    def terminated(self):
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs at the next bytecode, here
        for _ in range(1000):
            pass

    monkeypatch.setattr(_FitLoop, "run", terminated)
    rc = main(["fit", *GRPO, f"--trainer.default_root_dir={tmp_path / 'run'}", "--trainer.max_steps=2"])
    assert rc == 143 and "ttrl fit: terminated (SIGTERM)" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize("callback, message", [
    ("{class_path: ttrl_lightning.callbacks.LabelFreeStopping, init_args: {mode: halt}}",
     "LabelFreeStopping: mode must be 'stop' or 'flag', got 'halt'"),
    ("{class_path: ttrl_lightning.callbacks.LabelFreeStopping, init_args: {smoothing: 1.0}}",
     "LabelFreeStopping: smoothing must be in [0, 1), got 1.0"),
    ("{class_path: ttrl_lightning.callbacks.LabelFreeStopping, init_args: {patience: 0}}",
     "LabelFreeStopping: patience must be an integer >= 1, got 0"),
    ("{class_path: ttrl_lightning.callbacks.LabelFreeStopping, init_args: {min_delta: .nan}}",
     "LabelFreeStopping: need min_delta >= 0"),
    ("{class_path: ttrl_lightning.callbacks.EMAAnchor, init_args: {rho: 2}}", "EMAAnchor: rho must be in [0, 1)"),
    ("{class_path: ttrl_lightning.callbacks.EMAAnchor, init_args: {rho: -0.5}}", "EMAAnchor: rho must be in [0, 1)"),
    ("{class_path: ttrl_lightning.callbacks.EMAAnchor, init_args: {update_every: 0}}",
     "EMAAnchor: update_every must be an integer >= 1, got 0"),
    ("{class_path: ttrl_lightning.callbacks.PIDKLController, init_args: {corridor: [0.3, 0.1]}}",
     "PIDKLController: corridor must be two finite numbers [low, high] with 0 <= low < high"),
    ("{class_path: ttrl_lightning.callbacks.PIDKLController, init_args: {target: -1}}",
     "PIDKLController: target -1.0 must be > 0 and inside the corridor"),
    ("{class_path: ttrl_lightning.callbacks.PIDKLController, init_args: {beta_0: .nan}}",
     "PIDKLController: beta_0 must be a finite number, got nan"),
])
def test_callback_argument_errors_are_one_line(callback, message, capsys, tmp_path):
    extra = tmp_path / "callbacks.yaml"
    extra.write_text(f"trainer:\n  callbacks:\n    - {callback}\n")
    rc = main(["fit", *GRPO, "--config", str(extra), f"--trainer.default_root_dir={tmp_path / 'run'}"])
    out, err = capsys.readouterr()
    assert rc == 1 and err.startswith(f"ttrl fit: {message}"), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_label_free_stopping_on_a_module_without_votes_is_one_line(capsys, tmp_path):
    extra = tmp_path / "callbacks.yaml"
    extra.write_text("trainer:\n  callbacks:\n    - {class_path: ttrl_lightning.callbacks.LabelFreeStopping}\n")
    rc = main(["fit", *GRPO, "--config", str(extra), "--trainer.max_steps=1",
               f"--trainer.default_root_dir={tmp_path / 'run'}"])
    out, err = capsys.readouterr()
    assert rc == 1 and err.startswith("ttrl fit: LabelFreeStopping reads 'train/majority_ratio', which only "
                                      "TTRLModule logs; the run's module is GRPOModule"), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_missing_model_a_non_utf8_config_and_a_negative_max_steps_are_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b'seed_everything: 0\nx: "\xff"\n')
    for extra, message in (
            (["--model.init_args.policy.model=/nonexistent/model"],  # was 152 lines of traceback
             "/nonexistent/model does not exist; give tiny:<arch>, a Hugging Face checkpoint folder or a .ckpt"),
            (["--config", str(bad)], f"{bad}: not UTF-8 text (byte 0xff at position 23)"),
            (["--trainer.max_steps=-5"], "`max_steps` must be a non-negative integer or -1")):
        rc = main(["fit", *GRPO, *extra, f"--trainer.default_root_dir={tmp_path / 'run'}"])
        out, err = capsys.readouterr()
        assert rc == 1 and err.startswith(f"ttrl fit: {message}"), err
        assert err.count("\n") == 1 and "Traceback" not in err


def test_an_external_reference_without_its_callback_is_one_line(capsys, tmp_path):
    """``grpo.reference: external`` with the EMAAnchor callback taken off was a RuntimeError traceback."""
    rc = main(["fit", *GRPO, "--trainer.callbacks=[]", f"--trainer.default_root_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("ttrl fit: grpo.reference='external' but no callback set a reference "
                                            "model: add the EMAAnchor callback (trainer.callbacks) or use "
                                            "grpo.reference 'initial'")
