"""bolt_agent: a ROS 2 conversational edge agent (perception, ASR, LLM, TTS, animation)."""

__version__ = "0.1.0"

import os as _os

# ggml's OpenMP threads must not spin-wait: three models share two cores here (and four to six
# on a Jetson), and a spinning pool slowed llama.cpp 5-10x under contention. libgomp reads this
# when llama_cpp is first loaded, so it is set before any bolt_agent module can import it.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


from bolt_agent.core.memory import tune_malloc as _tune_malloc  # after the env var above

_tune_malloc()
