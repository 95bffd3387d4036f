"""`bolt-agent bench` parts: voice loop, raw/LLM/speech benches, memory, Jetson prediction."""
