"""The whole bolt_agent stack: `ros2 launch bolt_agent bolt_agent.launch.py profile:=reachy_mini`.

Arguments (see bolt_agent/stack/table.py): profile, namespace, sim, use_mic, use_camera,
camera, bag, llm_model, asr_model, tts_model, n_gpu_layers, and one on/off switch per node
(llm, asr, tts, animation, perception, game_state).
"""

from bolt_agent.stack.launch_builder import generate


def generate_launch_description():
    return generate()
