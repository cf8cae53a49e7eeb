"""The packages of `trainers/` stand in layers, and an import only goes down: a package never imports
one that stands at its own level or above it. `errors` is a leaf every package
may raise from; `config` stands above the packages whose names and rules it checks against (tasks,
rewards, environments, model presets, mesh sizes), which take the config's sections as plain values
and never import it."""

import ast
from pathlib import Path

TRAINERS = Path(__file__).resolve().parents[2] / "trainers"

LAYERS = {
    "errors": 0,
    "registry": 0,
    "sandbox": 0,
    "data": 1,
    "parallel": 1,
    "algo": 1,
    "envs": 2,
    "models": 2,
    "config": 3,
    "step": 4,
    "engine": 4,
    "rollout": 5,
    "loop": 6,
    "commands": 7,
    "cli": 8,
    "devices": 8,
    "__init__": 9,
    "__main__": 9,
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
    return sorted((source, target, path) for source, target, path in found if LAYERS[target] >= LAYERS[source])


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
        "def f():\n    import trainers.loop.policy\n"
    )
    assert arrows_up(imports_between_packages(tmp_path)) == [("rollout", "loop", "rollout/source.py")]


def imports_inside_functions_without_a_reason(root: Path = TRAINERS) -> list[str]:
    """ "path:line" of every import inside a function that gives no reason: the first import of each
    run of consecutive imports needs a comment on its line or on the line above it (`# lazy: ...`:
    what importing at the top would cost, e.g. JAX in a JAX-free path). The rest of the run shares it."""
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        for function in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                line, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
                if "#" not in line and not above.startswith(("#", "import ", "from ")):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_every_import_inside_a_function_says_why():
    assert imports_inside_functions_without_a_reason() == []


def test_the_check_sees_an_import_without_a_reason(tmp_path):
    (tmp_path / "m.py").write_text(
        "def f():\n    import json\n    import os\n\n"
        "def g():\n    # lazy: JAX only when g runs\n    import jax\n    import flax\n\n"
        "def h():\n    x = 1\n    from trainers import loop\n"
    )
    assert imports_inside_functions_without_a_reason(tmp_path) == ["m.py:2", "m.py:12"]
