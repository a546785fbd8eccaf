"""TLS for the gateway: uvicorn's server options, and the client side (node to node, the CLI).

Python's ssl module does the work; this only turns settings into its arguments. A node presents
its own certificate when it calls another node, so the same files serve both directions and
`tls_client_auth=required` works between nodes without a second certificate.
"""

from __future__ import annotations

import ssl

from conf.settings import Settings


def server_options(settings: Settings) -> dict:
    """Keyword arguments for `uvicorn.run` (none without TLS)."""
    if not settings.tls_enabled:
        return {}
    required = settings.tls_client_auth == "required"
    return {
        "ssl_certfile": settings.tls_cert_file,
        "ssl_keyfile": settings.tls_key_file,
        "ssl_ca_certs": settings.tls_ca_file,
        "ssl_cert_reqs": ssl.CERT_REQUIRED if required else ssl.CERT_NONE,
    }
