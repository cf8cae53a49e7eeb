"""docs/layout.md, the map of the house, names everything it maps: each package of `trainers/` has
its own entry, which names each of the package's modules; each top-level module of `trainers/`
is named in the trainers part; each Django app of `platform/` is named in the platform entry."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINERS = ROOT / "trainers"
PLATFORM = ROOT / "platform"


def map_block(text: str) -> list[str]:
    """The lines of the map: the page's first fenced block."""
    return text.split("```", 2)[1].splitlines()


def entries(lines: list[str], indent: int) -> dict[str, str]:
    """Each entry at `indent` spaces -> its text, continuation lines included (an entry runs until the
    next line indented `indent` or less)."""
    found: dict[str, str] = {}
    name = None
    for line in lines:
        stripped = line.lstrip(" ")
        depth = len(line) - len(stripped)
        if stripped and depth <= indent:
            name = stripped.split()[0] if depth == indent else None
            if name is not None:
                found[name] = ""
        if name is not None:
            found[name] += " " + line
    return found


def missing_from_map(text: str, trainers: Path = TRAINERS, platform: Path = PLATFORM) -> list[str]:
    """What the map leaves out, as paths."""
    lines = map_block(text)
    top = entries(lines, 0)
    packages = entries(lines, 2)
    missing = []
    for package in sorted(p for p in trainers.iterdir() if (p / "__init__.py").exists()):
        entry = packages.get(f"{package.name}/")
        if entry is None:
            missing.append(f"trainers/{package.name}/")
            continue
        for module in sorted(package.glob("*.py")):
            if module.name != "__init__.py" and not re.search(rf"\b{re.escape(module.name)}\b", entry):
                missing.append(f"trainers/{package.name}/{module.name}")
    trainers_part = top.get("trainers/", "") + "".join(packages.values())
    for module in sorted(trainers.glob("*.py")):
        if module.name not in trainers_part:
            missing.append(f"trainers/{module.name}")
    platform_entry = top.get("platform/", "")
    for app in sorted(p for p in platform.iterdir() if (p / "apps.py").exists() or (p / "settings.py").exists()):
        if not re.search(rf"\b{app.name}\b", platform_entry):
            missing.append(f"platform/{app.name}/")
    return missing


def test_the_map_names_every_package_module_and_app():
    assert missing_from_map((ROOT / "docs" / "layout.md").read_text()) == []


def test_the_check_sees_what_the_map_leaves_out(tmp_path):
    """A package without an entry, a module its entry does not name, a top-level module and an app."""
    trainers, platform = tmp_path / "trainers", tmp_path / "platform"
    for folder in ("engine", "models"):
        (trainers / folder).mkdir(parents=True)
        (trainers / folder / "__init__.py").write_text("")
    (trainers / "models" / "transformer.py").write_text("")
    (trainers / "models" / "paged_attention.py").write_text("")
    (trainers / "cli.py").write_text("")
    (trainers / "devices.py").write_text("")
    for app in ("runner", "alerts"):
        (platform / app).mkdir(parents=True)
        (platform / app / "apps.py").write_text("")
    text = """```
trainers/   the library
  cli.py    the command line
  models/   transformer.py (the decoder), paged_attention_test.py
platform/   runner (tasks)
```"""
    assert missing_from_map(text, trainers, platform) == [
        "trainers/engine/",
        "trainers/models/paged_attention.py",
        "trainers/devices.py",
        "platform/alerts/",
    ]
