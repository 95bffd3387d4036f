"""bolt_agent: a ROS 2 conversational edge agent (perception, ASR, LLM, TTS, animation)."""

__version__ = "0.1.0"
