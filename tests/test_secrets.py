"""Issue 33 follow-up and issue 42 (items 12-15): `rebalancer._secrets`, the one rule for which keys
hold secrets and how a URL is shown without them, shared by `produce` (its config errors) and
`pipeline` (input URLs, output URIs, errors, reprs)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from rebalancer import _secrets
from rebalancer._secrets import (
    LIBRDKAFKA_SENSITIVE,
    is_secret_key,
    masked_repr,
    masked_text,
    masked_url,
    masks_errors,
    shown_location,
)

SECRET = "S3CRET"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("kafka://h:1/t", "kafka://h:1/t"),
        (f"kafka://h:1/t?a=1&kafka.sasl.password={SECRET}&x=2", "kafka://h:1/t?a=1&kafka.sasl.password=***&x=2"),
        # an unencoded '&' in a password: the pieces without '=' after it are hidden with it
        (f"kafka://h:1/t?a=1&kafka.sasl.password={SECRET}&b", "kafka://h:1/t?a=1&kafka.sasl.password=***"),
        (f"kafka://h:1/t?kafka.sasl.password=a&{SECRET}&x=1", "kafka://h:1/t?kafka.sasl.password=***&x=1"),
        # parse_qsl decodes the key: an encoded secret key is the same key
        (f"kafka://h:1/t?kafka.sasl.%70assword={SECRET}", "kafka://h:1/t?kafka.sasl.%70assword=***"),
        (f"kafka://h:1/t?kafka.sasl+password={SECRET}", "kafka://h:1/t?kafka.sasl+password=***"),
        # a fragment may be the rest of an unencoded password: it goes with the value
        (f"kafka://h:1/t?kafka.sasl.password={SECRET}#{SECRET}&x=1", "kafka://h:1/t?kafka.sasl.password=***&x=1"),
        # librdkafka's sensitive keys, whatever their name says (issue 42 item 14)
        (f"kafka://h:1/t?kafka.ssl.key.pem={SECRET}&kafka.sasl.oauthbearer.config={SECRET}",
         "kafka://h:1/t?kafka.ssl.key.pem=***&kafka.sasl.oauthbearer.config=***"),
        (f"ftp://u:{SECRET}@h/p", "ftp://***@h/p"),  # the user too (finding F7b)
        (f"ftp://u:a/{SECRET}@h/p", "ftp://***@h/p"),  # a '/' in the password: hidden up to the last '@'
        (f"ftp://u:a@{SECRET}@h/p", "ftp://***@h/p"),
        ("ftp://u:@h/p", "ftp://***@h/p"),  # an empty password is not told from another
        (f"kafka:/u:{SECRET}@h/t", "kafka:/***@h/t"),  # a scheme's slashes mistyped
        (f"sc://h:15002/;token={SECRET};use_ssl=true", "sc://h:15002/;token=***;use_ssl=true"),  # Spark Connect
        (f"hdfs://{SECRET}@nn/p", "hdfs://***@nn/p"),  # a user name is one (librdkafka: sasl.username)
        ("hdfs://nn/data/x@y", "hdfs://nn/data/x@y"),  # an '@' in a path is none (no ':' before it)
        # a user holding '/' and '?' read as a path and a query: no piece of it shows either way
        (f"kafka://b/b?x={SECRET}:{SECRET}@h:9/t", "kafka://***@h:9/t"),
        # an e-mail user name in a query value ends no user info (the password is masked by its key)
        (f"kafka://h:9/t?kafka.sasl.username=bob@corp.com&kafka.sasl.password={SECRET}&x=1",
         "kafka://h:9/t?kafka.sasl.username=***&kafka.sasl.password=***&x=1"),
        ("kafka://h:9/t?x=bob@corp.com&y=1", "kafka://h:9/t?x=bob@corp.com&y=1"),
        # read either way, a password or a secret value: hidden either way (more than needed at times)
        (f"kafka://h:9/t?kafka.sasl.password=p@{SECRET}", "kafka://***"),
        ("/data/a:b@c", "/data/a:b@c"),  # a local path is no URL
    ],
)
def test_masked_url_hides_secret_values_by_structure(text, shown):
    assert masked_url(text) == shown


# Issue 42 item 12: `kafka://bob:pa?Adv3Secret@127.0.0.1:9/t` was shown whole (urlsplit reads the
# '?' as the query's start). Every character a password or user may hold unencoded, alone, doubled
# and at either end. (Not the word "secret": a key holding it is a secret key, and the query read
# from a '?' in the password would then hide more than the password, as it may.)
SPECIAL = "?#/@&=:;%+ ,[]!$'()*~"
# Finding F7b and its kafka:// sequel: the user name is hidden too, whatever it holds ('/' and '?'
# with a `key=value` after them read as a path and a query whose pieces reached an option's error).
USERS = ["bob", "b@b", "b?b", "b#b", "b/b", "b&b", "b=b", "b%40b", "b;b", "b b", "b/b?b", "b/b?x=1", "b?x=1&y=2"]
PASSWORDS = [f"pa{c}Adv3Pw{c}{c}x{c}" for c in SPECIAL] + [f"{c}Adv3Pw" for c in SPECIAL]


@pytest.mark.parametrize(("user", "password"), list(itertools.product(USERS, PASSWORDS)))
def test_a_password_with_any_unencoded_character_is_hidden_whole(user, password):
    for tail, shown_tail in (
        ("", ""),
        ("?maxOffsetsPerTrigger=5", "?maxOffsetsPerTrigger=5"),
        ("?kafka.sasl.password=Adv3Pw&events=5", "?kafka.sasl.password=***&events=5"),
    ):
        url = f"kafka://{user}:{password}@127.0.0.1:9/t{tail}"
        assert masked_url(url) == f"kafka://***@127.0.0.1:9/t{shown_tail}"
        assert _secrets.has_user_info(url), url  # and so parse_kafka_url refuses it before any option


def test_masked_url_takes_the_callers_rule_for_keys():
    assert masked_url("kafka://h:1/t?pin=1234", is_secret=lambda key: key == "pin") == "kafka://h:1/t?pin=***"


def test_masked_text_masks_every_url_in_a_message():
    text = f"Login failed on 'ftp://bob:{SECRET}@h/o' and hdfs://nn/x; see sc://h:1/;token={SECRET}"
    assert masked_text(text) == "Login failed on 'ftp://***@h/o' and hdfs://nn/x; see sc://h:1/;token=***"
    # in quotes (a repr), the closing quote and what follows stay as they are
    assert masked_text(f"(got 'local[2]' and 'sc://h:1/;token={SECRET}')") == "(got 'local[2]' and 'sc://h:1/;token=***')"


def test_masks_errors_masks_the_urls_in_a_value_error_and_drops_its_cause():
    @masks_errors
    def check(location: str) -> None:
        raise ValueError(f"output {location} is not empty") from KeyError(location)

    with pytest.raises(ValueError) as info:
        check(f"ftp://u:{SECRET}@h/o")
    assert str(info.value) == "output ftp://***@h/o is not empty"
    assert info.value.__cause__ is None and info.value.__suppress_context__  # the cause quoted it whole


def test_masks_errors_leaves_other_errors_alone():
    @masks_errors
    def check() -> None:
        raise ValueError("no URL here")

    with pytest.raises(ValueError, match=r"^no URL here$"):
        check()


def test_shown_location_masks_a_uri_and_leaves_a_path():
    from pathlib import Path

    assert shown_location(f"ftp://u:{SECRET}@h/o") == "ftp://***@h/o"
    assert shown_location(Path("/data/a:b@c")) == "/data/a:b@c"


@dataclass(frozen=True)
class _Located:
    where: str
    count: int
    options: dict[str, str] = field(default_factory=dict, repr=False)


def test_masked_repr_is_the_dataclass_repr_with_text_masked():
    item = _Located(f"ftp://u:{SECRET}@h/o", 3, {"k": SECRET})
    assert masked_repr(item) == "_Located(where='ftp://***@h/o', count=3)"
    assert masked_repr(item, options={"k": "***"}) == "_Located(where='ftp://***@h/o', count=3, options={'k': '***'})"
    plain = _Located("out", 1)
    assert masked_repr(plain) == repr(plain).replace("test_secrets._Located", "_Located")


def test_the_sensitive_keys_are_librdkafkas_and_any_secret_word():
    """The table is checked against the installed librdkafka in tests/test_secrets_librdkafka.py."""
    assert _secrets.SECRET_KEYS is LIBRDKAFKA_SENSITIVE
    for key in ("ssl.key.pem", "sasl.oauthbearer.config", "ssl.key.password", "ssl.keystore.password",
                "sasl.password", "sasl.oauthbearer.client.secret", "sasl.username", "ssl.ca.pem",
                "ssl.key.location", "sasl.oauthbearer.assertion.private.key.pem"):
        assert key in LIBRDKAFKA_SENSITIVE and is_secret_key(key), key
    for key in ("ssl.truststore.password", "sasl.jaas.config", "my.api.token", "Client.SECRET", "SASL.PASSWORD"):
        assert is_secret_key(key), key
    for key in ("client.id", "ssl.certificate.pem", "ssl.ca.location", "bootstrap.servers"):
        assert not is_secret_key(key), key


def test_the_secret_key_rule_is_the_one_produce_uses():
    from rebalancer.produce import config, security

    assert security.SECRET_KEYS is _secrets.SECRET_KEYS  # one list, not two kept in step by hand
    assert config.SECRET_KEY_WORDS is _secrets.SECRET_KEY_WORDS
    for key in ("sasl.password", "ssl.keystore.password", "sasl.oauthbearer.client.secret", "client.id", "ssl.key.pem"):
        assert config.is_secret_key(key) == is_secret_key(key)


@pytest.mark.parametrize(
    ("argument", "shown"),
    [
        (f"spark.hadoop.fs.s3a.secret.key={SECRET} and more", "spark.hadoop.fs.s3a.secret.key=***"),
        (f"-Djavax.net.ssl.trustStorePassword={SECRET}", "-Djavax.net.ssl.trustStorePassword=***"),
        # a JVM options value: each word judged, the others shown
        (f"spark.driver.extraJavaOptions=-Da=1 -Dx.password={SECRET} -Db=2",
         "spark.driver.extraJavaOptions=-Da=1 -Dx.password=*** -Db=2"),
        (f"spark.driver.extraJavaOptions=-Dx.password={SECRET}", "spark.driver.extraJavaOptions=-Dx.password=***"),
        (f"spark.jars.repositories=https://u:{SECRET}@h/m", "spark.jars.repositories=https://***@h/m"),
        ("spark.master=local[2]", "spark.master=local[2]"),
        ("-Dlog4j2.configurationFile=file:///a/b.properties", "-Dlog4j2.configurationFile=file:///a/b.properties"),
        ("--conf", "--conf"),
    ],
)  # fmt: skip
def test_masked_argument_hides_a_secrets_value_on_a_command_line(argument, shown):
    assert _secrets.masked_argument(argument) == shown
