"""Which configuration keys hold secrets, and URLs shown with their secrets masked.

One rule for the package: `produce` hides these keys' values in its config errors, and `pipeline`
masks them in the query of an input URL (`kafka://h:9092/t?kafka.sasl.password=***`), and a URL's
user info (`ftp://***@host/path`), wherever it shows one. Masking goes by structure (which key, where the user info ends), never by searching a
text for the secret itself. Stdlib only and nothing else of ours: `produce` and `pipeline` are
peers and must not import each other, but both may import this.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
from collections.abc import Callable, Collection
from typing import Any, ParamSpec, TypeVar
from urllib.parse import unquote_plus

__all__ = [
    "LIBRDKAFKA_SENSITIVE",
    "MASK",
    "SECRET_KEYS",
    "SECRET_KEY_WORDS",
    "MaskedFormatter",
    "has_user_info",
    "is_secret_key",
    "masked_argument",
    "masked_pairs",
    "masked_repr",
    "masked_servers",
    "masked_text",
    "masked_url",
    "masks_errors",
    "refuse_servers_login",
    "shown_location",
]

MASK = "***"
# The properties librdkafka flags `_RK_SENSITIVE` (and so prints as "[redacted]" in its own
# `debug=conf` dump), aliases included, as src/rdkafka_conf.c of the pinned librdkafka (2.16.0)
# lists them. librdkafka has no API that returns the flag; tests/test_secrets_librdkafka.py reads
# the installed library's redacted dump at run time and checks this table against it.
LIBRDKAFKA_SENSITIVE: frozenset[str] = frozenset(
    {
        "sasl.oauthbearer.assertion.private.key.file",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.assertion.private.key.pem",
        "sasl.oauthbearer.client.credentials.client.secret",  # alias of sasl.oauthbearer.client.secret
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "sasl.password",
        "sasl.username",
        "ssl.ca.pem",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.key.pem",
        "ssl.keystore.password",
    }
)
# The keys whose values are never shown, whatever their name says.
SECRET_KEYS: frozenset[str] = LIBRDKAFKA_SENSITIVE
# Words that make any librdkafka/Kafka key a secret as well (the Java clients' ssl.truststore.password
# and sasl.jaas.config, a future librdkafka key...): a key is masked when in doubt.
SECRET_KEY_WORDS: tuple[str, ...] = ("password", "secret", "sasl.jaas", "token")

# Where a URL's authority ends (RFC 3986), and a scheme (two characters at least: `c:/` is none).
_AUTHORITY_END = re.compile(r"[/?#]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]+:/*")
# A URL inside a text (an error of Spark's or Hadoop's): a scheme, '://', and no whitespace; in
# quotes (a repr), up to the closing quote, which stays outside what is masked.
_URL = r"[A-Za-z][A-Za-z0-9+.\-]+://"
_URL_IN_TEXT = re.compile(rf"(?<=(?P<quote>['\"])){_URL}[^'\"\s]*(?=(?P=quote))|{_URL}\S+")


def is_secret_key(key: str, keys: Collection[str] = SECRET_KEYS) -> bool:
    """Whether `key`'s value must never be shown: one of `keys` (also under a prefix, as the reader
    option `kafka.ssl.key.pem` or Spark's `spark.kafka.sasl.password`), or a secret word in it."""
    lowered = str(key).lower()
    if lowered in keys or any(word in lowered for word in SECRET_KEY_WORDS):
        return True
    return any(lowered.endswith(f".{name}") for name in keys)


def _authority_start(text: str) -> int | None:
    """Where the authority (user info, host) starts: after `scheme://`, or `scheme:` and any
    slashes (`kafka:/u:p@h` is a typo whose password is hidden all the same); None for a path."""
    found = text.find("://")
    if found >= 0:
        return found + 3
    match = _SCHEME.match(text)
    return match.end() if match else None


def _user_info_ends(text: str, start: int) -> set[int]:
    """The '@' that may end the user info, under both readings of an unencoded password.

    RFC 3986: the last '@' of the authority, which ends at the first '/', '?' or '#'. A person's
    reading: a password may hold any of those, so the user info ends at the last '@' followed by a
    host, that is by text up to the next '/', '?', '#' (or the end) holding no '&' or '=', which
    only a query holds (an '@' in a query value, `?kafka.sasl.username=bob@corp.com&...`, is not
    one). Both are masked: a text that reads either way shows no password either way.
    """
    ends: set[int] = set()
    authority_end = _AUTHORITY_END.search(text, start)
    authority = text[start : authority_end.start() if authority_end else len(text)]
    if "@" in authority:
        ends.add(start + authority.rindex("@"))
    at = text.rfind("@", start)
    while at >= 0:
        host_end = _AUTHORITY_END.search(text, at + 1)
        host = text[at + 1 : host_end.start() if host_end else len(text)]
        if "&" not in host and "=" not in host:
            ends.add(at)
            break
        at = text.rfind("@", start, at)
    return ends


