"""A real OpenAI-compatible server for the remote-engine tests: llama-cpp-python's own
(`python -m llama_cpp.server`) with the bundled GGUF on loopback, one thread, killed at the end."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bolt_agent.core.models import resolve_model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    def __init__(self, log_dir: Path, n_ctx: int = 2048, threads: int = 1, api_key: str = ""):
        self.model = str(resolve_model("", kind="llm"))
        self.port = free_port()
        self.api_key = api_key
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log_dir / f"llama_server_{self.port}.log"
        self.args = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_threads",
            str(threads),
            "--n_threads_batch",
            str(threads),
            "--n_ctx",
            str(n_ctx),
            *(["--api_key", api_key] if api_key else []),
        ]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0) -> LlamaServer:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},  # its log is read while it runs
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {self.log.read_text()[-2000:]}")
            try:
                auth = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
                request = urllib.request.Request(self.base_url + "/models", headers=auth)
                with urllib.request.urlopen(request, timeout=2) as resp:
                    if json.load(resp).get("data"):
                        return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer in {timeout}s")

    def kill(self) -> None:
        """SIGKILL, as a crash would: no goodbye on the open streams."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
