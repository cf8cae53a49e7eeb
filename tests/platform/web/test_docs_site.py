"""The docs site served under /docs/ (web/docs_site.py): built with MkDocs on the first visit into
PLATFORM_DATA_DIR/docs-site, served as static files without a login, rebuilt when a source is newer
than the build, and nothing outside the built site is reachable; a folder-style address reaches its
page, and the pages hold no inline script (the CSP) and no outside font."""

import os
import re
import time

import pytest

from web import docs_site


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return tmp_path


def test_the_docs_are_built_on_the_first_visit_and_served_without_a_login(client, data_dir):
    answer = client.get("/docs/")
    assert answer.status_code == 200
    assert b"GRPO platform" in b"".join(answer.streaming_content)
    page = client.get("/docs/reference/config.html")
    assert page.status_code == 200 and b"prefill_chunk_tokens" in b"".join(page.streaming_content)
    assert (data_dir / "docs-site" / docs_site.STAMP).exists()


def test_only_the_built_site_is_reachable(client, data_dir):
    assert client.get("/docs/").status_code == 200
    assert client.get("/docs/no-such-page.html").status_code == 404
    assert client.get(f"/docs/{docs_site.STAMP}").status_code == 404
    assert client.get("/docs/../../manage.py").status_code == 404
    assert client.get("/docs/%2e%2e/%2e%2e/manage.py").status_code == 404


def test_a_changed_source_rebuilds_the_site(client, data_dir, tmp_path_factory, monkeypatch):
    source = tmp_path_factory.mktemp("sources") / "page.md"
    source.write_text("x")
    monkeypatch.setattr(docs_site, "_sources", lambda: [source])
    os.utime(source, (time.time() - 60, time.time() - 60))
    client.get("/docs/")
    stamp = data_dir / "docs-site" / docs_site.STAMP
    first = stamp.stat().st_mtime
    client.get("/docs/")
    assert stamp.stat().st_mtime == first  # nothing changed: served as built
    os.utime(source, (time.time() + 60, time.time() + 60))
    client.get("/docs/")
    assert stamp.stat().st_mtime > first


def test_the_nav_links_to_the_docs(alice_client):
    assert b'id="nav-docs"' in alice_client.get("/runs/").content


def test_folder_style_addresses_are_sent_on_to_the_page(client, data_dir):
    for address, page in [
        ("/docs/quickstart/", "/docs/quickstart.html"),
        ("/docs/quickstart", "/docs/quickstart.html"),
        ("/docs/reference/config/", "/docs/reference/config.html"),
        ("/docs/quickstart/?q=launch", "/docs/quickstart.html?q=launch"),
    ]:
        answer = client.get(address)
        assert (answer.status_code, answer["Location"]) == (302, page), address
    assert client.get("/docs/quickstart.html").status_code == 200
    assert client.get("/docs/no-such-page/").status_code == 404
    assert client.get("/docs/assets/javascripts/csp/base.js").status_code == 200  # a file: served as it is
    assert client.get("/docs/..%2fmanage/").status_code == 404


def test_the_pages_run_no_inline_script_and_fetch_no_font_from_outside(client, data_dir):
    """The platform's Content-Security-Policy (script-src 'self') blocks inline scripts, and the
    search needs the theme's: each is a file (docs/overrides); fonts are the system's."""
    html = b"".join(client.get("/docs/quickstart.html").streaming_content).decode()
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert len(scripts) >= 3
    assert [s for s in scripts if "src=" not in s and 'type="application/json"' not in s] == []
    for src in re.findall(r'<script src="([^"]+)"', html):
        assert client.get(f"/docs/{src}").status_code == 200, src
    assert "fonts.googleapis" not in html and "fonts.gstatic" not in html
