"""Child processes that end with the run that started them, on Ctrl-C and on a crash too.

``die_with_parent`` (a ``preexec_fn``) asks Linux to send the child SIGTERM when its parent
dies (``PR_SET_PDEATHSIG``), so a helper outlives neither a SIGKILLed parent nor one whose
``finally`` never ran. ``stop_group`` ends a child started with ``start_new_session=True``
together with everything it started in its group: SIGINT or SIGTERM first, SIGKILL after
``timeout``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (even of SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux/glibc: the owner's own stop must do
        pass


def stop_group(
    proc: subprocess.Popen, timeout: float = 10.0, first: int = signal.SIGTERM
) -> int | None:
    """Signal ``proc``'s process group with ``first``, wait up to ``timeout``, SIGKILL the group
    if it lingers; then SIGKILL whatever of the group is left. The exit code (None if unknown)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, first)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # grandchildren the leader left behind
    return proc.returncode
