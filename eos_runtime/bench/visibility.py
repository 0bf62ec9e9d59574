"""When output became readable: a topic's last stable offsets, sampled in a process of
its own.

    python -m eos_runtime.bench.visibility --bootstrap-servers B --topic T --partitions N FILE

The process samples every partition's last stable offset (what a read_committed reader
may read) every ``--every`` seconds, prints ``ready`` after its first sample and, when its
stdin closes, writes the samples to FILE (msgpack: a list of [ms, [LSO per partition]],
the ms taken after each answer on this host's clock) and exits.

Not a thread of the bench: the bench's process reads output record by record and
collects its garbage, and a sampler thread there stalls while either holds the GIL. A
stall is added to the latency of every probe committed during it: a thread's gaps
reached 0.55 s at 3 600 lines/s, the probes' p99 1.5 s where it was 1.1 s.
"""

from __future__ import annotations

import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack
from confluent_kafka import KafkaException

from ..errors import EosError
from .kafka import _consumer, partition_ends, readable_at, topic_process_arguments

__all__ = ["VisibilityClock", "main"]

Sample = tuple[int, list[int]]


def main(argv: list[str] | None = None) -> int:
    ap = topic_process_arguments(__doc__)
    ap.add_argument("--every", type=float, default=0.02)
    args = ap.parse_args(argv)
    samples: list[Sample] = []
    with _consumer(args.bootstrap_servers, read_committed=True) as c:
        while True:
            try:
                ends = partition_ends(c, args.topic, args.partitions, 5)
            except KafkaException:
                ends = []
            if ends:
                # the time after the answer: an offset seen then was readable by then
                samples.append((int(time.time() * 1000), ends))
                if len(samples) == 1:
                    print("ready", flush=True)
            if select.select([sys.stdin], [], [], args.every)[0] and not sys.stdin.readline():
                break   # stdin closed: the run is over
    Path(args.file).write_bytes(msgpack.packb(samples))
    return 0


class VisibilityClock:
    """The sampler process, started and sampling when the constructor returns;
    ``close`` stops it and loads ``samples``; ``visible_at`` answers when given offsets
    were first readable."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, every: float = 0.02,
                 start_timeout: float = 30.0) -> None:
        self.samples: list[Sample] = []
        self._dir = tempfile.TemporaryDirectory(prefix="eos-bench-clock-")
        self._file = Path(self._dir.name) / "samples.msgpack"
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "eos_runtime.bench.visibility", str(self._file),
             "--bootstrap-servers", bootstrap, "--topic", topic,
             "--partitions", str(partitions), "--every", str(every)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        if not select.select([self._proc.stdout], [], [], start_timeout)[0] or \
                self._proc.stdout.readline().strip() != "ready":
            self._stop()
            raise EosError(f"the visibility clock did not sample {topic!r} within "
                           f"{start_timeout:g} s")

    def _stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        self._dir.cleanup()

    def close(self) -> None:
        if self._proc.poll() is None and self._proc.stdin is not None:
            self._proc.stdin.close()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        if self._file.exists():
            self.samples = [(t, list(ends)) for t, ends in msgpack.unpackb(
                self._file.read_bytes())]
        self._stop()

    def visible_at(self, needed: dict[int, int]) -> int | None:
        """When every partition's offset in ``needed`` had become readable (None: not seen)."""
        return readable_at(self.samples, needed)


if __name__ == "__main__":
    sys.exit(main())
