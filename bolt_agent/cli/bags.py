"""`bolt-agent bag record|play|info`: rosbag2 files without rosbag2 (rosbags + raw rclpy I/O).

Bags are readable by ``ros2 bag`` (version 9 metadata, message definitions, type hashes). The
recording and playback classes live in ``bolt_agent.nodes.bag_transport`` for in-process use.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path

from bolt_agent.core.sim.bag_io import (
    DEFAULT_STORAGE,
    STORAGES,
    BagError,
    BagReader,
    format_summary,
)


def _default_output() -> Path:
    return Path(datetime.now().strftime("rosbag2_%Y_%m_%d-%H_%M_%S"))


def cmd_info(args: argparse.Namespace) -> int:
    with BagReader(args.bag) as reader:
        print(format_summary(reader.summary()))
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    if not args.all and not args.topics:
        raise BagError("name topics to record, or pass --all")
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    from bolt_agent.nodes.bag_transport import BagRecorder

    output = Path(args.output) if args.output else _default_output()
    rclpy.init()
    node = rclpy.create_node("bolt_bag_recorder")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    recorder = None
    try:
        recorder = BagRecorder(node, output, None if args.all else args.topics, args.storage)
        deadline = time.monotonic() + args.duration if args.duration else float("inf")
        while time.monotonic() < deadline and (
            not args.max_messages or recorder.message_count < args.max_messages
        ):
            executor.spin_once(timeout_sec=0.05)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if recorder is not None:
            recorder.stop()
            counts = ", ".join(f"{t}: {n}" for t, n in recorder.writer.counts.items())
            print(f"wrote {recorder.message_count} messages to {recorder.path} ({counts or '-'})")
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    from bolt_agent.core.sim.bag_io import parse_remaps
    from bolt_agent.nodes.bag_transport import BagPlayer

    remap = parse_remaps(args.remap)
    rclpy.init()
    node = rclpy.create_node("bolt_bag_player")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    player = None
    try:
        player = BagPlayer(node, args.bag, args.rate, args.loop, remap, args.topics,
                           args.wait_subscribers, args.clock)  # fmt: skip
        player.start()
        while not player.done.is_set():
            executor.spin_once(timeout_sec=0.05)
        print(f"played {player.published} messages from {args.bag}")
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if player is not None:
            player.destroy()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def run(args: argparse.Namespace) -> int:
    """Dispatch with one-line errors (no traceback) for bag problems."""
    try:
        return args.bag_func(args)
    except BagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def add_parser(sub) -> None:
    p = sub.add_parser("bag", help="record, play and inspect rosbag2 files")
    verbs = p.add_subparsers(dest="bag_verb", required=True)

    rec = verbs.add_parser("record", help="record topics to a bag (Ctrl-C stops)")
    rec.add_argument("topics", nargs="*", help="topics to record")
    rec.add_argument("-a", "--all", action="store_true", help="every topic, also later ones")
    rec.add_argument("-o", "--output", help="bag folder (default rosbag2_<date>)")
    rec.add_argument("-s", "--storage", choices=sorted(STORAGES), default=DEFAULT_STORAGE)
    rec.add_argument("-d", "--duration", type=float, default=0.0, help="stop after S seconds")
    rec.add_argument("--max-messages", type=int, default=0, help="stop after N messages")
    rec.set_defaults(func=run, bag_func=cmd_record)

    play = verbs.add_parser("play", help="publish a bag with its original timing")
    play.add_argument("bag", help="bag folder")
    play.add_argument("-r", "--rate", type=float, default=1.0, help="speed factor")
    play.add_argument("-l", "--loop", action="store_true", help="replay until Ctrl-C")
    play.add_argument("--remap", nargs="+", default=[], metavar="OLD:=NEW", help="rename topics")
    play.add_argument("--topics", nargs="+", help="only these topics")
    play.add_argument("--wait-subscribers", type=float, default=5.0, metavar="S",
                      help="wait up to S seconds for a subscriber on every topic")  # fmt: skip
    play.add_argument("--clock", type=float, nargs="?", const=40.0, default=0.0, metavar="HZ",
                      help="publish /clock from the bag's time (HZ a second, default 40), for "
                      "nodes with use_sim_time")  # fmt: skip
    play.set_defaults(func=run, bag_func=cmd_play)

    info = verbs.add_parser("info", help="topics, types, counts and duration of a bag")
    info.add_argument("bag", help="bag folder")
    info.set_defaults(func=run, bag_func=cmd_info)
