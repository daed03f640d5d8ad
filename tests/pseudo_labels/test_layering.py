"""pseudo_labels sits on answers, consensus and signals (README "Architecture"); it never imports the
training stack (modules, rollout, eval, cli), so the trainer can depend on it and not the reverse."""
import ast
import pathlib

import ttrl_lightning.pseudo_labels as pseudo_labels

ALLOWED = {"answers", "consensus", "signals", "registry", "errors", "data"}


def _package_imports(path: pathlib.Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ttrl_lightning."):
            out.add(node.module.split(".")[1])
    return out


def test_pseudo_labels_import_only_the_layers_below():
    files = sorted(pathlib.Path(pseudo_labels.__file__).parent.glob("*.py"))
    assert len(files) >= 7
    for path in files:
        assert _package_imports(path) <= ALLOWED, (path.name, _package_imports(path) - ALLOWED)
    data_imports = {node.module for path in files for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module
                    and node.module.startswith("data")}
    assert data_imports <= {"data.pool"}
