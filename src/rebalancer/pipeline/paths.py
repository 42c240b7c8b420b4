"""Where the pipeline reads and writes: local paths, and Hadoop filesystem URIs kept as written.

A URI (`file://`, `hdfs://`, `s3a://`, `gs://`, `abfs://`, ...) is handed to Spark unchanged:
`pathlib.Path` would fold its `//` (`hdfs:///x` became `hdfs:/x`, `hdfs://nn/x` a path under `hdfs:`).
A `file:` URI is local: it is checked with Python's own I/O, its path taken literally, as Hadoop
takes it (`%20` is three characters, not a space). Any other scheme is checked and written through
Spark's Hadoop `FileSystem` API over the JVM gateway, with the session's Hadoop configuration (so the
same credentials and endpoints as Spark's own reads), and nothing is ever created on the local disk
for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self

from rebalancer._secrets import masked_text, masked_url, shown_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# scheme (two characters at least: `c:/` is not one), then `//authority` and/or an absolute path.
_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]+):(?P<authority>//[^/?#]*)?(?P<path>/[^?#]*)?$")
# Schemes whose paths are on this machine's disk: checked and written with Python's own I/O.
LOCAL_SCHEMES = frozenset({"file"})
# Read for a text file's first line (a CSV header, a JSON record's keys) on a remote filesystem.
HEAD_BYTES = 1 << 16


def split_uri(text: str) -> tuple[str, str, str] | None:
    """(scheme lower-cased, prefix `scheme://authority`, path) of a URI; None for a plain path."""
    match = _URI.match(text)
    if match is None or not (match["authority"] or match["path"]):
        return None
    prefix = text[: len(text) - len(match["path"] or "")]
    return match["scheme"].lower(), prefix, match["path"] or ""


def is_uri(location: str | Path) -> bool:
    return isinstance(location, str) and split_uri(location) is not None


def location_argument(text: str) -> Path | str:
    """argparse type of every location flag (--input, --output, --checkpoint, --report-dir,
    --plan-from): a URI kept as written, else a local Path."""
    return text if is_uri(text) or text.lower().startswith("kafka://") else Path(text)


def local_path(location: str | Path) -> Path | None:
    """The local path of a plain path or a `file:` URI (taken literally); None for a remote URI."""
    if isinstance(location, Path):
        return location
    parts = split_uri(location)
    if parts is None:
        return Path(location)
    scheme, prefix, path = parts
    if scheme not in LOCAL_SCHEMES:
        return None
    host = prefix[len(scheme) + 1 :].removeprefix("//")
    if host not in ("", "localhost"):
        # Shown from the masked URI: a user info (`file://u:Secret@/x`) is no host, and its password
        # may hold a '/' that splits it between what the pattern reads as host and path.
        shown = masked_url(location)
        shown_parts = split_uri(shown)
        shown_host = shown_parts[1][len(scheme) + 1 :].removeprefix("//") if shown_parts else host
        raise ValueError(f"a file: URI names a local path, got the host {shown_host!r} in {shown}")
    return Path(path or "/")


def check_location(label: str, location: object) -> None:
    """A location field's value as the run will take it: a `file:` URI naming a host (or a user,
    `file://u:PW@/x`) is refused naming the field, its password as ***."""
    if isinstance(location, str):
        try:
            local_path(location)
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None


def child(location: str, name: str) -> str:
    """`location/name` for a URI, without normalising the rest of it."""
    return (location if location.endswith("/") else location + "/") + name


def join(location: str | Path, name: str) -> str | Path:
    return location / name if isinstance(location, Path) else child(location, name)


def is_remote(location: str | Path | None) -> bool:
    """A URI on a filesystem other than the local one (hdfs://, s3a://, ...): reached through Spark."""
    return isinstance(location, str) and local_path(location) is None


class OutputPath(Protocol):
    """What the pipeline's writers use of a path: `pathlib.Path`, or a `UriPath`."""

    @property
    def name(self) -> str: ...

    def __truediv__(self, key: str) -> Self: ...

    @property
    def parent(self) -> Self: ...

    def with_name(self, name: str) -> Self: ...

    def exists(self) -> bool: ...

    def is_dir(self) -> bool: ...

    def mkdir(self, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None: ...

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str: ...

    def write_text(
        self, data: str, encoding: str | None = None, errors: str | None = None, newline: str | None = None
    ) -> int: ...

    def replace(self, target: Any) -> Any: ...


class HadoopFS:
    """Spark's Hadoop `FileSystem` API over the JVM gateway; Java errors become one-line Python ones."""

    def __init__(self, spark: SparkSession) -> None:
        try:
            context = spark.sparkContext
            jvm, jsc = context._jvm, context._jsc
        except Exception:  # Spark Connect: `sparkContext` raises, there is no JVM in this process
            jvm = jsc = None
        if jvm is None or jsc is None:
            raise ValueError(
                "a remote URI is checked and written through Spark's JVM gateway, which this session "
                "lacks (Spark Connect): give a local path or file: URI, or --report-dir"
            )
        self.jvm = jvm
        self.conf = jsc.hadoopConfiguration()

    @contextmanager
    def errors(self, uri: str) -> Iterator[None]:
        from py4j.protocol import Py4JJavaError

        try:
            yield
        except Py4JJavaError as exc:
            java = exc.java_exception
            kind = java.getClass().getSimpleName()
            message = str(java.getMessage() or "").strip().splitlines()
            # A password in the URI (Hadoop's ftp:// takes one) as ***, in the message too; cut after.
            shown = masked_url(uri)
            text = f"{shown}: {kind}" + (f": {masked_text(message[0].replace(uri, shown))[:300]}" if message else "")
            if kind == "UnsupportedFileSystemException" or "ClassNotFoundException" in text:
                text += " (put the filesystem's Hadoop connector on Spark's classpath: --packages or spark.jars)"
            if kind == "FileNotFoundException":
                raise FileNotFoundError(text) from None
            raise ValueError(text) from None

    def _fs_path(self, uri: str) -> tuple[Any, Any]:
        path = self.jvm.org.apache.hadoop.fs.Path(uri)
        return path.getFileSystem(self.conf), path

    def status(self, uri: str) -> Any | None:
        """The FileStatus of `uri`, or None if nothing is there."""
        with self.errors(uri):
            fs, path = self._fs_path(uri)
            if not fs.exists(path):
                return None
            return fs.getFileStatus(path)

    def qualified(self, uri: str) -> str:
        """`uri` with its filesystem's scheme and authority filled in: what two URIs are compared by."""
        with self.errors(uri):
            fs, path = self._fs_path(uri)
            return str(fs.makeQualified(path).toString())

    def list_files(self, uri: str) -> list[tuple[str, int]]:
        """(path, size) of every file under the directory `uri`, recursively, as Hadoop names them."""
        with self.errors(uri):
            fs, path = self._fs_path(uri)
            found = fs.listFiles(path, True)
            files = []
            while found.hasNext():
                status = found.next()
                files.append((str(status.getPath().toUri().getPath()), int(status.getLen())))
            return files

    def read_bytes(self, uri: str, limit: int | None = None) -> bytes:
        with self.errors(uri):
            fs, path = self._fs_path(uri)
            stream = fs.open(path)
            try:
                data = stream.readAllBytes() if limit is None else stream.readNBytes(limit)
            finally:
                stream.close()
            return bytes(data)

    def write_bytes(self, uri: str, data: bytes) -> None:
        with self.errors(uri):
            fs, path = self._fs_path(uri)
            stream = fs.create(path, True)
            try:
                stream.write(bytearray(data))
            finally:
                stream.close()

    def children(self, uri: str) -> list[str]:
        """The names directly under the directory `uri` (none if nothing is there)."""
        with self.errors(uri):
            fs, path = self._fs_path(uri)
            if not fs.exists(path):
                return []
            return sorted(str(status.getPath().getName()) for status in fs.listStatus(path))

    def delete(self, uri: str) -> None:
        """Remove `uri`, recursively (nothing there is fine)."""
        with self.errors(uri):
            fs, path = self._fs_path(uri)
            fs.delete(path, True)

    def mkdirs(self, uri: str) -> None:
        with self.errors(uri):
            fs, path = self._fs_path(uri)
            if not fs.mkdirs(path):
                raise ValueError(f"cannot create the directory {shown_location(uri)}")

    def move(self, source: str, target: str) -> None:
        """Rename `source` to `target`, which must not exist (Hadoop would move it into a directory
        there): how a run's staged outputs are swapped in."""
        with self.errors(source):
            fs, src = self._fs_path(source)
            _, dst = self._fs_path(target)
            if fs.exists(dst) or not fs.rename(src, dst):
                raise ValueError(f"cannot rename {masked_url(source)} to {masked_url(target)}")

    def rename(self, source: str, target: str) -> None:
        """Move `source` over `target`: object stores have no atomic rename, so delete, then move."""
        with self.errors(source):
            fs, src = self._fs_path(source)
            _, dst = self._fs_path(target)
            if fs.exists(dst):
                fs.delete(dst, False)
            if not fs.rename(src, dst):
                raise ValueError(f"cannot rename {shown_location(source)} to {shown_location(target)}")


class UriPath:
    """A URI with the few `Path` methods the pipeline's writers use.

    `str()` is the URI as given (what Spark gets). A `file:` URI's I/O is Python's, on its local
    path; any other scheme's goes through `HadoopFS`.
    """

    def __init__(self, uri: str, fs: HadoopFS | None = None) -> None:
        self.uri = uri
        self.local = local_path(uri)
        if self.local is None and fs is None:
            raise ValueError(f"{shown_location(uri)} is on a remote filesystem: it needs a Spark session to be reached")
        self.fs = fs

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"UriPath({shown_location(self.uri)!r})"  # a password in it as ***

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UriPath) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def __truediv__(self, key: str) -> Self:
        return type(self)(child(self.uri, key), self.fs)

    @property
    def name(self) -> str:
        return self.uri.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> Self:
        return type(self)(self.uri.rstrip("/").rsplit("/", 1)[0] or "/", self.fs)

    def with_name(self, name: str) -> Self:
        return self.parent / name

    def _hadoop(self) -> HadoopFS:
        assert self.fs is not None  # a remote URI always has one (see __init__)
        return self.fs

    def exists(self) -> bool:
        if self.local is not None:
            return self.local.exists()
        return self._hadoop().status(self.uri) is not None

    def is_dir(self) -> bool:
        if self.local is not None:
            return self.local.is_dir()
        status = self._hadoop().status(self.uri)
        return status is not None and bool(status.isDirectory())

    def mkdir(self, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        if self.local is not None:
            self.local.mkdir(mode=mode, parents=parents, exist_ok=exist_ok)
        else:
            # Hadoop's mkdirs makes the parents and accepts an existing directory.
            self._hadoop().mkdirs(self.uri)

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        if self.local is not None:
            return self.local.read_text(encoding=encoding, errors=errors)
        return self._hadoop().read_bytes(self.uri).decode(encoding or "utf-8", errors or "strict")

    def write_text(
        self, data: str, encoding: str | None = None, errors: str | None = None, newline: str | None = None
    ) -> int:
        if self.local is not None:
            return self.local.write_text(data, encoding=encoding, errors=errors, newline=newline)
        self._hadoop().write_bytes(self.uri, data.encode(encoding or "utf-8", errors or "strict"))
        return len(data)

    def replace(self, target: UriPath) -> UriPath:
        if self.local is not None and target.local is not None:
            self.local.replace(target.local)
        else:
            self._hadoop().rename(self.uri, target.uri)
        return target


def output_path(location: str | Path, spark: SparkSession | None = None) -> OutputPath:
    """A local Path for a plain path; a `UriPath` (Hadoop I/O for a remote one, needing `spark`) for a URI."""
    if isinstance(location, Path) or not is_uri(location):
        return Path(location)
    remote = local_path(location) is None
    if remote and spark is None:
        raise ValueError(
            f"{shown_location(location)} is on a remote filesystem: it needs a Spark session to be reached"
        )
    return UriPath(location, HadoopFS(spark) if remote and spark is not None else None)


def write_json(path: OutputPath, payload: dict[str, Any]) -> None:
    """Written beside, then renamed: a reader never sees half a summary, plan or state."""
    import json

    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
