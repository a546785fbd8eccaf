"""What every client command of `lakelog` shares: the gateway's address, an HTTP client that
presents the API key and TLS settings, and one-line errors."""

from __future__ import annotations

import argparse
import os

import httpx

DEFAULT_BOOTSTRAP = "http://127.0.0.1:8082"
API_KEY_ENV = "LAKELOG_API_KEY"


class CliError(Exception):
    """A failure to report in one line, without a traceback."""


def bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=os.environ.get("LAKELOG_BOOTSTRAP_SERVER", DEFAULT_BOOTSTRAP),
        help="gateway URL (default: $LAKELOG_BOOTSTRAP_SERVER or %(default)s)",
    )


def gateway_client(args) -> httpx.Client:
    # With authentication on (LAKELOG_AUTH=api-keys), the client commands present the key in
    # LAKELOG_API_KEY (`<key_id>.<secret>`, as `lakelog api-keys create` prints it).
    # With TLS, the server is verified against LAKELOG_TLS_CA_FILE (else the system's CAs) and
    # LAKELOG_TLS_CERT_FILE/KEY_FILE, if set, are presented as the client certificate.
    from api.core import node_tls
    from conf.settings import load_settings

    api_key = os.environ.get(API_KEY_ENV)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    return httpx.Client(
        base_url=args.bootstrap_server.rstrip("/"),
        timeout=60.0,
        headers=headers,
        verify=node_tls.client_verify(load_settings()),
    )


def call(client: httpx.Client, method: str, path: str, **kwargs) -> httpx.Response:
    """The response of a request that must succeed (CliError with the gateway's message)."""
    response = request_any(client, method, path, **kwargs)
    if response.status_code >= 400:
        raise CliError(error_text(response))
    return response


def request_any(client: httpx.Client, method: str, path: str, **kwargs) -> httpx.Response:
    """The response, whatever its status; CliError only when the gateway cannot be reached."""
    try:
        return client.request(method, path, **kwargs)
    except httpx.TransportError as error:
        raise CliError(
            f"cannot reach the gateway at {client.base_url} ({error}); is `lakelog serve` "
            f"running, or is --bootstrap-server wrong?"
        ) from None


def error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
        return f"{body['message']} (error {body['error_code']})"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {response.text[:200]}"


def cluster_path(client: httpx.Client, *parts: str) -> str:
    """A v3 path under this gateway's cluster."""
    clusters = call(client, "GET", "/v3/clusters").json()["data"]
    return "/".join([f"/v3/clusters/{clusters[0]['cluster_id']}", *parts])


def print_table(headers: tuple, rows: list[tuple]) -> None:
    """Left-aligned columns, as Kafka's tools print them."""
    cells = [[str(cell) for cell in row] for row in (headers, *rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
