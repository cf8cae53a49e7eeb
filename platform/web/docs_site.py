"""The docs site (docs/, mkdocs.yml) served by the platform under /docs/: built with MkDocs into
PLATFORM_DATA_DIR/docs-site the first time it is asked for, and again whenever a page or mkdocs.yml
is newer than that build; then served as static files. No login needed: the docs hold nothing a
user owns."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.exceptions import SuspiciousFileOperation
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils._os import safe_join
from django.views.static import serve

STAMP = ".built"


def site_dir() -> Path:
    return Path(settings.DATA_DIR) / "docs-site"


def _sources() -> list[Path]:
    root = Path(settings.REPO_ROOT)
    return [root / "mkdocs.yml", *(path for path in (root / "docs").rglob("*") if path.is_file())]


def is_stale(site: Path) -> bool:
    """No build yet, or a source changed after it."""
    stamp = site / STAMP
    if not stamp.exists():
        return True
    built = stamp.stat().st_mtime
    return any(path.stat().st_mtime > built for path in _sources())


def build(site: Path) -> None:
    """Build the site into a fresh folder beside `site`, then swap it in (a reader never sees half a
    build)."""
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")  # the theme's notice about its successor, at every build
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    site.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix="docs-site-", dir=site.parent))
    config = load_config(str(Path(settings.REPO_ROOT) / "mkdocs.yml"), site_dir=str(fresh), strict=False)
    mkdocs_build(config)
    (fresh / STAMP).touch()
    old = site.with_name(site.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if site.exists():
        site.rename(old)
    fresh.rename(site)
    shutil.rmtree(old, ignore_errors=True)


def page_file(site: Path, path: str) -> str | None:
    """The built page a folder-style address names: "quickstart/" or "quickstart" -> "quickstart.html"
    (the site is built with use_directory_urls off, its pages are *.html); None when there is none, or
    when `path` names a file or folder of the site itself."""
    name = path.rstrip("/")
    if not name or name.split("/")[-1].startswith(".") or name.endswith(".html"):
        return None
    try:
        if os.path.exists(safe_join(str(site), path)) and not path.endswith("/"):
            return None  # a file of the site (an asset), served as it is
        if os.path.isfile(safe_join(str(site), path, "index.html")):
            return None  # a folder with its own index.html
        return name + ".html" if os.path.isfile(safe_join(str(site), name + ".html")) else None
    except SuspiciousFileOperation:  # a path that leaves the site ("..")
        return None


def docs_page(request, path: str = "") -> HttpResponse:
    """A page or asset of the built site (index.html for the folder itself). An address in the
    folder style of other MkDocs sites (/docs/quickstart/, /docs/quickstart) is sent on to the page
    (/docs/quickstart.html), whose relative links only work from there."""
    site = site_dir()
    site.parent.mkdir(parents=True, exist_ok=True)
    with open(site.parent / "docs-site.lock", "w") as lock:  # one build at a time, across the web workers
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_stale(site):
            build(site)
    page = page_file(site, path)
    if page is not None:
        target = reverse("docs-page", args=[page])
        return redirect(f"{target}?{request.GET.urlencode()}" if request.GET else target)
    if path.endswith("/") or not path:
        path += "index.html"
    if path.split("/")[-1].startswith("."):
        raise Http404("no such page")
    try:
        return serve(request, path, document_root=str(site))
    except SuspiciousFileOperation:  # a path that leaves the site ("..")
        raise Http404("no such page") from None
