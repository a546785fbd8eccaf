"""The Kafka listener: an asyncio server speaking Kafka's binary protocol over TCP.

Framing: a request is an int32 size and that many bytes; a size below 0 or above
`kafka_request_bytes_max` (Kafka's socket.request.max.bytes) closes the connection unread, and
so does a frame that does not arrive within `kafka_frame_timeout_ms`. Requests of one
connection are answered in order; unlike Kafka's broker, which mutes a connection until its
response is sent, many of them run at once (IN_FLIGHT_MAX, IN_FLIGHT_BYTES_MAX), so a client's
pipelined produce requests join one Delta commit instead of waiting for one commit each; a
producer's batches keep their order per partition (a partition's first produce, which takes it,
holds up only that partition's later batches). A request the node cannot parse, of an unknown
API or an unsupported version, closes the connection (Kafka's behaviour), except ApiVersions,
which answers UNSUPPORTED_VERSION with the supported ranges so the client can downgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
import time

from api.core import metrics
from api.core.broker import Broker
from api.kafka import messages
from api.kafka.connection import Connection
from api.kafka.fetch_sessions import FetchSessions
from api.kafka.handlers import APIS, api_versions_unsupported
from api.kafka.messages import MalformedRequest
from api.kafka.share_sessions import ShareSessions
from api.security.state import SecurityState
from conf.settings import Settings

log = logging.getLogger("lakelog.kafka")

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})
PRODUCE_KEY = 0
# Requests the next one must wait for: a produce until its batches hold their partitions' turns
# (the next produce) or are queued (anything else), SASL until it is done (the next request
# depends on who authenticated).
ORDERED_APIS = frozenset({PRODUCE_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})
# Requests of one connection started and not yet answered: at most this many, and this many
# bytes of them (a larger request runs alone). Bytes, not a small count, bound the memory:
# librdkafka sends one partition per request, and a topic's commit interval
# (delta.commit.interval.ms) keeps each waiting, so a producer to many partitions needs many
# small requests in flight (32 of them let 100 partitions at 2 records/s each through at half
# that rate).
IN_FLIGHT_MAX = 1024
IN_FLIGHT_BYTES_MAX = 64 * 1024 * 1024
_SIZE = struct.Struct(">i")


class InFlightBytes:
    """The bytes of a connection's requests started and not yet answered, bounded: a request
    waits for room unless nothing is in flight."""

    def __init__(self, bytes_max: int) -> None:
        self._bytes_max = bytes_max
        self._bytes = 0
        self._released = asyncio.Event()

    async def acquire(self, size: int) -> None:
        while self._bytes and self._bytes + size > self._bytes_max:
            self._released.clear()
            await self._released.wait()
        self._bytes += size

    def release(self, size: int) -> None:
        self._bytes -= size
        self._released.set()


def _api_key(frame: bytes) -> int | None:
    """The request's API key (None when the frame is too short: its handling says why)."""
    try:
        return messages.peek_header(frame)[0]
    except MalformedRequest:
        return None


class ProtocolViolation(Exception):
    """The client broke the framing or sent what no handler takes: close the connection."""