def has_user_info(text: str) -> bool:
    """Whether `text` may name a user (and password) before its host, read either way (see
    `_user_info_ends`): an '@' in a query's value (`?kafka.sasl.username=bob@corp.com`) is not one,
    an '@' after a '?' that starts no `key=value` (`kafka://bob:pa?ss@host/t`) is, and so is one
    whose host a path follows (`kafka://b/b?x=1:pa@host/t`, the user `b/b?x=1` unencoded): read as a
    query, its pieces would reach messages about options. A value holding an '@' and then a '/'
    is told from it only with one of them encoded (%40, %2F)."""
    start = _authority_start(text)
    if start is None:
        return False
    for at in _user_info_ends(text, start):
        query = text.find("?", start, at)
        pair = text[max(query, text.rfind("&", start, at)) + 1 : at]
        host_end = _AUTHORITY_END.search(text, at + 1)
        if query < 0 or "=" not in pair or (host_end is not None and host_end.group(0) == "/"):
            return True
    return False


def _secret_values(
    text: str, query: int, is_secret: Callable[[str], bool], separator: str
) -> list[tuple[int, int]]:
    """The spans of secret values in the `separator`-separated pairs starting at `query`.

    Keys are judged as `parse_qsl` reads them (percent- and plus-decoded). A secret value runs to
    the next separator that starts a `key=value` pair: an unencoded '&' or '#' may be part of it.
    """
    spans: list[tuple[int, int]] = []
    position = query
    secret_from: int | None = None
    while position <= len(text):
        end = text.find(separator, position)
        end = len(text) if end < 0 else end
        pair = text[position:end]
        key, equals, _value = pair.partition("=")
        if equals:
            if secret_from is not None:
                spans.append((secret_from, position - 1))
                secret_from = None
            if is_secret(unquote_plus(key)):
                secret_from = position + len(key) + 1
        position = end + 1
    if secret_from is not None:
        spans.append((secret_from, len(text)))
    return spans


def masked_url(text: str, is_secret: Callable[[str], bool] = is_secret_key, *, at_in_path: bool = True) -> str:
    """`text` with its user info (user and password) and each secret query value (or `;key=value`
    parameter, as Spark Connect's `;token=`) replaced by ***: `ftp://***@host/path`.

    The user name goes too: librdkafka flags `sasl.username` sensitive, and a user info whose user
    holds an unencoded ':' cannot be split into a user and a password at all. An unencoded '?', '#',
    '/', '@' or '&' in it leaves it two readings (`kafka://bob:pa?x@h/t`: RFC 3986 reads the host
    `bob:pa` and the query `x@h/t`; its writer meant the password `pa?x`): everything either reading
    calls user info (`_user_info_ends`) or a secret value is hidden. Read the second way, an '@'
    with no ':' before it may be one in a path (`hdfs://nn/data/x@y`), shown as it is, unless
    `at_in_path` is false (a kafka:// URL: its topic holds no '@'). Text that is no URL (a local
    path) is returned as it is.
    """
    start = _authority_start(text)
    if start is None:
        return text
    ends = _user_info_ends(text, start)
    authority_end = _AUTHORITY_END.search(text, start)
    rfc_end = authority_end.start() if authority_end else len(text)
    spans = [(start, at) for at in ends if at < rfc_end or not at_in_path or ":" in text[start:at]]
    for query in {text.find("?", position) for position in (start, *ends)} - {-1}:
        spans.extend(_secret_values(text, query + 1, is_secret, "&"))
    # Spark Connect's parameters come after ';' (`sc://host:15002/;token=...`), judged the same way.
    parameters = text.find(";", start) if text[:start].lower().startswith("sc:") else -1
    if parameters >= 0:
        spans.extend(_secret_values(text, parameters + 1, is_secret, ";"))
    return _masked_spans(text, spans)


def masked_servers(text: str) -> str:
    """A broker list (`HOST:PORT[,HOST:PORT]`, no scheme) as errors show it: everything up to its
    last '@' as *** (`***@h:9092`), since a password may hold ',' or '@' unencoded. A broker list
    holds no user info, so a text with an '@' was given one by mistake."""
    at = text.rfind("@")
    return text if at < 0 else MASK + text[at:]


