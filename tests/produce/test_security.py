"""TLS and SASL settings: librdkafka's names mapped onto aiokafka's, consistency checks, no leaked secrets."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import shutil
import ssl
import subprocess

import pytest
from aiokafka.errors import KafkaConnectionError

from rebalancer.produce import BatchingProducer
from rebalancer.produce.security import SecuritySettings
from rebalancer.testing import MockKafkaCluster

SECRET = "hunter2-do-not-print"
KEY_SECRET = "key-pass-do-not-print"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A self-signed CA/client certificate, its plain key and the same key encrypted with KEY_SECRET."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    root = tmp_path_factory.mktemp("pki")
    cert, key, enc = root / "client.pem", root / "client.key", root / "client-enc.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", "/CN=rebalancer-test"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-out", str(enc), "-aes256", "-passout", f"pass:{KEY_SECRET}"],
        check=True,
        capture_output=True,
    )
    return {"cert": str(cert), "key": str(key), "enc": str(enc), "dir": str(root)}


def test_default_is_plaintext_and_protocol_is_case_insensitive():
    assert SecuritySettings.from_dict({}).client_kwargs() == {"security_protocol": "PLAINTEXT"}
    assert SecuritySettings.from_dict({"security.protocol": "sasl_plaintext", "sasl.mechanism": "plain",
                                       "sasl.username": "u", "sasl.password": SECRET}).client_kwargs() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "u",
        "sasl_plain_password": SECRET,
    }


def test_sasl_ssl_scram_maps_onto_aiokafka_with_a_verifying_context(pki):
    settings = SecuritySettings.from_dict(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "etl",
            "sasl.password": SECRET,
            "ssl.ca.location": pki["cert"],
            "ssl.certificate.location": pki["cert"],
            "ssl.key.location": pki["enc"],
            "ssl.key.password": KEY_SECRET,
        }
    )
    kwargs = settings.client_kwargs()
    context = kwargs.pop("ssl_context")
    assert kwargs == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                      "sasl_plain_username": "etl", "sasl_plain_password": SECRET}  # fmt: skip
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert len(context.get_ca_certs()) == 1  # our CA, loaded from ssl.ca.location


def test_verification_off_and_system_cas(pki):
    settings = SecuritySettings.from_dict(
        {"security.protocol": "SSL", "enable.ssl.certificate.verification": "false",
         "ssl.certificate.location": pki["cert"], "ssl.key.location": pki["key"]}
    )
    context = settings.client_kwargs()["ssl_context"]
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"security.protocol": "SASL_SSL"}, r"security.protocol SASL_SSL needs sasl.mechanism"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.password": SECRET},
         r"sasl.mechanism PLAIN needs sasl.username$"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI", "sasl.username": "u",
          "sasl.password": SECRET}, "sasl.mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; got 'GSSAPI'"),
        ({"sasl.username": "u", "sasl.password": SECRET},
         "sasl.username, sasl.password need security.protocol SASL_PLAINTEXT or SASL_SSL, got PLAINTEXT"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
          "sasl.password": SECRET, "ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt"},
         "ssl.ca.location needs security.protocol SSL or SASL_SSL, got SASL_PLAINTEXT"),
        ({"security.protocol": "SSL", "ssl.certificate.location": "/etc/ssl/certs/ca-certificates.crt",
          "ssl.key.location": f"/nonexistent/{KEY_SECRET}.key"},
         "^ssl.key.location <str, hidden> does not exist or is not a file$"),
        ({"security.protocol": "SSL", "ssl.key.password": KEY_SECRET}, "ssl.key.password needs ssl.key.location"),
        ({"security.protocol": "TLS"}, "security.protocol must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; got 'TLS'"),
        ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "sometimes"},
         "enable.ssl.certificate.verification must be true or false, got 'sometimes'"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": 12345},
         "^sasl.password must be a non-empty string, got <int, hidden>$"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": 12345, "sasl.password": SECRET},
         "^sasl.username must be a non-empty string, got <int, hidden>$"),
    ],
)  # fmt: skip
def test_inconsistent_combinations_raise_naming_the_keys_never_the_secret(config, message):
    with pytest.raises(ValueError, match=message) as info:
        BatchingProducer({"bootstrap.servers": "x:1", **config})
    assert SECRET not in str(info.value) and KEY_SECRET not in str(info.value) and "12345" not in str(info.value)


def test_wrong_key_password_raises_without_echoing_it(pki):
    settings = SecuritySettings.from_dict(
        {"security.protocol": "SSL", "ssl.certificate.location": pki["cert"], "ssl.key.location": pki["enc"],
         "ssl.key.password": "wrong-" + KEY_SECRET}
    )
    with pytest.raises(ValueError, match="could not be loaded") as info:
        settings.client_kwargs()
    assert KEY_SECRET not in str(info.value)


def test_secrets_stay_out_of_repr_and_stats(pki):
    config = {"bootstrap.servers": "x:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
              "sasl.username": "etl", "sasl.password": SECRET, "ssl.certificate.location": pki["cert"],
              "ssl.key.location": pki["enc"], "ssl.key.password": KEY_SECRET}  # fmt: skip
    producer = BatchingProducer(config)
    text = repr(producer) + repr(producer.security) + str(producer.stats())
    assert "security.protocol=SASL_SSL sasl.mechanism=SCRAM-SHA-256" in repr(producer)
    assert SECRET not in text and KEY_SECRET not in text


@pytest.mark.kafka
def test_mock_cluster_accepts_plaintext_only_and_a_sasl_failure_leaks_no_secret(caplog):
    # librdkafka's mock brokers do not list SaslHandshake (17) or SaslAuthenticate (36) in their
    # ApiVersions, whatever SASL settings their handle has: SASL clients cannot log in there.
    with MockKafkaCluster(brokers=1) as cluster:
        cluster.create_topic("sec", partitions=1)

        async def main():
            async with BatchingProducer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "security.protocol": "plaintext"}) as plain:  # fmt: skip
                offset = await (await plain.send("sec", b"x", partition=0))
            sasl = BatchingProducer(
                {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                 "sasl.mechanism": "PLAIN", "sasl.username": "etl", "sasl.password": SECRET,
                 "request.timeout.ms": 3000}
            )
            with pytest.raises(KafkaConnectionError) as info:
                await sasl.start()
            return offset, info.value, sasl

        with caplog.at_level(logging.DEBUG):
            offset, error, sasl = asyncio.run(asyncio.wait_for(main(), 30))
    assert offset == (0, 0)
    assert "Unable to bootstrap" in str(error)
    everything = str(error) + repr(error.__cause__) + repr(sasl) + "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET not in everything
    assert any("SaslHandShakeRequest" in r.getMessage() for r in caplog.records)  # it failed at the handshake


def test_key_files_must_exist(tmp_path: pathlib.Path):
    with pytest.raises(ValueError, match=r"ssl.ca.location '.*missing.pem' does not exist or is not a file"):
        SecuritySettings.from_dict({"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "missing.pem")})


def test_a_ca_file_that_is_not_pem_is_named_as_ssl_ca_location(tmp_path: pathlib.Path, pki):
    bad = tmp_path / "ca.txt"
    bad.write_text("not a certificate\n")
    settings = SecuritySettings.from_dict({"security.protocol": "SSL", "ssl.ca.location": str(bad)})
    with pytest.raises(ValueError) as info:
        settings.client_kwargs()
    assert str(info.value) == (
        f"ssl.ca.location {str(bad)!r} could not be loaded (not a PEM file of CA certificates): "
        "SSLError NO_CERTIFICATE_OR_CRL_FOUND"
    )
    # A good CA with a bad client certificate names the certificate, and only the keys that are set.
    with_cert = SecuritySettings.from_dict(
        {"security.protocol": "SSL", "ssl.ca.location": pki["cert"], "ssl.certificate.location": str(bad)}
    )
    with pytest.raises(ValueError) as info:
        with_cert.client_kwargs()
    assert str(info.value) == (
        f"ssl.certificate.location {str(bad)!r} could not be loaded (not a PEM certificate and key; "
        "an encrypted key needs ssl.key.password): SSLError"
    )


def test_a_wrong_key_password_names_the_certificate_key_and_password_keys(pki):
    settings = SecuritySettings.from_dict(
        {"security.protocol": "SSL", "ssl.certificate.location": pki["cert"], "ssl.key.location": pki["enc"],
         "ssl.key.password": "wrong-" + KEY_SECRET}
    )
    with pytest.raises(ValueError) as info:
        settings.client_kwargs()
    assert str(info.value) == (
        f"ssl.certificate.location {pki['cert']!r} and ssl.key.location <str, hidden> could not be loaded "
        "(wrong ssl.key.password, or not a PEM certificate and key): SSLError"
    )
    assert pki["enc"] not in str(info.value)  # librdkafka flags the key's path sensitive


def test_a_missing_key_file_is_named_by_its_key_never_its_path(tmp_path: pathlib.Path):
    """Finding F7: the error echoed ssl.key.location's value, a key librdkafka flags sensitive."""
    missing = str(tmp_path / f"{KEY_SECRET}.key")
    with pytest.raises(ValueError) as info:
        BatchingProducer({"bootstrap.servers": "x:1", "security.protocol": "SSL", "ssl.key.location": missing,
                          "ssl.certificate.location": "/etc/ssl/certs/ca-certificates.crt"})
    assert str(info.value) == "ssl.key.location <str, hidden> does not exist or is not a file"
    assert KEY_SECRET not in str(info.value) and missing not in repr(info.value)
