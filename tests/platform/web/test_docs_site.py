"""The docs site served under /docs/ (web/docs_site.py): built with MkDocs on the first visit into
PLATFORM_DATA_DIR/docs-site, served as static files without a login, rebuilt when a source is newer
than the build, and nothing outside the built site is reachable."""

import os
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
