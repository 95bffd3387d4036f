"""rosbag2 files without rosbag2: a typestore with our interfaces, writer and reader helpers.

Built on ``rosbags``. Bags are rosbag2 version 9 (mcap by default, sqlite3 optional) and carry each
topic's message definition and RIHS01 type hash, so ``ros2 bag info/play`` reads them. Message
types come from rosbags' Kilted store; others (ours first, from the source tree) are registered
from their ``.msg`` files, found in ``share/<package>/msg`` of the ament prefixes.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rosbags.interfaces import Connection, Qos
from rosbags.rosbag2 import Reader, ReaderError, StoragePlugin, Writer, WriterError
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
DEFAULT_STORAGE = "mcap"
_SOURCE_INTERFACES = Path(__file__).resolve().parents[3] / "bolt_agent_interfaces" / "msg"
_PRIMITIVES = {
    "bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
    "uint32", "int64", "uint64", "string", "wstring", "time", "duration",
}  # fmt: skip


class BagError(Exception):
    """A bag that cannot be written or read (missing, corrupt, truncated, unknown type)."""


def share_dirs() -> list[Path]:
    """``share/`` folders of the ament prefixes (AMENT_PREFIX_PATH, then this interpreter's)."""
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    prefixes.append(sys.prefix)
    dirs: list[Path] = []
    for prefix in prefixes:
        share = Path(prefix) / "share"
        if share.is_dir() and share not in dirs:
            dirs.append(share)
    return dirs


def _dependencies(text: str, package: str) -> set[str]:
    """Message types a ``.msg`` text refers to, as ``pkg/msg/Name``."""
    deps = set()
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) < 2 or "=" in words[1]:  # blank, comment or constant
            continue
        base = re.sub(r"\[.*\]$", "", words[0]).split("<=")[0]
        if base in _PRIMITIVES:
            continue
        if base == "Header":
            deps.add("std_msgs/msg/Header")
        elif "/" in base:
            pkg, name = base.split("/")[0], base.split("/")[-1]
            deps.add(f"{pkg}/msg/{name}")
        else:
            deps.add(f"{package}/msg/{base}")
    return deps


class TypeCatalog:
    """A rosbags typestore (Kilted) that learns further message types from ``.msg`` files."""

    def __init__(self, search_dirs: Sequence[Path] | None = None) -> None:
        self.store = get_typestore(Stores.ROS2_KILTED)
        self._dirs = list(share_dirs() if search_dirs is None else search_dirs)
        self._lock = threading.Lock()
        if _SOURCE_INTERFACES.is_dir():  # our own interfaces: the source tree wins
            self._register_dir(_SOURCE_INTERFACES, "bolt_agent_interfaces")

    def _register_dir(self, folder: Path, package: str) -> None:
        types = {}
        for path in sorted(folder.glob("*.msg")):
            types.update(get_types_from_msg(path.read_text(), f"{package}/msg/{path.stem}"))
        self.store.register(types)

    def known(self, msgtype: str) -> bool:
        return msgtype in self.store.fielddefs

    def ensure(self, msgtype: str) -> None:
        """Make ``msgtype`` (``pkg/msg/Name``) known; BagError when no definition is found."""
        with self._lock:
            self._ensure(msgtype, ())

    def _ensure(self, msgtype: str, chain: tuple[str, ...]) -> None:
        if self.known(msgtype) or msgtype in chain:
            return
        parts = msgtype.split("/")
        if len(parts) != 3 or parts[1] != "msg":
            raise BagError(f"cannot record {msgtype!r}: only message types (pkg/msg/Name) are")
        pkg, _, name = parts
        path = next((d / pkg / "msg" / f"{name}.msg" for d in self._dirs
                     if (d / pkg / "msg" / f"{name}.msg").is_file()), None)  # fmt: skip
        if path is None:
            where = ", ".join(str(d) for d in self._dirs) or "(no ament prefix)"
            raise BagError(f"no definition of {msgtype}: {pkg}/msg/{name}.msg not under {where}")
        text = path.read_text()
        for dep in _dependencies(text, pkg):
            self._ensure(dep, (*chain, msgtype))
        self.store.register(get_types_from_msg(text, msgtype))

    def msgdef(self, msgtype: str) -> str:
        """The rosbag2 ``ros2msg`` definition (the type plus its dependencies)."""
        self.ensure(msgtype)
        return self.store.generate_msgdef(msgtype, ros_version=2)[0]

    def rihs01(self, msgtype: str) -> str:
        self.ensure(msgtype)
        return self.store.hash_rihs01(msgtype)


