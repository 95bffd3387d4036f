"""bolt_agent: a ROS 2 conversational edge agent (perception, ASR, LLM, TTS, animation)."""

__version__ = "0.1.0"

import os as _os

# ggml's OpenMP threads must not spin-wait: three models share two cores here (and four to six
# on a Jetson), and a spinning pool slowed llama.cpp 5-10x under contention. libgomp reads this
# when llama_cpp is first loaded, so it is set before any bolt_agent module can import it.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# numpy's OpenBLAS: one thread. With one per core, its workers spin for a while after each
# matrix product (whisper's log-mel features are one) and took a core from CTranslate2's
# encoder running next: 0.14 -> 0.09 s per utterance alone here. Nothing here needs parallel
# BLAS (the models bring their own thread pools). OpenBLAS reads it when numpy is first loaded.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


from bolt_agent.core.memory import tune_malloc as _tune_malloc  # after the env var above

_tune_malloc()
