"""How a client reaches registries and brokers: TLS and the ACL account, as one record.

Every client class (`ClientInstance`, `Producer`, `PullConsumer`, `PushConsumer`, `Admin`)
takes these settings as one ``options=ConnectionOptions(...)`` or, as before, as the seven
keywords of the same names; giving both is a TypeError, since which should win is a guess.

    options = ConnectionOptions(tls_ca_file="ca.pem", access_key="rocketmq2",
                                secret_key="12345678")
    async with Producer("PG", namesrv_addr="broker.example:9876", options=options) as p:
        ...
"""

from __future__ import annotations

import attrs

from protocol.acl import SessionCredentials

__all__ = ["ConnectionOptions", "connection_options"]


@attrs.frozen
class ConnectionOptions:
    """TLS and ACL settings of a client's connections (docs/client.md, docs/security.md)."""

    #: Dial ``host:port`` peers with TLS; None means "when a CA file or certificate is given".
    tls: bool | None = None
    #: PEM file of the CAs that TLS and ``wss://`` peers are verified against.
    tls_ca_file: str | None = None
    #: The certificate (and its key) shown to listeners that require one
    #: (tlsServerNeedClientAuth).
    tls_cert_file: str = ""
    tls_key_file: str = ""
    #: An ACL account; every request is then signed with it.
    access_key: str | None = None
    secret_key: str | None = attrs.field(default=None, repr=False)
    security_token: str | None = attrs.field(default=None, repr=False)

    def credentials(self) -> SessionCredentials | None:
        """The ACL credentials requests are signed with; None without an access key."""
        return SessionCredentials.from_options(
            self.access_key, self.secret_key, self.security_token
        )


def connection_options(
    options: ConnectionOptions | None, keywords: ConnectionOptions
) -> ConnectionOptions:
    """``options`` when given, else the record the seven separate keywords built.

    Raises TypeError when both are given (any keyword differing from its default).
    """
    if options is None:
        return keywords
    if keywords != ConnectionOptions():
        given = [
            field.name
            for field in attrs.fields(ConnectionOptions)
            if getattr(keywords, field.name) != field.default
        ]
        raise TypeError(
            f"give either options= or {', '.join(given)}, not both "
            "(set them on the ConnectionOptions record)"
        )
    return options