#: packages whose recorded definition is checked against the installed one before playback
CHECKED_PACKAGES = ("bolt_agent_interfaces",)


def outdated_topics(topics: Sequence[TopicSummary], catalog: TypeCatalog) -> dict[str, str]:
    """Topics recorded with another definition of their type than the one installed (the bag's
    RIHS01 hash differs): topic → why. Their bytes would not decode as today's type, so they
    must not be played as it. Checked for this project's own interfaces, which change with it
    (a header added to TurnMetrics, say); a bag without hashes is taken as it is."""
    why = {}
    for t in topics:
        if not t.digest or t.msgtype.split("/")[0] not in CHECKED_PACKAGES:
            continue
        try:
            installed = catalog.rihs01(t.msgtype)
        except BagError:
            continue  # unknown here: message_class() reports that
        if installed != t.digest:
            why[t.name] = (
                f"{t.name} was recorded as an older {t.msgtype} ({t.digest[:15]}…, installed "
                f"{installed[:15]}…): not played"
            )
    return why


@dataclass(frozen=True)
class BagMessage:
    topic: str
    msgtype: str
    timestamp: int  # ns since the epoch (receive time)
    data: bytes  # CDR, as published


class BagWriter:
    """Thread-safe rosbag2 writer; topics are added as they are discovered."""

    def __init__(
        self, path: Path | str, storage: str = DEFAULT_STORAGE, catalog: TypeCatalog | None = None
    ) -> None:
        if storage not in STORAGES:
            raise BagError(f"unknown storage {storage!r}: use one of {', '.join(STORAGES)}")
        self.path = Path(path)
        self.storage = storage
        self.catalog = catalog or TypeCatalog()
        self._writer = Writer(self.path, version=Writer.VERSION_LATEST,
                              storage_plugin=STORAGES[storage])  # fmt: skip
        self._connections: dict[str, Connection] = {}
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.closed = False
        try:
            self._writer.open()
        except WriterError as exc:
            raise BagError(str(exc)) from None

    def add_topic(self, topic: str, msgtype: str, qos: Sequence[Qos] = ()) -> None:
        """Declare a topic (idempotent); BagError when the type's definition is unknown."""
        msgdef, digest = self.catalog.msgdef(msgtype), self.catalog.rihs01(msgtype)
        with self._lock:
            if topic in self._connections or self.closed:
                return
            self._connections[topic] = self._writer.add_connection(
                topic, msgtype, msgdef=msgdef, rihs01=digest, offered_qos_profiles=list(qos)
            )
            self.counts[topic] = 0

    def has_topic(self, topic: str) -> bool:
        return topic in self._connections

    def write(self, topic: str, timestamp: int, data: bytes) -> None:
        with self._lock:
            if self.closed:
                return
            self._writer.write(self._connections[topic], timestamp, data)
            self.counts[topic] += 1

    @property
    def message_count(self) -> int:
        return sum(self.counts.values())

    def close(self) -> None:
        """Write the metadata (needed by every reader); idempotent."""
        with self._lock:
            if not self.closed:
                self.closed = True
                self._writer.close()


@dataclass
class TopicSummary:
    name: str
    msgtype: str
    count: int
    digest: str
    msgdef: str
    qos: list[Qos] = field(default_factory=list)


@dataclass
class BagSummary:
    path: Path
    storage: str
    start_ns: int
    end_ns: int
    message_count: int
    ros_distro: str | None
    topics: list[TopicSummary]

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


