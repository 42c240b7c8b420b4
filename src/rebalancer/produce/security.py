"""TLS and SASL settings under librdkafka's names, mapped onto aiokafka's client arguments.

Secrets (`sasl.password`, `ssl.key.password`) never reach a log line, an error message, `repr` or
`stats()`: of every key librdkafka flags sensitive (the user name and the private key's path as
well) errors name the key and show its value as `<str, hidden>` (`parsing.shown_setting`), and
`SecuritySettings.__repr__` leaves them out.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiokafka.helpers import create_ssl_context

from rebalancer.produce.parsing import SECRET_KEYS, parse_bool, shown_setting

__all__ = ["PROTOCOLS", "SASL_MECHANISMS", "SECRET_KEYS", "SECURITY_KEYS", "SecuritySettings"]

PROTOCOLS: tuple[str, ...] = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_SASL_KEYS = ("sasl.mechanism", "sasl.username", "sasl.password")
_SSL_FILES = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")
_SSL_KEYS = (*_SSL_FILES, "ssl.key.password", "enable.ssl.certificate.verification")
SECURITY_KEYS: tuple[str, ...] = ("security.protocol", *_SASL_KEYS, *_SSL_KEYS)
# SECRET_KEYS (parsing.py, where every error reads it): the keys whose values are never shown.


def _text(config: Mapping[str, object], key: str) -> str | None:
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} must be a non-empty string, got {shown_setting(key, value)}")
    return value


def _needs(keys: list[str]) -> str:
    """The verb for `keys` as a subject: 'sasl.password needs', 'sasl.username, sasl.password need'."""
    return "needs" if len(keys) == 1 else "need"


def _reason(exc: BaseException) -> str:
    """The exception's type and OpenSSL's reason code (never its text, which could quote a file's content)."""
    reason = getattr(exc, "reason", None) if isinstance(exc, ssl.SSLError) else None
    return f"{type(exc).__name__} {reason}" if reason else type(exc).__name__


@dataclass(frozen=True)
class SecuritySettings:
    """The validated security keys; `client_kwargs()` gives aiokafka's arguments."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = field(default=None, repr=False)  # librdkafka flags it sensitive too
    sasl_password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = field(default=None, repr=False)  # librdkafka flags it sensitive
    key_password: str | None = field(default=None, repr=False)
    verify_certificates: bool = True

    @classmethod
    def from_dict(cls, config: Mapping[str, object]) -> SecuritySettings:
        """Validate; inconsistent combinations raise ValueError naming the keys (never a secret's value)."""
        raw_protocol = _text(config, "security.protocol") or "PLAINTEXT"
        protocol = raw_protocol.upper()  # librdkafka reads it case-insensitively
        if protocol not in PROTOCOLS:
            raise ValueError(f"security.protocol must be one of {', '.join(PROTOCOLS)}; got {raw_protocol!r}")
        sasl = protocol.startswith("SASL_")
        tls = protocol in ("SSL", "SASL_SSL")
        set_sasl = [k for k in _SASL_KEYS if config.get(k) is not None]
        set_ssl = [k for k in _SSL_KEYS if config.get(k) is not None]
        if set_sasl and not sasl:
            raise ValueError(
                f"{', '.join(set_sasl)} {_needs(set_sasl)} security.protocol SASL_PLAINTEXT or SASL_SSL, got {protocol}"
            )
        if set_ssl and not tls:
            raise ValueError(f"{', '.join(set_ssl)} {_needs(set_ssl)} security.protocol SSL or SASL_SSL, got {protocol}")
        mechanism = _text(config, "sasl.mechanism")
        username = _text(config, "sasl.username")
        password = _text(config, "sasl.password")
        if sasl:
            if mechanism is None:
                raise ValueError(
                    f"security.protocol {protocol} needs sasl.mechanism ({', '.join(SASL_MECHANISMS)})"
                )
            mechanism = mechanism.upper()
            if mechanism not in SASL_MECHANISMS:
                raise ValueError(
                    f"sasl.mechanism must be one of {', '.join(SASL_MECHANISMS)}; got {mechanism!r}"
                )
            missing = [k for k, v in (("sasl.username", username), ("sasl.password", password)) if v is None]
            if missing:
                raise ValueError(f"sasl.mechanism {mechanism} needs {' and '.join(missing)}")
        files = {key: _text(config, key) for key in _SSL_FILES}
        for key, path in files.items():
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"{key} {shown_setting(key, path)} does not exist or is not a file")
        key_password = _text(config, "ssl.key.password")
        if key_password is not None and files["ssl.key.location"] is None:
            raise ValueError("ssl.key.password needs ssl.key.location")
        if files["ssl.key.location"] is not None and files["ssl.certificate.location"] is None:
            raise ValueError("ssl.key.location needs ssl.certificate.location (the client certificate)")
        verify = config.get("enable.ssl.certificate.verification")
        return cls(
            protocol=protocol,
            sasl_mechanism=mechanism,
            sasl_username=username,
            sasl_password=password,
            ca_location=files["ssl.ca.location"],
            certificate_location=files["ssl.certificate.location"],
            key_location=files["ssl.key.location"],
            key_password=key_password,
            verify_certificates=True
            if verify is None
            else parse_bool("enable.ssl.certificate.verification", verify),
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client's TLS context (None without TLS); a bad key or certificate raises ValueError."""
        if self.protocol not in ("SSL", "SASL_SSL"):
            return None
        # The CA and the client certificate load in two steps, so an error names the keys actually
        # set for the file that failed (and the certificates' paths; the private key's is sensitive).
        try:
            context = create_ssl_context(cafile=self.ca_location)
        except (ssl.SSLError, OSError) as exc:
            where = (
                f"ssl.ca.location {shown_setting('ssl.ca.location', self.ca_location)}"
                if self.ca_location
                else "the system's CA certificates"
            )
            raise ValueError(
                f"{where} could not be loaded (not a PEM file of CA certificates): {_reason(exc)}"
            ) from None
        if self.certificate_location is not None:
            try:
                context.load_cert_chain(self.certificate_location, self.key_location, self.key_password)
            except (ssl.SSLError, OSError) as exc:
                files = f"ssl.certificate.location {shown_setting('ssl.certificate.location', self.certificate_location)}"
                if self.key_location is not None:
                    files += f" and ssl.key.location {shown_setting('ssl.key.location', self.key_location)}"
                why = (
                    "wrong ssl.key.password, or not a PEM certificate and key"
                    if self.key_password is not None
                    else "not a PEM certificate and key; an encrypted key needs ssl.key.password"
                )
                raise ValueError(f"{files} could not be loaded ({why}): {_reason(exc)}") from None
        if not self.verify_certificates:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def client_kwargs(self) -> dict[str, object]:
        """Keyword arguments for aiokafka's `AIOKafkaClient`."""
        kwargs: dict[str, object] = {"security_protocol": self.protocol}
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        if self.sasl_mechanism is not None:
            kwargs.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        return kwargs

    def describe(self) -> str:
        """For `repr` and logs: what is configured, with no secret."""
        parts = [f"security.protocol={self.protocol}"]
        if self.sasl_mechanism:
            parts.append(f"sasl.mechanism={self.sasl_mechanism}")
        if self.protocol in ("SSL", "SASL_SSL"):
            parts.append(f"ssl.certificate.verification={'on' if self.verify_certificates else 'off'}")
        return " ".join(parts)
