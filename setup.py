"""ament_python package bolt_agent (pip-installable too: `pip install -e .`)."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "bolt_agent"
NODES = ["llm_node", "asr_node", "tts_node", "perception_node", "animation_node", "game_state_node"]

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    package_data={PACKAGE: ["core/llm/templates/*.jinja"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
        (f"share/{PACKAGE}/config/profiles", glob("config/profiles/*.yaml")),
        (f"share/{PACKAGE}/config/params", glob("config/params/*.yaml")),
        (f"share/{PACKAGE}/config/dds", glob("config/dds/*.xml")),
    ],
    install_requires=["setuptools"],
    # `colcon test` runs pytest only when the package declares it as a test dependency
    extras_require={
        "test": ["pytest", "pytest-timeout"],
        # the GPU desktop that serves the LLM to robots (docs/remote.md); the robot needs nothing
        "server": ["llama-cpp-python[server]"],
    },
    zip_safe=False,
    maintainer="bolt_agent maintainers",
    maintainer_email="maintainers@bolt-agent.dev",
    description="Conversational edge agent for ROS 2 (Jetson Orin Nano).",
    license="Apache-2.0",
    python_requires=">=3.10",
    entry_points={
        "console_scripts": [f"bolt-agent = {PACKAGE}.cli.main:main"]
        + [f"{n} = {PACKAGE}.nodes.{n}:main" for n in NODES],
    },
)
