"""A local stand-in for the Hugging Face Hub: the few endpoints ``huggingface_hub`` calls to
resolve a revision and download a snapshot, served from memory by ``http.server`` in a thread.

    with HubStandIn() as hub:                            # http://127.0.0.1:<port>
        commit = hub.publish("model", "Qwen/Qwen2.5-Math-1.5B", folder)
        env = {"HF_ENDPOINT": hub.url, ...}              # for a subprocess using huggingface_hub

Endpoints (huggingface_hub 1.x/2.x: ``hf_api.py`` repo_info / list_repo_tree, ``file_download.py``
get_hf_file_metadata / http_get):

- ``GET /api/{models,datasets}/<id>[/revision/<rev>]``: ``{"id", "sha", "siblings"}``
  (``HfApi.repo_info``, which ``snapshot_download`` calls to resolve a branch);
- ``GET /api/{models,datasets}/<id>/tree/<rev>[/<path>]?recursive=...``: the files at that commit
  (``list_repo_tree``; one page, no ``Link`` header);
- ``HEAD|GET /[datasets/]<id>/resolve/<rev>/<file>``: ``X-Repo-Commit``, ``ETag`` (the blob's
  git sha1) and ``Content-Length``, and the bytes (``hf_hub_download``).

An unknown repo is a 404 with ``X-Error-Code: RepoNotFound``, an unknown revision one with
``RevisionNotFound`` (what ``hf_raise_for_status`` reads). Each publish is a new commit on
``main``; earlier commits stay served. ``requests`` lists (method, path) of every request.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

PREFIX = {"model": "", "dataset": "datasets/"}


class _Repo:
    def __init__(self) -> None:
        self.main: str | None = None
        self.commits: dict[str, dict[str, bytes]] = {}


def _blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubStandIn:
    """The stand-in server (module doc); a context manager that stops it on exit."""

    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], _Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def publish(self, repo_type: str, repo_id: str, files: Path | dict[str, bytes]) -> str:
        """A new commit of ``repo_id`` holding ``files`` (a folder, or {path: bytes}) on ``main``."""
        if isinstance(files, Path):
            files = {f.relative_to(files).as_posix(): f.read_bytes()
                     for f in sorted(files.rglob("*")) if f.is_file()}
        repo = self.repos.setdefault((repo_type, repo_id), _Repo())
        digest = hashlib.sha1(f"{repo_type}/{repo_id}/{len(repo.commits)}".encode())
        for name, data in sorted(files.items()):
            digest.update(name.encode() + b"\0" + _blob_sha(data).encode())
        commit = digest.hexdigest()
        repo.commits[commit] = dict(files)
        repo.main = commit
        return commit

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> "HubStandIn":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------- requests

    def _lookup(self, repo_type: str, repo_id: str, revision: str) -> tuple[str, dict[str, bytes]] | str:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None:
            return "RepoNotFound"
        commit = repo.main if revision == "main" else revision
        if commit not in repo.commits:
            return "RevisionNotFound"
        return commit, repo.commits[commit]

    def _route(self, method: str, raw_path: str) -> tuple[int, dict[str, str], bytes]:
        path = unquote(urlparse(raw_path).path).lstrip("/")
        if path.startswith("api/"):
            kind, _, rest = path[4:].partition("/")
            repo_type = {"models": "model", "datasets": "dataset"}.get(kind)
            parts = rest.split("/")
            if repo_type is None or len(parts) < 2:
                return 404, {}, b"{}"
            repo_id, tail = "/".join(parts[:2]), parts[2:]
            if not tail or tail[0] == "revision":
                found = self._lookup(repo_type, repo_id, tail[1] if len(tail) > 1 else "main")
                if isinstance(found, str):
                    return 404, {"X-Error-Code": found}, b"{}"
                commit, files = found
                body = {"id": repo_id, "sha": commit, "private": False,
                        "siblings": [{"rfilename": name} for name in sorted(files)]}
                return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()
            if tail[0] == "tree" and len(tail) >= 2:
                found = self._lookup(repo_type, repo_id, tail[1])
                if isinstance(found, str):
                    return 404, {"X-Error-Code": found}, b"{}"
                under = "/".join(tail[2:])
                entries = [{"type": "file", "path": name, "size": len(data), "oid": _blob_sha(data)}
                           for name, data in sorted(found[1].items())
                           if not under or name.startswith(under + "/")]
                return 200, {"Content-Type": "application/json"}, json.dumps(entries).encode()
            return 404, {}, b"{}"
        repo_type = "dataset" if path.startswith("datasets/") else "model"
        parts = path[len(PREFIX[repo_type]):].split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return 404, {}, b""
        found = self._lookup(repo_type, "/".join(parts[:2]), parts[3])
        if isinstance(found, str):
            return 404, {"X-Error-Code": found}, b""
        commit, files = found
        name = "/".join(parts[4:])
        if name not in files:
            return 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit}, b""
        data = files[name]
        return 200, {"X-Repo-Commit": commit, "ETag": f'"{_blob_sha(data)}"',
                     "Content-Type": "application/octet-stream"}, data

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, with_body: bool) -> None:
                hub.requests.append((self.command, self.path))
                status, headers, body = hub._route(self.command, self.path)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if with_body:
                    self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's names
                self._answer(True)

            def do_HEAD(self) -> None:  # noqa: N802
                self._answer(False)

            def log_message(self, *args: object) -> None:  # quiet
                pass

        return Handler
