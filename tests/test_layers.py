"""The packages of `trainers/` stand in layers, and an import only goes down: a package never imports
one that stands at its own level or above it (issue 32, item 2). The one knot left is `config`'s
checks and choices reaching into the packages that import the config (ALLOWED_UP below, each an
import inside a function or of a JAX-free leaf); any other arrow up fails this test."""

import ast
from pathlib import Path

TRAINERS = Path(__file__).resolve().parents[1] / "trainers"

LAYERS = {
    "config": 0,
    "data": 1, "parallel": 1, "algo": 1,
    "envs": 2, "models": 2,
    "step": 3, "engine": 3,
    "rollout": 4,
    "loop": 5,
    "cli": 6, "devices": 6, "__init__": 7, "__main__": 7,
}

ALLOWED_UP = {
    ("config", "algo"),      # algo/names.py: the algorithms' names, the schema's choices (no JAX)
    ("config", "models"),    # models/lora_targets.py, presets, hf_config: shapes and names (no JAX)
    ("config", "data"),      # tasks, rewards, the tokenizer: checks of names and prompts
    ("config", "envs"),      # the environments' settings schemas
    ("config", "parallel"),  # parallel/sizes.py: mesh size arithmetic (no JAX)
}


def imports_between_packages(root: Path = TRAINERS) -> set[tuple[str, str, str]]:
    """(importing package, imported package, file) for every `trainers.X` import across packages."""
    found = set()
    for path in root.rglob("*.py"):
        relative = path.relative_to(root).parts
        source = relative[0] if len(relative) > 1 else relative[0][:-3]
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "trainers" and len(parts) > 1 and parts[1] != source:
                    found.add((source, parts[1], str(path.relative_to(root))))
    return found


def arrows_up(found: set[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return sorted((source, target, path) for source, target, path in found
                  if LAYERS[target] >= LAYERS[source] and (source, target) not in ALLOWED_UP)


def test_every_package_has_a_layer():
    packages = {p.name for p in TRAINERS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in TRAINERS.glob("*.py")}
    assert packages | modules <= set(LAYERS)


def test_no_import_runs_back_up():
    assert arrows_up(imports_between_packages()) == []


def test_the_check_sees_an_arrow_up(tmp_path):
    """rollout once imported loop's plan, hooks and placement (now in step/), at the top of a file or
    inside a function: both are found; an import down is not."""
    (tmp_path / "rollout").mkdir()
    (tmp_path / "rollout" / "source.py").write_text(
        "from trainers.loop.plan import BatchPlan\nfrom trainers.step.hooks import Hooks\n"
        "def f():\n    import trainers.loop.policy\n")
    assert arrows_up(imports_between_packages(tmp_path)) == [("rollout", "loop", "rollout/source.py")]
