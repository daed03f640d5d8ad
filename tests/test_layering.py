"""The layers of the data flow (README "Architecture") import only the layers below them.

From the bottom: ``tools`` (the tool protocol, the agent's text format and ``AgentPrompt``) imports only the
registry; ``answers`` (extraction, equivalence, the fused Self-Harmony format) reads the agent format from
``tools``; ``consensus`` sits on ``answers``; ``data`` (pools, questions, tasks, CoTA traces) on ``answers``,
``tools`` and the model builders, never on ``rollout`` or ``pseudo_labels``; ``pseudo_labels`` on ``answers``,
``consensus``, ``signals`` and ``data``'s pool schema, never on the training stack (modules, rollout, eval, cli);
``rollout`` on ``data``, ``tools``, the prompt rule and the signal ops; ``modules`` on all of these, never on ``cli``,
``generate`` or ``callbacks``.
"""
import ast
import importlib
import pathlib

import pytest

#: package -> the ttrl_lightning modules its files may import, besides itself
ALLOWED = {
    "tools": {"registry"},
    "answers": {"registry", "tools"},
    "consensus": {"answers", "errors", "registry"},
    "data": {"answers", "errors", "masking", "models", "prompt_format", "registry", "safe_files", "seeding", "tools"},
    "pseudo_labels": {"answers", "consensus", "signals", "registry", "errors", "data"},
    "rollout": {"data", "errors", "integrations", "masking", "models", "prompt_format", "registry", "safe_files",
                "signals", "tools"},
    "modules": {"answers", "consensus", "data", "errors", "eval", "fidelity", "integrations", "masking", "models",
                "ops", "prompt_format", "pseudo_labels", "registry", "retrieval", "rewards", "rollout",
                "safe_files", "seeding", "tools"},
    # the top: a study drives `ttrl fit` (cli) and reads every layer's results; nothing below imports it
    "study": {"answers", "cli", "data", "errors", "eval", "generate", "models", "modules", "provenance", "registry",
              "rollout", "safe_files"},
}


def _package_imports(path: pathlib.Path) -> set[str]:
    """First component below ``ttrl_lightning`` of every import of a ttrl_lightning module by ``path``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ttrl_lightning."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("ttrl_lightning."))
    return out


def _files(package: str) -> list[pathlib.Path]:
    return sorted(pathlib.Path(importlib.import_module(f"ttrl_lightning.{package}").__file__).parent.rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below(package):
    files = _files(package)
    assert len(files) >= 5
    for path in files:
        found = _package_imports(path) - {package}
        assert found <= ALLOWED[package], (path.name, found - ALLOWED[package])


def test_pseudo_labels_read_only_the_pool_schema_of_data():
    data_imports = {node.module for path in _files("pseudo_labels") for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module
                    and node.module.startswith("data")}
    assert data_imports <= {"data.pool_schema"}  # the schema, without the file I/O or the columnar pool