def refuse_servers_login(servers: str, field: str) -> None:
    """ValueError naming `field` if the broker list `servers` holds an '@', its user info masked: a
    broker list takes no login (sasl.username and sasl.password do), and one given there was shown
    by every repr and error that names the servers. One rule for `produce` and the pipeline's reader."""
    if "@" in servers:
        raise ValueError(
            f"{field} takes no user info (a login goes in sasl.username and sasl.password), "
            f"got {masked_servers(servers)!r}"
        )


def masked_pairs(text: str, is_secret: Callable[[str], bool] = is_secret_key) -> str:
    """`text` read as '&'-separated `key=value` pairs, a query without its '?', each secret value as
    ***: for the part of a URL where a '?' was forgotten or mistyped, such as a kafka:// URL's topic
    (`kafka://h:9092/t&kafka.sasl.password=...`). A text holding no '=' is returned as it is."""
    return _masked_spans(text, _secret_values(text, 0, is_secret, "&"))


def _masked_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each span replaced by ***, spans that overlap or touch as one."""
    shown: list[str] = []
    kept = 0
    for begin, end in sorted(spans):
        if begin < kept or (begin == kept and shown):  # overlaps (or touches) the span just hidden
            kept = max(kept, end)
            continue
        shown.append(text[kept:begin] + MASK)
        kept = end
    return "".join(shown) + text[kept:]


def masked_text(text: str) -> str:
    """`text` with each URL in it masked (`masked_url`): for messages this package did not write,
    such as a Java exception's, which may quote a URI it was given, or a form of it."""
    return _URL_IN_TEXT.sub(lambda match: masked_url(match.group(0)), text)


def masked_argument(argument: str) -> str:
    """A command line's argument as a process list or a pid file may show it, every URL masked and
    each secret's value as ***: an argument `key=value` whose key is a secret's (`is_secret_key`, a
    leading `-D` aside: `--conf`'s `spark.hadoop.fs.s3a.secret.key=...`, a JVM's
    `-Djavax.net.ssl.trustStorePassword=...`) shows no value; in any other, each word shows none
    after such a key (`spark.driver.extraJavaOptions=-Da=1 -Dx.password=...`)."""
    key, equals, _value = argument.partition("=")
    if equals and is_secret_key(key.removeprefix("-D")):
        return f"{key}={MASK}"
    return _WORD.sub(lambda word: _masked_after_secret_key(word.group(0)), masked_text(argument))


_WORD = re.compile(r"\S+")


def _masked_after_secret_key(text: str) -> str:
    """`text` with all after the first `key=` whose key is a secret's as ***; keys are what lies
    between one '=' and the next (`a=-Dx.password=...`: `a`, then `-Dx.password`)."""
    begin = 0
    while (equals := text.find("=", begin)) >= 0:
        if is_secret_key(text[begin:equals].removeprefix("-D")):
            return text[: equals + 1] + MASK
        begin = equals + 1
    return text


class MaskedFormatter(logging.Formatter):
    """A Formatter whose text (the traceback of a record's exception included) shows each URL masked
    (`masked_text`): for the handlers the CLI prints and writes through, where a library's record
    (Spark's, Py4J's, aiokafka's) may quote a URI whole."""

    def format(self, record: logging.LogRecord) -> str:
        return masked_text(super().format(record))


_P = ParamSpec("_P")
_R = TypeVar("_R")


def masks_errors(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """`function`, whose ValueErrors show each URL in their text masked (`masked_text`): for checks
    whose every message names a location, a URI with a password among them."""

    @functools.wraps(function)
    def masking(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return function(*args, **kwargs)
        except ValueError as exc:
            text = str(exc)
            shown = masked_text(text)
            if shown == text:
                raise
            raise ValueError(shown) from None  # the cause's text would hold the password too

    return masking


def shown_location(location: str | os.PathLike[str]) -> str:
    """A location as errors and logs show it: a URI's password and secret query values as ***."""
    return masked_url(location) if isinstance(location, str) else os.fspath(location)


def masked_repr(instance: Any, **shown: object) -> str:
    """A dataclass's repr as `@dataclass` writes it, each text field as `masked_url` shows it (a
    URI's password as ***); `shown` gives the value to show for a field (one left out of the repr
    included), such as options with their secret values masked."""
    parts = []
    for item in dataclasses.fields(instance):
        if not item.repr and item.name not in shown:
            continue
        value = shown.get(item.name, getattr(instance, item.name))
        parts.append(f"{item.name}={(masked_url(value) if isinstance(value, str) else value)!r}")
    return f"{type(instance).__qualname__}({', '.join(parts)})"
