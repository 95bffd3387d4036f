"""The whole bolt_agent stack: `ros2 launch bolt_agent bolt_agent.launch.py profile:=reachy_mini`.

Arguments (see bolt_agent/stack/table.py, or `--show-args`): profile, namespace, sim, use_mic,
use_camera, camera, bag, llm_model, asr_model, tts_model, n_gpu_layers, one on/off switch per
node (llm, asr, tts, animation, perception, game_state), and for every node: params_file,
use_sim_time, log_level, respawn, respawn_delay, exit_on_failure.
"""

from bolt_agent.stack.launch_builder import generate


def generate_launch_description():
    return generate()
