"""Only game_state_node, parameters from config/params/ (same arguments as the stack)."""

from bolt_agent.stack.launch_builder import generate


def generate_launch_description():
    return generate(only=["game_state_node"])
