"""Calls to the HTTP admin API of a real bookie or autorecovery process, and a ``pybk
autorecovery`` process with its admin port (found in its log), for the admin API tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bkproto import security as wire


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers.get("Content-Type", "").startswith("application/json"), (self.status, self.body)
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


@dataclass(frozen=True)
class AdminApi:
    """One admin port: ``ca`` (HTTPS when given), ``token`` (``Authorization: Bearer``)."""

    port: int
    ca: Path | None = None
    token: str | None = None

    def as_caller(self, token: str | None) -> AdminApi:
        return AdminApi(self.port, self.ca, token)

    def call(self, method: str, path: str, body: object = None, raw: bytes | None = None) -> Reply:
        """``body`` is sent as JSON, ``raw`` as it is."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        scheme = "https" if self.ca is not None else "http"
        request = urllib.request.Request(f"{scheme}://127.0.0.1:{self.port}{path}", data=data, method=method)
        if self.token is not None:
            request.add_header("Authorization", wire.bearer(self.token))
        context = wire.client_ssl_context(self.ca, None, None) if self.ca is not None else None
        try:
            with urllib.request.urlopen(request, timeout=60, context=context) as reply:
                return Reply(reply.status, dict(reply.headers), reply.read())
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, dict(exc.headers), exc.read())

    def get(self, path: str) -> Reply:
        return self.call("GET", path)

    def until(
        self, method: str, path: str, status: int, accept: Callable[[Reply], bool] | None = None,
        timeout_s: float = 120.0,
    ) -> Reply:
        """Call until the answer has ``status`` (and ``accept`` takes it): work done in the
        background, an election."""
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self.call(method, path)
            done = reply.status == status and (accept is None or accept(reply))
            if done or time.monotonic() > deadline:
                assert done, (path, reply.status, reply.body)
                return reply
            time.sleep(0.5)


@contextlib.contextmanager
def autorecovery_process(
    zk_hosts: str, log_path: Path, conf: Mapping[str, str] | None = None
) -> Iterator[int]:
    """``pybk autorecovery`` with its admin port on a free port; yields the port, SIGTERM at the
    end. ``conf`` keys are passed as ``BK_<key>`` variables."""
    env = {**os.environ, **{f"BK_{key}": value for key, value in (conf or {}).items()}}
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "pybk", "autorecovery", "--zk", zk_hosts, "--http-port", "0"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while (found := re.search(r"on http port (\d+)", log_path.read_text(errors="replace"))) is None:
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        yield int(found[1])
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


def status_and_body(port: int, path: str) -> tuple[int, bytes]:
    """GET ``path`` on a local admin port: the status (an error's too) and the body."""
    reply = AdminApi(port).get(path)
    return reply.status, reply.body


def get_ok_text(port: int, path: str) -> str:
    """GET ``path`` on a local admin port, which must answer 200: the body as text."""
    reply = AdminApi(port).get(path)
    assert reply.status == 200, (path, reply.status, reply.body)
    return reply.text


def get_ok_json(port: int, path: str) -> Any:
    """GET ``path`` on a local admin port, which must answer 200 with JSON."""
    reply = AdminApi(port).get(path)
    assert reply.status == 200, (path, reply.status, reply.body)
    return reply.json()
