"""Issue 33 follow-up: `rebalancer._secrets`, the one rule for which keys hold secrets and how a URL
is shown without them, shared by `produce` (its config errors) and `pipeline` (input URLs)."""

from __future__ import annotations

import pytest

from rebalancer import _secrets
from rebalancer._secrets import is_secret_key, masked_url

SECRET = "S3CRET"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("kafka://h:1/t", "kafka://h:1/t"),
        (f"kafka://h:1/t?a=1&kafka.sasl.password={SECRET}&b", "kafka://h:1/t?a=1&kafka.sasl.password=***&b"),
        # parse_qsl decodes the key: an encoded secret key is the same key
        (f"kafka://h:1/t?kafka.sasl.%70assword={SECRET}", "kafka://h:1/t?kafka.sasl.%70assword=***"),
        (f"kafka://h:1/t?kafka.sasl+password={SECRET}", "kafka://h:1/t?kafka.sasl+password=***"),
        # a fragment may be the rest of an unencoded password: it goes with the value
        (f"kafka://h:1/t?kafka.sasl.password={SECRET}#{SECRET}&x=1", "kafka://h:1/t?kafka.sasl.password=***&x=1"),
        (f"ftp://u:{SECRET}@h/p", "ftp://u:***@h/p"),
        (f"ftp://u:a/{SECRET}@h/p", "ftp://u:***@h/p"),  # a '/' in the password: hidden up to the last '@'
        (f"ftp://u:a@{SECRET}@h/p", "ftp://u:***@h/p"),
        ("hdfs://u@nn/p", "hdfs://u@nn/p"),  # a user without a password is no secret
        ("hdfs://nn/data/x@y", "hdfs://nn/data/x@y"),  # nor is an '@' in a path
    ],
)
def test_masked_url_hides_secret_values_by_structure(text, shown):
    assert masked_url(text) == shown


def test_masked_url_takes_the_callers_rule_for_keys():
    assert masked_url("kafka://h:1/t?pin=1234", is_secret=lambda key: key == "pin") == "kafka://h:1/t?pin=***"


def test_the_secret_key_rule_is_the_one_produce_uses():
    from rebalancer.produce import config, security

    assert security.SECRET_KEYS is _secrets.SECRET_KEYS  # one list, not two kept in step by hand
    assert config.SECRET_KEY_WORDS is _secrets.SECRET_KEY_WORDS
    for key in ("sasl.password", "ssl.keystore.password", "sasl.oauthbearer.client.secret", "client.id"):
        assert config.is_secret_key(key) == is_secret_key(key)