class KafkaListener:
    """The Kafka front-end: serves the Kafka protocol on a node's started broker."""

    def __init__(self, security: SecurityState, settings: Settings) -> None:
        self._broker: Broker | None = None
        self._security = security
        self._settings = settings
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self._fetch_sessions = FetchSessions()
        self._share_sessions = ShareSessions()

    async def start(self, broker: Broker) -> None:
        self._broker = broker
        settings = self._settings
        self._server = await asyncio.start_server(
            self._serve, host=settings.host, port=settings.kafka_port, ssl=_tls_context(settings)
        )
        log.info(
            "Kafka listener on %s:%s (%s)", settings.host, settings.kafka_port, _protocol(settings)
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else "*"
        connection = Connection(
            self._broker,
            self._security,
            self._settings,
            host,
            self._fetch_sessions,
            self._share_sessions,
        )
        answers: asyncio.Queue = asyncio.Queue(IN_FLIGHT_MAX)
        sender = asyncio.ensure_future(self._send_in_order(answers, writer, connection, peer))
        closing = False
        try:
            await self._read_requests(reader, connection, answers, sender)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away or stalled mid-frame
        except ProtocolViolation as violation:
            log.info("closing Kafka connection from %s: %s", peer, violation)
        except asyncio.CancelledError:
            closing = True  # the listener is closing: drop what is in flight, quietly
        finally:
            if closing:
                _abandon(answers, sender)
            else:
                await _finish(answers, sender)
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_requests(self, reader, connection: Connection, answers, sender) -> None:
        """Start each request as its frame arrives, without waiting for the answer before: a
        client's pipelined produce requests then share one group commit. A produce starts
        once the produce before it has reserved its batches' turns (each partition's batches
        keep their order: PartitionTurns); any other request once every request before it is
        admitted (a produce: its records are queued at their partitions' writers)."""
        unadmitted: list[asyncio.Event] = []
        in_flight = InFlightBytes(IN_FLIGHT_BYTES_MAX)
        while not sender.done():
            frame = await self._read_frame(reader)
            if frame is None:
                return
            if _api_key(frame) != PRODUCE_KEY:
                for event in unadmitted:
                    await event.wait()
            await in_flight.acquire(len(frame))
            admitted, reserved = asyncio.Event(), asyncio.Event()
            answer = asyncio.ensure_future(self._answer(connection, frame, admitted, reserved))
            answer.add_done_callback(lambda _, size=len(frame): in_flight.release(size))
            await answers.put(answer)
            await reserved.wait()
            unadmitted = [e for e in (*unadmitted, admitted) if not e.is_set()]
            if answer.done() and not answer.cancelled() and answer.exception() is not None:
                return  # the sender reports it and closes the connection

    async def _send_in_order(self, answers, writer, connection: Connection, peer) -> None:
        """Write the answers in request order, as Kafka's clients require."""
        while (answer := await answers.get()) is not None:
            try:
                response = await answer
            except ProtocolViolation as violation:
                log.info("closing Kafka connection from %s: %s", peer, violation)
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # a handler's bug must cost this connection, never the node
                log.exception("Kafka connection from %s failed", peer)
                return
            if response is not None:
                writer.write(response)
                await writer.drain()
            if connection.close_after_answer:
                return

    async def _read_frame(self, reader: asyncio.StreamReader) -> bytes | None:
        settings = self._settings
        # asyncio.timeout, not wait_for: wait_for wraps the read in a task of its own, 12 us
        # against 5 us, twice a request.
        try:
            async with asyncio.timeout(settings.kafka_idle_timeout_ms / 1000):
                head = await reader.readexactly(4)
        except asyncio.IncompleteReadError as error:
            if not error.partial:
                return None  # a clean close between requests
            raise
        (size,) = _SIZE.unpack(head)
        if size < 0 or size > settings.kafka_request_bytes_max:
            raise ProtocolViolation(
                f"a {size}-byte request is outside 0..{settings.kafka_request_bytes_max} "
                f"(LAKELOG_KAFKA_REQUEST_BYTES_MAX)"
            )
        async with asyncio.timeout(settings.kafka_frame_timeout_ms / 1000):
            return await reader.readexactly(size)

    async def _answer(
        self, connection: Connection, frame: bytes, admitted: asyncio.Event, reserved
    ) -> bytes | None:
        """The response frame (None: none is sent); `admitted` and `reserved` are set at the
        latest when this ends, however it ends, so the reader never waits on a request that
        failed early."""
        try:
            return await self._respond(connection, frame, admitted, reserved)
        finally:
            reserved.set()
            admitted.set()

    async def _respond(
        self, connection: Connection, frame: bytes, admitted: asyncio.Event, reserved
    ) -> bytes | None:
        try:
            api_key, version, correlation_id = messages.peek_header(frame)
        except MalformedRequest as error:
            raise ProtocolViolation(str(error)) from None
        api = APIS.get(api_key)
        if api is None:
            raise ProtocolViolation(f"unknown API key {api_key}")
        if not api.supports(version):
            if api_key == API_VERSIONS_KEY:
                body = api_versions_unsupported()
                return messages.response_frame(api_key, 0, correlation_id, body)
            raise ProtocolViolation(
                f"{api.name} v{version} is not supported (v{api.min_version}-v{api.max_version})"
            )
        if self._security.auth_enabled and not connection.authenticated:
            if api_key not in BEFORE_AUTHENTICATION:
                raise ProtocolViolation(
                    f"{api.name} before SASL authentication: this listener needs SASL PLAIN "
                    "with an API key (username = key id, password = secret) or SCRAM"
                )
        try:
            header, request = messages.read_request(frame, api_key, version)
        except MalformedRequest as error:
            raise ProtocolViolation(str(error)) from None
        connection.client_id = header.client_id
        if api_key == PRODUCE_KEY:  # the handler lets the next request start itself
            connection.reserve, connection.admit = reserved.set, admitted.set
        elif api_key not in ORDERED_APIS:  # SASL: the next request waits until it is done
            reserved.set()
            admitted.set()
        started = time.monotonic()
        body = await api.handler(connection, request, version)
        metrics.record_kafka_request(api.name, time.monotonic() - started)
        if body is None:
            return None  # acks=0
        return messages.response_frame(api_key, version, correlation_id, body)


def _tls_context(settings: Settings) -> ssl.SSLContext | None:
    """The HTTP listener's TLS settings, for Kafka's SSL / SASL_SSL (None: plaintext)."""
    if not settings.tls_enabled:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    if settings.tls_client_auth == "required":
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(settings.tls_ca_file)
    return context


def _protocol(settings: Settings) -> str:
    """Kafka's name for what a client sets as security.protocol to reach this listener."""
    tls = settings.tls_enabled
    if settings.auth != "none":
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"
    return "SSL" if tls else "PLAINTEXT"


def _abandon(answers: asyncio.Queue, sender: asyncio.Future) -> None:
    sender.cancel()
    while not answers.empty():
        pending = answers.get_nowait()
        if pending is not None:
            pending.cancel()


async def _finish(answers: asyncio.Queue, sender: asyncio.Future) -> None:
    """Let the sender write what was started (a client that closed gets nothing), then stop."""
    if sender.done():
        _abandon(answers, sender)
        return
    await answers.put(None)
    with contextlib.suppress(Exception):
        await sender
