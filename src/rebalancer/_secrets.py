"""Which configuration keys hold secrets, and URLs shown with their secrets masked.

One rule for the package: `produce` hides these keys' values in its config errors, and `pipeline`
masks them in the query of an input URL (`kafka://h:9092/t?kafka.sasl.password=***`) wherever it
shows one. Masking goes by structure (which key, where the user info ends), never by searching a
text for the secret itself. Stdlib only and nothing else of ours: `produce` and `pipeline` are
peers and must not import each other, but both may import this.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from urllib.parse import unquote_plus

__all__ = ["MASK", "SECRET_KEYS", "SECRET_KEY_WORDS", "is_secret_key", "masked_url"]

MASK = "***"
# librdkafka's keys that hold a secret whatever their name says.
SECRET_KEYS: frozenset[str] = frozenset({"sasl.password", "ssl.key.password"})
# Words that make any librdkafka/Kafka key a secret (ssl.keystore.password, sasl.jaas.config,
# sasl.oauthbearer.client.secret, ...), on top of SECRET_KEYS.
SECRET_KEY_WORDS: tuple[str, ...] = ("password", "secret", "sasl.jaas", "token")


def is_secret_key(key: str, keys: Collection[str] = SECRET_KEYS) -> bool:
    """Whether `key`'s value must never be shown: one of `keys`, or a secret word in its name."""
    lowered = str(key).lower()
    return lowered in keys or any(word in lowered for word in SECRET_KEY_WORDS)


def masked_url(text: str, is_secret: Callable[[str], bool] = is_secret_key) -> str:
    """`text` with the password of its user info and each secret query value replaced by ***.

    Query keys are judged as `parse_qsl` reads them (percent- and plus-decoded); a secret value goes
    with everything up to the next '&', a '#' included (an unencoded one may be part of it). The
    user info ends at the last '@' before the query: a password holding an unencoded '/' or '@' is
    still hidden whole (an '@' in a path, with no ':' before it, is left alone).
    """
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    head, question, query = rest.partition("?")
    userinfo, at, host = head.rpartition("@")
    if at and ":" in userinfo:
        head = f"{userinfo.partition(':')[0]}:{MASK}@{host}"
    if question:
        pairs = []
        for pair in query.split("&"):
            key, equals, _value = pair.partition("=")
            pairs.append(f"{key}={MASK}" if equals and is_secret(unquote_plus(key)) else pair)
        query = "&".join(pairs)
    return f"{scheme}{sep}{head}{question}{query}"
