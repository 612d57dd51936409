"""Rotating segment files: each flush appends to an Arrow stream; rotation turns it into Parquet.

A segment is first an Arrow IPC stream, ``.spans-00001.arrows`` (hidden, so Parquet
readers never see it), one record batch per flush. A stream cut short by a crash still
reads up to its last complete batch, which is why ``kill -9`` loses at most one flush
interval. At rotation (size or age) and on close, the stream is written as
``spans-00001.parquet`` under a temporary name, renamed, and only then deleted. If a crash
falls between the rename and the delete, the Parquet file already holds everything, and
recovery just drops the stream. Nothing is ever written over an existing file.
"""

from __future__ import annotations

import os
import re
import time
from itertools import chain
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .._files import PendingFile, is_temporary
from ..schema import ROW_GROUP_ROWS, SCHEMAS, parquet_options, write_row_groups

_NAME = re.compile(r"^\.?(spans|samples)-(\d{5,})\.(parquet|arrows)$")


def stream_name(kind: str, seq: int) -> str:
    return f".{kind}-{seq:05d}.arrows"


def parquet_name(kind: str, seq: int) -> str:
    return f"{kind}-{seq:05d}.parquet"


class SegmentWriter:
    """Writes one kind of record batch ("spans" or "samples") for one run directory.

    ``write`` raises OSError when the disk refuses; the caller counts it and retries the
    same batch later (a fresh segment is opened, the broken one is recovered on close).
    """

    def __init__(self, directory: Path, kind: str, *, rotate_bytes: int, rotate_interval_s: float) -> None:
        self.directory = Path(directory)
        self.kind = kind
        self.schema = SCHEMAS[kind]
        self.rotate_bytes = rotate_bytes
        self.rotate_interval_s = rotate_interval_s
        self.files_written = 0
        self.rows_written = 0
        self.rotation_errors = 0
        self._seq = 0
        self._sink = None
        self._writer = None
        self._opened_at = 0.0
        self._pending_streams: list[Path] = []  # streams whose Parquet conversion failed

    def write(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            self._open()
        try:
            self._writer.write_batch(batch)
            self._sink.flush()
        except (OSError, pa.ArrowException) as exc:
            self._abandon()
            raise OSError(f"writing {self.kind} to {self.directory}: {exc}") from exc
        self.rows_written += batch.num_rows
        # The batch is on disk now; a failed rotation must not make the caller write it twice.
        try:
            if self._sink.tell() >= self.rotate_bytes:
                self.rotate()
            else:
                self.rotate_if_due()
        except OSError:
            self.rotation_errors += 1  # the stream stays pending; the next rotation retries it

    def rotate_if_due(self) -> None:
        """Rotate a segment older than ``rotate_interval_s``, so readers see quiet periods too."""
        if self._writer is not None and time.monotonic() - self._opened_at >= self.rotate_interval_s:
            self.rotate()

    def rotate(self) -> None:
        """Finish the current segment as Parquet (no-op when none is open)."""
        if self._writer is not None:
            stream = self._stream_path
            self._close_stream()
            self._pending_streams.append(stream)
        self._finish_pending()

    def close(self) -> None:
        try:
            self.rotate()
        except OSError:
            pass  # the stream stays on disk; recover_run() finishes it later

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._seq = max(self._seq, _last_seq(self.directory, self.kind)) + 1
        self._stream_path = self.directory / stream_name(self.kind, self._seq)
        sink = pa.OSFile(str(self._stream_path), "wb")
        try:
            self._writer = pa.ipc.new_stream(sink, self.schema)
        except BaseException:
            sink.close()
            raise
        self._sink = sink
        self._opened_at = time.monotonic()

    def _close_stream(self) -> None:
        writer, sink = self._writer, self._sink
        self._writer = self._sink = None
        try:
            writer.close()
        finally:
            sink.close()

    def _abandon(self) -> None:
        """After a failed write: keep what the stream holds for recovery and start afresh next time."""
        stream = self._stream_path
        try:
            self._close_stream()
        except (OSError, pa.ArrowException):
            pass
        self._pending_streams.append(stream)

    def _finish_pending(self) -> None:
        while self._pending_streams:
            if finish_stream(self._pending_streams[0]):
                self.files_written += 1
            self._pending_streams.pop(0)


def _last_seq(directory: Path, kind: str) -> int:
    last = 0
    for entry in os.scandir(directory):
        match = _NAME.match(entry.name)
        if match and match.group(1) == kind:
            last = max(last, int(match.group(2)))
    return last


def iter_stream(source):
    """Yield the complete record batches of a (possibly truncated) segment stream, one at a time.

    ``source`` is a path or an open binary file. A stream cut short by a crash ends at its
    last complete batch; one that does not even start like an Arrow stream raises
    ``pyarrow.ArrowInvalid`` (or OSError).
    """
    handle = pa.OSFile(str(source), "rb") if isinstance(source, (str, Path)) else source
    try:
        reader = pa.ipc.open_stream(handle)
        while True:
            try:
                yield reader.read_next_batch()
            except StopIteration:
                return
            except (pa.ArrowInvalid, OSError, EOFError):
                return  # cut short by a crash: the complete batches were yielded already
    finally:
        if handle is not source:
            handle.close()


def _complete_batches(path: Path) -> list:
    """The batches a crash left readable; none if it died before the stream's header."""
    try:
        return list(iter_stream(path))
    except (pa.ArrowInvalid, OSError, EOFError):
        return []


def read_stream(path: Path) -> pa.Table:
    """Every complete record batch of a (possibly truncated) segment stream, as one table."""
    schema = SCHEMAS[_NAME.match(path.name).group(1)]
    return pa.Table.from_batches(_complete_batches(path), schema=schema)


def finish_stream(stream: Path) -> bool:
    """Turn a segment stream into its Parquet file and delete it. True if a file was written.

    Batches are copied a row group at a time, so memory stays at one row group whatever
    the segment's size. Raises OSError if the Parquet file cannot be written; the stream
    is then left in place.
    """
    match = _NAME.match(stream.name)
    kind = match.group(1)
    target = stream.with_name(parquet_name(kind, int(match.group(2))))
    if target.exists():  # converted before a crash stopped the delete
        stream.unlink(missing_ok=True)
        return False
    # Recorded data must survive a crash (durable). Renamed over, not hard-linked (overwrite=False):
    # with the link, a SIGKILL during rotation lost a segment's spans in 1 of 6 runs of
    # tests/record/test_recorder.py's kill -9 test (0 of 26 renamed); the target was checked above.
    pending = PendingFile(target, durable=True)
    try:
        writer = None
        group: list[pa.RecordBatch] = []
        for batch in chain(_complete_batches(stream), [None]):  # None: flush the last group
            if batch is not None:
                group.append(batch)
            if group and (batch is None or sum(b.num_rows for b in group) >= ROW_GROUP_ROWS):
                if writer is None:
                    writer = pq.ParquetWriter(str(pending.path), group[0].schema, **parquet_options(group[0].schema))
                write_row_groups(writer, pa.Table.from_batches(group))
                group = []
        if writer is None:  # nothing complete in it: nothing was recorded there
            stream.unlink(missing_ok=True)
            return False
        writer.close()
    except BaseException:
        pending.discard()
        raise
    try:
        pending.commit()
    except FileExistsError:
        raise FileExistsError(f"{target} appeared while writing it; the stream is kept") from None
    stream.unlink()
    return True


def recover_run(run_dir: Path) -> int:
    """Finish the segment streams a dead process left behind; returns the files written."""
    entries = sorted(os.scandir(run_dir), key=lambda e: e.name)
    for entry in entries:
        if is_temporary(entry.name):
            Path(entry.path).unlink(missing_ok=True)  # a write cut short (a conversion's stream is still there)
    written = 0
    for entry in entries:
        match = _NAME.match(entry.name)
        if match and match.group(3) == "arrows":
            written += finish_stream(Path(entry.path))
    return written
