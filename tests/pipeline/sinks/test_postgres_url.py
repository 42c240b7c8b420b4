"""The sink's PostgreSQL URL: a password with any character is read back exactly or refused, and never shown.

A user or password holding an unencoded '/', '?', '#' or '@' moves where the URL's parts end, so
libpq would read part of the password as a host, a port or a database name, and echo it in its
errors. Such URLs are refused with one line that shows none of the user or password; a properly
percent-encoded password of any character is read back exactly.
"""

from __future__ import annotations

import string
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rebalancer.pipeline.sinks import PostgresSink

REBALANCER = Path(sys.executable).with_name("rebalancer")  # the installed console script
HINT = "percent-encode it (urllib.parse.quote(password, safe=''))"
RESERVED = (
    "sink postgresql://…: the URL's user or password holds a reserved character ('/', '?', '#' or '@'), "
    f"or its database name or parameters hold '@'; {HINT}"
)
SEVERAL_AT = f"sink postgresql://…: the URL's user or password holds '@'; {HINT}"
BAD_PERCENT = (
    "sink postgresql://***@db.example:5432/m: the URL's user or password holds '%' not followed by "
    f"two hex digits; {HINT}"
)
NUL = f"sink postgresql://***@db.example:5432/m: the URL's user or password holds %00; {HINT}"
NOT_UTF8 = f"sink postgresql://***@db.example:5432/m: the URL's user or password is not UTF-8 once percent-decoded; {HINT}"
SPACE = f"sink postgresql://…: the URL holds a space or control character; {HINT}"
UNREADABLE = (
    "sink postgresql://…: the URL's host part cannot be read (an unmatched '[' or ']', or a character "
    f"that reads as '/', '?', '#', '@' or ':' once normalized); {HINT}"
)
REFUSALS = {RESERVED, SEVERAL_AT, BAD_PERCENT, NUL, NOT_UTF8, SPACE, UNREADABLE}
DISPLAY = "postgresql://***@db.example:5432/m"  # the user too (finding F7b)
REPR = f"PostgresSink({DISPLAY!r}, schema='rebalancer')"

# Every printable ASCII character (the URL delimiters included), a few non-ASCII letters, and
# look-alikes that NFKC-normalize to '@', '/', '?', '#' and ':'.
password_chars = st.one_of(
    st.sampled_from(string.printable),
    st.sampled_from("äéß€中😀＠／？＃："),
    st.characters(min_codepoint=0xA0, max_codepoint=0x33FF, exclude_categories=("Cs",)),
)
passwords = st.text(alphabet=password_chars, min_size=1, max_size=24)


def _url(password: str) -> str:
    return f"postgresql://etl:{password}@db.example:5432/m"


