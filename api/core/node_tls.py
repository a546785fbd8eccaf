"""How this node verifies the other nodes it calls (and presents its own certificate): the
TLS side of node-to-node requests, which the broker core makes itself."""

from __future__ import annotations

import ssl

from conf.settings import Settings


def client_verify(settings: Settings) -> ssl.SSLContext | bool:
    """httpx's `verify=`: the system's CAs (True) unless a CA file or client certificate is set."""
    if settings.tls_ca_file is None and settings.tls_cert_file is None:
        return True
    context = ssl.create_default_context(cafile=settings.tls_ca_file)
    if settings.tls_cert_file is not None:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    return context
