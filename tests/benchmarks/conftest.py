import pytest


@pytest.fixture(scope="session")
def tiny_model_folder(tmp_path_factory) -> str:
    """A tiny random llama saved as a model folder (what ``ttrl model import --out`` leaves), for benchmarks
    that load ``--model DIR``."""
    from ttrl_lightning.models import load_model, load_tokenizer

    folder = tmp_path_factory.mktemp("tiny_llama")
    tok = load_tokenizer("tiny:llama")
    load_model("tiny:llama", tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)
