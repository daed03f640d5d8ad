"""consensus sits below signals and eval in the data flow (README "Architecture"): it imports neither."""
import ast
import pathlib

import ttrl_lightning.consensus as consensus

ALLOWED = {"answers", "registry"}  # ttrl_lightning modules consensus may import, besides itself


def _package_imports(path: pathlib.Path) -> set[str]:
    """First component below ``ttrl_lightning`` of every relative import of the parent package."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ttrl_lightning."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("ttrl_lightning."))
    return out


def test_consensus_depends_only_on_answers_and_registry():
    files = sorted(pathlib.Path(consensus.__file__).parent.glob("*.py"))
    assert files
    for path in files:
        assert _package_imports(path) <= ALLOWED, (path.name, _package_imports(path) - ALLOWED)
