"""TLS contexts for websocket listeners (``wss://``) and the clients that dial them."""

from __future__ import annotations

import ssl


class TlsConfigError(ValueError):
    """A certificate, key or CA file that cannot be used; the message says which and why."""


def server_ssl_context(cert_path: str, key_path: str) -> ssl.SSLContext | None:
    """A server context from PEM files, or None when no certificate is configured.

    Raises `TlsConfigError` naming the setting when one is missing or a file cannot be loaded.
    """
    if not cert_path and not key_path:
        return None
    if not cert_path or not key_path:
        missing = "websocketTlsCertPath" if not cert_path else "websocketTlsKeyPath"
        raise TlsConfigError(
            f"{missing} is not set: wss:// needs both websocketTlsCertPath and "
            "websocketTlsKeyPath (PEM files)"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(
            f"cannot load the websocket TLS certificate {cert_path} with key {key_path}: {exc}"
        ) from None
    return context


def client_ssl_context(ca_file: str | None = None) -> ssl.SSLContext:
    """A client context that verifies the server against ``ca_file`` (PEM) or the system CAs.

    Raises `TlsConfigError` when the CA file cannot be loaded.
    """
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the CA file {ca_file} for wss://: {exc}") from None
