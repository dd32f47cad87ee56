"""Shared helpers of the data tests: packaged raw files (skip-or-fail when missing), and a
static HTTP server on 127.0.0.1 for the download code."""

import functools
import http.server
import threading
from pathlib import Path

import pytest
from needs import require_distribution


def package_path(dist: str, relative: str) -> Path:
    """Path of a file shipped by an installed data package; skip (or fail under CI=true)
    when the package is missing."""
    return Path(str(require_distribution(dist).locate_file(relative)))


@pytest.fixture
def pkg_file():
    """``pkg_file(dist, relative_path)`` -> Path (skip, or fail under CI=true, if absent)."""
    return package_path


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Never touch the user's cache or the network from the tests."""
    monkeypatch.setenv("FAIRGAMES_CACHE", str(tmp_path_factory.getbasetemp() / "fg-cache"))
    monkeypatch.setenv("FAIRGAMES_OFFLINE", "1")
    monkeypatch.delenv("FAIRGAMES_DATA", raising=False)


@pytest.fixture
def server(tmp_path):
    """A static HTTP server on 127.0.0.1, a free port, serving tmp_path/www."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(www))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield www, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
