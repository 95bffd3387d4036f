"""Which PulseAudio sink this process's playback is on, through ``pactl`` (pulseaudio-utils).

PortAudio reaches PulseAudio through ALSA's pulse plugin and cannot name a sink, so the sink is
chosen by ``PULSE_SINK`` while the stream is opened (``audio_io.open_stream``'s ``env``: libpulse
reads it when the plugin makes its context, and every stream the plugin makes later for that
PCM, after a stop or an underrun, goes to the same sink). When that sink disappears PulseAudio
moves the stream to another sink and keeps it there after the sink is back, and PortAudio sees no
error (measured: the stream keeps consuming at full rate), so only PulseAudio itself can say the
robot lost its speaker.

Asking costs two ``pactl`` runs (~30 ms of CPU), too much to repeat twice a second on a robot
whose cores run three models: a ``pactl subscribe`` process reports sink and stream events, and a
watch check asks again only after such an event (or every ``full_check_s`` as a safety net).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

from bolt_agent.core.processes import die_with_parent


class PulseRouteError(RuntimeError):
    """``pactl`` is missing or PulseAudio did not answer."""


class PulseRoute:
    """The sink ``sink`` this process (``pid``) must play on, and where it really plays."""

    def __init__(
        self, sink: str, pid: int | None = None, timeout_s: float = 2.0, full_check_s: float = 30.0
    ) -> None:
        self.sink, self.pid, self.timeout_s = sink, pid or os.getpid(), timeout_s
        self.full_check_s = full_check_s
        self._changed = threading.Event()  # a sink or stream event since the last check
        self._changed.set()
        self._last_full = 0.0
        self._events: subprocess.Popen | None = None
        self.full_checks = 0  # pactl queries made by check() (the cost the events save)

    def watch_events(self) -> bool:
        """Start ``pactl subscribe`` (once); False when it cannot run (every check then asks)."""
        if self._events is not None and self._events.poll() is None:
            return True
        if shutil.which("pactl") is None:
            return False
        try:
            self._events = subprocess.Popen(
                ["pactl", "subscribe"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                preexec_fn=die_with_parent,
            )
        except OSError:
            return False
        threading.Thread(target=self._read_events, args=(self._events,), daemon=True).start()
        return True

    def _read_events(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:  # "Event 'remove' on sink #3", "... on sink-input #7"
            if " sink" in line or "server" in line:
                self._changed.set()
        self._changed.set()  # the event stream ended: ask at the next check

    def close(self) -> None:
        """Stop the event process."""
        proc, self._events = self._events, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                proc.kill()

    def _pactl(self, *args: str) -> list[dict]:
        if shutil.which("pactl") is None:
            raise PulseRouteError("pactl not found (Debian package pulseaudio-utils)")
        try:
            out = subprocess.run(
                ["pactl", "-f", "json", *args],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=True,
            ).stdout
            return json.loads(out or "[]")
        except (subprocess.SubprocessError, OSError, ValueError) as exc:
            raise PulseRouteError(f"pactl {' '.join(args)} failed: {exc}") from exc

    def sinks(self) -> dict[int, str]:
        """Sink index → name."""
        return {int(s["index"]): str(s["name"]) for s in self._pactl("list", "short", "sinks")}

    def sink_exists(self) -> bool:
        return self.sink in self.sinks().values()

    def stream_sinks(self, names: dict[int, str] | None = None) -> list[str]:
        """Names of the sinks this process's playback streams are on (one per stream)."""
        names = self.sinks() if names is None else names
        return [
            names.get(int(s["sink"]), f"#{s['sink']}")
            for s in self._pactl("list", "sink-inputs")
            if str(s.get("properties", {}).get("application.process.id")) == str(self.pid)
        ]

    def check(self, force: bool = True) -> str | None:
        """Why the playback is not (only) on ``sink``, or None when it is. ``force=False`` (the
        periodic watch) asks PulseAudio only after a sink/stream event, or every
        ``full_check_s``, or always when the event process cannot run."""
        now = time.monotonic()
        watching = self.watch_events()  # started before the first query: no event is missed
        quiet = not self._changed.is_set() and now - self._last_full < self.full_check_s
        if not force and quiet and watching:
            return None
        self._changed.clear()
        self._last_full = now
        self.full_checks += 1
        why = self._check_now()
        if why is not None:
            self._changed.set()  # still wrong: ask again next time
        return why

    def _check_now(self) -> str | None:
        names = self.sinks()
        if self.sink not in names.values():
            return f"PulseAudio sink {self.sink!r} is gone"
        elsewhere = [name for name in self.stream_sinks(names) if name != self.sink]
        if elsewhere:
            return f"stream moved from PulseAudio sink {self.sink!r} to {elsewhere[0]!r}"
        return None
