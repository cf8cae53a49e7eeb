"""The docs site: the generated reference pages match the code (scripts/generate_docs.py), the site
builds with `mkdocs build --strict` (a broken link or anchor fails it), and the README stays short and
points into it."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def generator():
    spec = importlib.util.spec_from_file_location("generate_docs", ROOT / "scripts" / "generate_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_reference_pages_are_current():
    assert generator().stale_pages() == [], "run .venv/bin/python scripts/generate_docs.py"


def test_the_config_reference_lists_every_field_with_its_default():
    from trainers.config.form_specs import field_specs

    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    for section in field_specs():
        for spec in section.fields:
            assert f"| `{spec.path}` |" in page
    assert "| `rollout.prefill_chunk_tokens` | `512` | int >= 0, <= 131072 |" in page
    assert "| `model.dtype` | `\"float32\"` | `float32`, `bfloat16` |" in page


def test_the_metric_reference_describes_every_metric():
    from trainers.config import metric_names

    page = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    for name in metric_names.METRIC_NAMES:
        base = name.removeprefix("eval/") if name.startswith("eval/env/") else name
        assert f"| `{base}` |" in page, name
        assert metric_names.METRIC_DESCRIPTIONS[base]


def test_the_api_reference_lists_every_operation_of_the_openapi_document():
    from api import openapi

    page = (ROOT / "docs" / "reference" / "api.md").read_text()
    for path, item in openapi.build()["paths"].items():
        for method in item:
            assert f"| `{method.upper()}` | `{path}` |" in page, (method, path)
    assert "| `GET` | `/api/runs/{pk}` | A run: status, progress, config and lineage |" in page
    assert "POST /api/runs/&lt;id&gt;/&lt;cancel\\|pause" in page  # prose escaped, the pipe too


def test_a_stale_page_is_named(tmp_path, monkeypatch):
    module = generator()
    monkeypatch.setattr(module, "ROOT", tmp_path)
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "docs" / "reference" / "config.md").write_text(module.config_reference())
    (tmp_path / "docs" / "reference" / "metrics.md").write_text("# Metrics\n")
    assert module.stale_pages() == ["docs/reference/metrics.md", "docs/reference/api.md"]
    (tmp_path / "docs" / "reference" / "api.md").write_text(module.api_reference())
    assert module.stale_pages() == ["docs/reference/metrics.md"]


def test_the_site_builds_strictly(tmp_path):
    """--strict turns every warning into a failure: a link to a missing page or anchor, a page
    missing from the nav's files."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "reference" / "config.html").exists() and (tmp_path / "index.html").exists()


def test_a_broken_link_fails_the_build(tmp_path):
    """The check above can fail: the same build with one page linking to a page that is not there."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    shutil.copytree(ROOT / "docs" / "overrides", docs / "overrides")  # the theme's custom_dir
    config = (ROOT / "mkdocs.yml").read_text()
    config = re.sub(r"\nnav:\n(.|\n)*", "\n", config)
    (tmp_path / "mkdocs.yml").write_text(config)
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode != 0 and "missing.md" in result.stderr


def test_the_readme_is_short_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
    assert readme.count("```") % 2 == 0
    assert not re.search(r"^```[ \t]+\S", readme, re.M), "text after a closing code fence"