def _messages(sink: PostgresSink, url: str) -> list[tuple[str, str]]:
    """(what libpq/psycopg could say, what the user must see): every form that echoes the connection string."""
    conninfo = sink._conninfo
    masked_conninfo = make_conninfo(conninfo, password="***")
    masked_url = "postgresql://***@db.example:5432/m"
    return [
        (
            f'end of string reached when looking for matching "]" in IPv6 host address in URI: "{url}"',
            f'end of string reached when looking for matching "]" in IPv6 host address in URI: "{masked_url}"',
        ),
        (f'invalid connection option in "{conninfo}"', f'invalid connection option in "{masked_conninfo}"'),
        (
            'connection to server at "db.example" (10.0.0.1), port 5432 failed: FATAL:  password '
            'authentication failed for user "etl"',
            'connection to server at "db.example" (10.0.0.1), port 5432 failed: FATAL:  password '
            'authentication failed for user "etl"',
        ),
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(password=passwords)
@example(password="p")
@example(password="Xq7/TOPSECRET")
@example(password="Xq7@TOPSECRET")
@example(password="Xq7%TOPSECRET")
@example(password="a' b\\c")
def test_an_encoded_password_of_any_character_is_read_back_exactly_and_never_shown(password: str):
    url = _url(quote(password, safe=""))
    sink = PostgresSink(url)
    assert conninfo_to_dict(sink._conninfo)["password"] == password
    assert repr(sink) == REPR and str(sink) == REPR and sink.display_url == DISPLAY
    for said, shown in _messages(sink, url):
        assert sink.redact(said) == shown


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(password=passwords)
@example(password="p")
@example(password="Xq7/TOPSECRET")
@example(password="Xq7@TOPSECRET")
@example(password="Xq7%TOPSECRET")
@example(password="Xq7%ZZTOPSECRET")
@example(password="a?b@c")
@example(password="a#b")
@example(password="a%00b")
@example(password="%FF")
@example(password="a b")
@example(password="a[b")
@example(password="＠x")
def test_a_raw_password_is_read_as_a_url_reader_does_or_refused_in_one_line_without_it(password: str):
    url = _url(password)
    try:
        sink = PostgresSink(url)
    except ValueError as exc:
        message = str(exc)
        assert message in REFUSALS, message  # the whole text: no character of the password can be in it
        return
    # Accepted: what the URL standard reads (a raw "%41" is "A"), and libpq reads the same.
    assert conninfo_to_dict(sink._conninfo)["password"] == unquote(password, errors="strict")
    assert repr(sink) == REPR and str(sink) == REPR
    for said, shown in _messages(sink, url):
        assert sink.redact(said) == shown


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://etl:Xq7/TOPSECRET@db.example:5432/m", RESERVED),
        ("postgresql://etl:Xq7@TOPSECRET@db.example:5432/m", SEVERAL_AT),
        ("postgresql://etl:Xq7%TOPSECRET@db.example:5432/m", BAD_PERCENT),
        ("postgresql://etl:Xq7?TOP@SECRET@db.example:5432/m", RESERVED),
        ("postgresql://etl:Xq7%00TOPSECRET@db.example:5432/m", NUL),
        ("postgresql://etl:Xq7%FFTOPSECRET@db.example:5432/m", NOT_UTF8),
        ("postgresql://etl:Xq7 TOPSECRET@db.example:5432/m", SPACE),
        ("postgresql://etl:Xq7[TOPSECRET@db.example:5432/m", UNREADABLE),
    ],
)
def test_the_issues_urls_are_refused_with_one_line_naming_the_fix(url: str, message: str):
    with pytest.raises(ValueError) as error:
        PostgresSink(url)
    assert str(error.value) == message


def test_masking_is_by_structure_so_a_short_password_leaves_ordinary_text_alone():
    sink = PostgresSink("postgresql://u:p@127.0.0.1:9/db")
    assert sink.redact("port 9 failed") == "port 9 failed"
    assert sink.redact("password=p and password = 'a\\' b' then sslpassword=x") == (
        "password=*** and password = *** then sslpassword=***"
    )
    assert sink.redact("see postgresql://other:pw@elsewhere/db") == "see postgresql://***@elsewhere/db"
    query = PostgresSink("postgresql://u@127.0.0.1:9/db?password=zz")
    assert query.redact("in postgresql://u@127.0.0.1:9/db?password=zz") == "in postgresql://***@127.0.0.1:9/db?password=***"


@pytest.mark.parametrize("password", ["p", "port", "127.0.0.1", "%/@:?# x"])
def test_a_refused_connection_names_the_server_and_not_the_password(password: str):
    sink = PostgresSink(f"postgresql://u:{quote(password, safe='')}@127.0.0.1:1/db")
    with pytest.raises(ValueError) as error:
        sink.check()
    assert str(error.value) == (
        'sink postgresql://***@127.0.0.1:1/db: cannot connect: connection failed: connection to server at '
        '"127.0.0.1", port 1 failed: Connection refused'
    )


def test_the_cli_refuses_an_unencoded_percent_in_one_line_before_spark(dataset, tmp_path):
    input_dir, _ = dataset
    result = subprocess.run(
        [str(REBALANCER), "pipeline", "run", "--input", str(input_dir), "--output",
         str(tmp_path / "out"), "--sink", "postgresql://u:Xq7%ZZTOPSECRET@127.0.0.1:1/db"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "rebalancer: error: sink postgresql://***@127.0.0.1:1/db: the URL's user or password holds '%' not "
        f"followed by two hex digits; {HINT}"
    ]
    assert "ZZTOP" not in result.stdout + result.stderr and not (tmp_path / "out").exists()
