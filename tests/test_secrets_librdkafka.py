"""Issue 42 item 14: `rebalancer._secrets.LIBRDKAFKA_SENSITIVE` is librdkafka's own list.

librdkafka flags some properties `_RK_SENSITIVE` (src/rdkafka_conf.c) and has no call that returns
the flag, but a client made with `debug=conf` logs the properties set on it, the flagged ones as
"[redacted]". So each property the installed library lists (`rd_kafka_conf_properties_show`, the
table CONFIGURATION.md is made of) is set, alone, on a producer of its own, and that producer's
dump says whether librdkafka hides it; an alias is sensitive when the property it names is.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rebalancer._secrets import LIBRDKAFKA_SENSITIVE

pytest.importorskip("confluent_kafka")

_VP = ctypes.c_void_p
_LOG = ctypes.CFUNCTYPE(None, _VP, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p)
_PRODUCER = 0
_DUMPED = re.compile(r"^\[thrd:app\]:   (\S+) = (.*)$")


def _library() -> ctypes.CDLL:
    from rebalancer.testing.mock_cluster import librdkafka_path

    lib = ctypes.CDLL(librdkafka_path())
    for name, restype, argtypes in (
        ("rd_kafka_conf_properties_show", None, [_VP]),
        ("rd_kafka_conf_new", _VP, []),
        ("rd_kafka_conf_destroy", None, [_VP]),
        ("rd_kafka_conf_set", ctypes.c_int, [_VP, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
        ("rd_kafka_conf_set_log_cb", None, [_VP, _LOG]),
        ("rd_kafka_new", _VP, [ctypes.c_int, _VP, ctypes.c_char_p, ctypes.c_size_t]),
        ("rd_kafka_destroy", None, [_VP]),
    ):
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


def _global_properties(lib: ctypes.CDLL, tmp: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({property: default}, {alias: the property it names}) of the global table."""
    libc = ctypes.CDLL(None)
    libc.fopen.restype, libc.fopen.argtypes = _VP, [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [_VP]
    path = tmp / "CONFIGURATION.md"
    stream = libc.fopen(os.fsencode(path), b"w")
    assert stream
    lib.rd_kafka_conf_properties_show(stream)
    libc.fclose(stream)
    table = path.read_text().split("## Topic configuration properties")[0]
    properties: dict[str, str] = {}
    aliases: dict[str, str] = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) < 6 or cells[0] in ("", "Property") or cells[0].startswith("-"):
            continue
        alias = re.match(r"Alias for `([^`]+)`", cells[5])
        if alias:
            aliases[cells[0]] = alias.group(1)
        else:
            properties[cells[0]] = cells[3]
    return properties, aliases


# Properties rd_kafka_new checks: an existing path, and the setting that must come with it.
_PATHS = ("https.ca.location", "ssl.keystore.location")
_COMPANIONS = {"ssl.keystore.location": {"ssl.keystore.password": "x"}}


@contextmanager
def _client(lib: ctypes.CDLL, settings: dict[str, str]) -> Iterator[tuple[str | None, list[str]]]:
    """A producer with `settings` (and debug=conf): (why it could not be made, or None; its log lines)."""
    lines: list[str] = []
    callback = _LOG(lambda _rk, _level, _facility, text: lines.append(text.decode()))
    error = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for name, value in {**settings, "debug": "conf"}.items():
        if lib.rd_kafka_conf_set(conf, name.encode(), value.encode(), error, len(error)) != 0:
            lib.rd_kafka_conf_destroy(conf)
            yield error.value.decode(), lines
            return
    lib.rd_kafka_conf_set_log_cb(conf, callback)
    client = lib.rd_kafka_new(_PRODUCER, conf, error, len(error))
    if not client:
        lib.rd_kafka_conf_destroy(conf)
        yield error.value.decode(), lines
        return
    lib.rd_kafka_destroy(client)  # rd_kafka_new logged the dump on this thread, before returning
    yield None, lines


def sensitive_properties(tmp: Path) -> tuple[set[str], dict[str, str]]:
    """(the properties the installed librdkafka redacts, aliases included; {property: why unchecked})."""
    lib = _library()
    properties, aliases = _global_properties(lib, tmp)
    redacted: set[str] = set()
    unchecked: dict[str, str] = {}
    for name, default in properties.items():
        if name == "debug":
            continue
        value = str(tmp) if name in _PATHS else "X" if not default else default.replace(", ", ",")
        with _client(lib, {name: value, **_COMPANIONS.get(name, {})}) as (problem, lines):
            if problem is not None:
                unchecked[name] = problem
                continue
        shown = dict(match.groups() for line in lines if (match := _DUMPED.match(line)))
        if name not in shown:
            unchecked[name] = "not in the dump"
        elif shown[name] == "[redacted]":
            redacted.add(name)
    redacted |= {alias for alias, target in aliases.items() if target in redacted}
    return redacted, unchecked


def test_the_table_is_the_installed_librdkafkas_list(tmp_path):
    redacted, unchecked = sensitive_properties(tmp_path)
    assert redacted == LIBRDKAFKA_SENSITIVE, (
        f"librdkafka now redacts {sorted(redacted)}: update LIBRDKAFKA_SENSITIVE in rebalancer/_secrets.py"
    )
    # What could not be set by name is no option a user gives: callbacks, pointers, platform-only.
    settable = {name: why for name, why in unchecked.items()
                if not re.search(r"dedicated|Internal property|not supported in this build|dlopen|builtin", why)
                and name != "builtin.features"}
    assert settable == {}, settable
