"""The sink's URL: read and checked, and its secrets masked by structure wherever it is shown."""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from rebalancer.pipeline.session.build import spark_error_reason
from rebalancer.pipeline.sinks._pg_types import _first_line

SCHEMES = ("postgresql://", "postgres://")


# libpq's connection parameters that hold a secret: masked by name wherever a conninfo is shown.
SECRET_FIELDS = ("password", "sslpassword")
_ENCODE_HINT = "percent-encode it (urllib.parse.quote(password, safe=''))"
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# A `password=` / `sslpassword=` field of a conninfo or URL query: quoted the way libpq quotes, or up to a space.
_SECRET_FIELD = re.compile(r"\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE)
# The user info (user and password) of any postgresql:// URL in a text (it ends at the authority's
# '@'): hidden whole, as `rebalancer._secrets.masked_url` hides every URL's.
_URL_USER_INFO = re.compile(r"(postgres(?:ql)?://)[^\s/?#@]*@", re.IGNORECASE)


def _scheme_only(url: object) -> str:
    """What a rejected URL looked like, without anything that may be a password."""
    if not isinstance(url, str):
        return type(url).__name__
    head, sep, _ = url.partition("://")
    return f"{head}://…" if sep else "…"


def _display_url(params: dict[str, Any]) -> str:
    host = params.get("host") or "localhost"
    port = params.get("port")
    user = params.get("user")
    database = params.get("dbname") or ""
    where = f"{host}:{port}" if port else str(host)
    return f"postgresql://{'***@' if user else ''}{where}/{database}"  # a user name as *** (masked_url's rule)


def _url_error(shown: str, problem: str) -> ValueError:
    return ValueError(f"sink {shown}: {problem}; {_ENCODE_HINT}")


def _read_url(url: str) -> tuple[dict[str, str], str]:
    """libpq's parameters for `url`, and `url` with its password masked.

    libpq ends the userinfo at the first '@' before a '/', the URL standard at the authority's last
    '@' before any of '/', '?', '#': a user or password with one of those unencoded is read
    differently by the two (libpq then takes part of it for a host, port or database and echoes it
    in errors). Such URLs, and malformed percent-encoding, are refused with one line showing no
    character of the user or password; what is accepted, both read alike.
    """
    from psycopg.conninfo import conninfo_to_dict

    scheme = url.partition("://")[0]
    anonymous = f"{scheme}://…"
    if any(c.isspace() or unicodedata.category(c) == "Cc" for c in url):
        raise _url_error(
            anonymous, "the URL holds a space or control character"
        )  # urlsplit drops some silently
    try:
        parts = urlsplit(url)
    except ValueError:  # its message quotes the authority, password included
        raise _url_error(
            anonymous,
            "the URL's host part cannot be read (an unmatched '[' or ']', or a character that reads as "
            "'/', '?', '#', '@' or ':' once normalized)",
        ) from None
    if "@" in parts.path + parts.query + parts.fragment:
        raise _url_error(
            anonymous,
            "the URL's user or password holds a reserved character ('/', '?', '#' or '@'), "
            "or its database name or parameters hold '@'",
        )
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if "@" in userinfo:
        raise _url_error(anonymous, "the URL's user or password holds '@'")
    shown = f"{scheme}://{'***' if at else ''}{at}{hostport}{parts.path}"  # no query: it may hold password=
    if _BAD_PERCENT.search(userinfo):
        raise _url_error(shown, "the URL's user or password holds '%' not followed by two hex digits")
    if "%00" in userinfo:
        raise _url_error(shown, "the URL's user or password holds %00")
    try:
        unquote(userinfo, errors="strict")
    except UnicodeDecodeError:
        raise _url_error(shown, "the URL's user or password is not UTF-8 once percent-decoded") from None
    rest = url[len(scheme) + 3 + len(parts.netloc) :]
    masked = f"{scheme}://{'***' if at else ''}{at}{hostport}{rest}"
    try:
        params = conninfo_to_dict(url)
    except Exception as exc:  # psycopg.ProgrammingError: a bad host, port or parameter; libpq quotes the URL
        raise ValueError(
            f"sink URL cannot be parsed: {_redacted_text(_first_line(exc), {url: masked})}"
        ) from None
    return {k: str(v) for k, v in params.items()}, masked


def _masked_conninfo(conninfo: str) -> str:
    """`conninfo` with each secret field's value replaced by ***."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: "***" for k in SECRET_FIELDS if params.get(k) is not None})


def _redacted_text(text: str, masks: Mapping[str, str]) -> str:
    """`text` with each known connection string replaced whole by its masked form, then any secret field
    or URL password blanked: by structure, never by searching for the password itself."""
    for raw, masked in masks.items():
        text = text.replace(raw, masked)
    text = _SECRET_FIELD.sub(r"\1***", text)
    return _URL_USER_INFO.sub(r"\1***@", text)


def _python_error(exc: BaseException) -> str:
    """A Spark task failure's cause, as `spark_error_reason` finds it, uncut: the caller masks it
    first and cuts it after (a URL cut short would escape the mask)."""
    return spark_error_reason(exc, limit=sys.maxsize)