class BagReader:
    """Opens a bag for reading; every failure becomes a one-line ``BagError``."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise BagError(f"no bag at {self.path}")
        if self.path.is_file():  # a storage file was given: use its folder
            self.path = self.path.parent
        try:
            self._reader = Reader(self.path)
            self._reader.open()
        except (ReaderError, FileNotFoundError, OSError, ValueError, KeyError) as exc:
            raise BagError(f"cannot open bag {self.path}: {_reason(exc)}") from None
        except Exception as exc:  # storage plugins raise assorted errors on damaged files
            raise BagError(f"cannot open bag {self.path}: corrupt or truncated ({exc})") from None

    def __enter__(self) -> BagReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._reader.close()

    def summary(self) -> BagSummary:
        r = self._reader
        topics = [
            TopicSummary(c.topic, c.msgtype, c.msgcount, c.digest, c.msgdef.data,
                         list(getattr(c.ext, "offered_qos_profiles", [])))
            for c in r.connections
        ]  # fmt: skip
        storage = next((s for s in STORAGES if any(self.path.glob(f"*.{_ext(s)}"))), "unknown")
        return BagSummary(self.path, storage, r.start_time, r.end_time, r.message_count,
                          r.ros_distro, topics)  # fmt: skip

    @property
    def topics(self) -> dict[str, TopicSummary]:
        return {t.name: t for t in self.summary().topics}

    def messages(self, topics: Iterable[str] | None = None) -> Iterator[BagMessage]:
        """Messages in time order (optionally only ``topics``); BagError on damaged data."""
        wanted = set(topics) if topics is not None else None
        conns = [c for c in self._reader.connections if wanted is None or c.topic in wanted]
        if not conns:
            return
        try:
            for conn, timestamp, data in self._reader.messages(connections=conns):
                yield BagMessage(conn.topic, conn.msgtype, timestamp, bytes(data))
        except BagError:
            raise
        except Exception as exc:  # truncated/corrupt chunk: rosbags/mcap/sqlite errors vary
            raise BagError(f"bag {self.path} is corrupt or truncated: {_reason(exc)}") from None


def _ext(storage: str) -> str:
    return "db3" if storage == "sqlite3" else storage


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def parse_remaps(rules: Sequence[str]) -> dict[str, str]:
    """``OLD:=NEW`` rules → mapping; BagError on a malformed rule."""
    remaps = {}
    for rule in rules:
        old, sep, new = rule.partition(":=")
        if not sep or not old or not new:
            raise BagError(f"bad remap {rule!r}: expected OLD:=NEW")
        remaps[old] = new
    return remaps


def playback_offsets(timestamps: Sequence[int], rate: float = 1.0) -> list[float]:
    """Seconds after the start at which each message is due (original spacing / rate)."""
    if rate <= 0:
        raise BagError(f"rate must be positive, got {rate}")
    if not timestamps:
        return []
    first = timestamps[0]
    return [(t - first) / 1e9 / rate for t in timestamps]


def _when(ns: int) -> str:
    stamp = datetime.fromtimestamp(ns / 1e9).isoformat(sep=" ", timespec="milliseconds")
    return f"{stamp} ({ns / 1e9:.3f})"


def format_summary(s: BagSummary) -> str:
    """``ros2 bag info``-like text."""
    lines = [
        f"Files:             {s.path}",
        f"Storage id:        {s.storage}",
        f"ROS distribution:  {s.ros_distro or '-'}",
        f"Duration:          {s.duration_s:.3f}s",
        f"Start:             {_when(s.start_ns)}" if s.message_count else "Start:             -",
        f"End:               {_when(s.end_ns)}" if s.message_count else "End:               -",
        f"Messages:          {s.message_count}",
        "Topic information:",
    ]
    for t in s.topics:
        lines.append(f"  {t.name} | {t.msgtype} | {t.count} msgs | {t.digest or 'no type hash'}")
    return "\n".join(lines)
