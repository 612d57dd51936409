"""Write a file so that readers find the old content or the new, never half of it.

Every file loadprobe writes goes through here: recorded data and run.json, portrait.json,
plans.json, pipeline.yaml, align.json, capture files, HTML reports. The bytes go to a hidden
temporary file beside the target, ``.<name>.<random>.tmp`` (readers skip names with a leading
dot; a dead run's recovery removes them), which is then renamed over the target: a rename
within one folder is atomic. Standard library only: the recorder uses it in the service.

Usage::

    from loadprobe._files import pending_file, write_file

    write_file("report/portrait.json", text)                    # replaced whole
    write_file(run_dir / "run.json", data, durable=True)        # ... and kept through a power cut
    write_file("plan/pipeline.yaml", text, overwrite=False)     # FileExistsError if it exists
    write_file("vllm/serve-engine.sh", text, mode=0o755)        # executable from the moment it has its name

    with pending_file(run_dir / "spans-00001.parquet", durable=True, overwrite=False) as tmp:
        writer = pq.ParquetWriter(tmp, schema); ...; writer.close()
    # renamed into place here; removed instead if the block raised

    target = inside("triton-repo/", f"{stage}/config.pbtxt")   # LoadprobeError if it would leave the folder

``durable`` fsyncs the file before the rename and its folder after it, so the new name and its
bytes are on disk once the call returns: used where data must survive a crash of the machine
(recorded spans, run.json, pipeline.yaml). Elsewhere a crash may leave the old file, never a
torn one. ``overwrite=False`` refuses an existing target atomically, even against a writer that
creates it meanwhile.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["PendingFile", "inside", "is_temporary", "pending_file", "write_file"]


def is_temporary(name: str) -> bool:
    """Whether a file name is one of our temporaries (or an older loadprobe's ``.<name>.tmp``)."""
    return name.startswith(".") and name.endswith(".tmp")


class PendingFile:
    """A file being written under a temporary name: ``commit()`` puts it in place, ``discard()`` drops it.

    For writers that keep a file open across calls (the importer's Parquet files); elsewhere
    :func:`pending_file` and :func:`write_file` do both ends.
    """

    def __init__(self, target: str | os.PathLike, *, durable: bool = False, overwrite: bool = True) -> None:
        self.target = Path(target)
        self.path = self.target.with_name(f".{self.target.name}.{os.urandom(4).hex()}.tmp")
        self.durable = durable
        self.overwrite = overwrite

    def commit(self) -> Path:
        """Rename the finished temporary file to the target; the temporary is gone either way.

        Raises FileExistsError (``overwrite=False``) or the OSError that stopped it.
        """
        try:
            if self.durable:
                _fsync(self.path)
            if self.overwrite:
                os.replace(self.path, self.target)
            else:
                _rename_new(self.path, self.target)
        except BaseException:
            self.discard()
            raise
        if self.durable:
            _fsync_folder(self.target.parent)
        return self.target

    def discard(self) -> None:
        """Remove the temporary file, if it is there (never raises: the caller is handling a failure)."""
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)


@contextlib.contextmanager
def pending_file(target: str | os.PathLike, *, durable: bool = False, overwrite: bool = True):
    """Yield the temporary path to write ``target`` through; committed when the block ends, discarded if it raised."""
    pending = PendingFile(target, durable=durable, overwrite=overwrite)
    try:
        yield pending.path
    except BaseException:
        pending.discard()
        raise
    pending.commit()


def write_file(target: str | os.PathLike, data: bytes | str, *, durable: bool = False,
               overwrite: bool = True, mode: int | None = None) -> Path:
    """Write ``data`` (text is encoded as UTF-8) to ``target`` through a temporary file; returns ``target``.

    ``mode`` (0o755 for a script) is set on the temporary file, so the target never appears without it.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    with pending_file(target, durable=durable, overwrite=overwrite) as path:
        with open(path, "xb") as handle:
            handle.write(data)
        if mode is not None:
            os.chmod(path, mode)
    return Path(target)


def inside(folder: str | os.PathLike, relative: str | os.PathLike) -> Path:
    """``folder / relative``, for a writer that was given ``folder``: refused with a LoadprobeError when
    ``relative`` is absolute or climbs out (``..``), or when a symbolic link on the way (the target
    itself included) leads out of ``folder``. Names in a file the user got from elsewhere (a plan's
    stage names) end up in ``relative``; no file they name may land outside the folder given.
    """
    from ._errors import LoadprobeError  # standard library, like this module

    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or ".." in parts or any("\0" in part for part in parts):
        raise LoadprobeError(f"{relative!r} is not a path inside {folder}; nothing was written there")
    target = Path(folder, relative)
    base = Path(folder).resolve()
    if not target.resolve().is_relative_to(base):  # resolve() follows the links that exist on the way
        raise LoadprobeError(f"{target} leads out of {folder} through a symbolic link; remove the link or choose "
                             "another folder")
    return target


def _rename_new(source: Path, target: Path) -> None:
    # A hard link fails when the target exists, atomically; the temporary name is removed after.
    try:
        os.link(source, target)
    except FileExistsError:
        raise FileExistsError(17, "already exists; not replaced", str(target)) from None
    except OSError:  # no hard links on this file system: check, then rename (a narrow race)
        if target.exists():
            raise FileExistsError(17, "already exists; not replaced", str(target)) from None
        os.rename(source, target)
        return
    with contextlib.suppress(OSError):  # a leftover hidden temporary is harmless
        os.unlink(source)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(folder: Path) -> None:
    # The rename is only durable once the folder's entry is; some systems cannot open a folder.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
