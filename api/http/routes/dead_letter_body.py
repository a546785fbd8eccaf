"""The HTTP shape of a dead letter report, shared by the native group API
(`POST /groups/{group}/dead-letters`) and the v2 consumer instances
(`POST /consumers/{group}/instances/{instance}/dead-letters`)."""

from __future__ import annotations

from fastapi import Request
from pydantic import BaseModel, Field

from api.core.broker import Broker
from api.core.groups.dead_letters import ERROR_BYTES_MAX, DeadLetterAck, DeadLetterReport
from api.http import access
from api.http.wire import INT32_MAX, INT64_MAX
from api.security.authorizer import CLUSTER_RESOURCE_NAME
from storage_layout.errors import TopicNotFound
from storage_layout.records import TopicPartition


class DeadLetterBody(BaseModel):
    topic: str = Field(description="The topic of the record the consumer gave up on")
    partition: int = Field(ge=0, le=INT32_MAX)
    offset: int = Field(ge=0, le=INT64_MAX, description="The record's offset")
    error: str = Field(min_length=1, max_length=ERROR_BYTES_MAX, description="Why it failed")
    attempts: int = Field(1, ge=1, le=INT32_MAX, description="How often it was tried")
    dead_letter_topic: str | None = Field(None, description="Default: `<topic>.dlq`")

    def report(self) -> DeadLetterReport:
        return DeadLetterReport(
            TopicPartition(self.topic, self.partition),
            self.offset,
            self.error,
            self.attempts,
            self.dead_letter_topic or None,
        )


async def authorize(request: Request, broker: Broker, report: DeadLetterReport) -> None:
    """READ on the source topic and WRITE on the dead letter topic (Kafka's Fetch and Produce);
    CREATE too when the dead letter topic does not exist yet, as for any topic creation."""
    if not access.acls_enabled(request):
        return
    access.require_topics(request, "READ", [report.source.topic])
    target = report.target_topic
    access.require_topics(request, "WRITE", [target])
    try:
        await broker.topics.get(target)
    except TopicNotFound:
        access.require_any(
            request, [("CREATE", "cluster", CLUSTER_RESOURCE_NAME), ("CREATE", "topic", target)]
        )


def ack_body(ack: DeadLetterAck) -> dict:
    return {
        "dead_letter_topic": ack.dead_letter_topic,
        "partition": ack.partition,
        "offset": ack.offset,
        "committed_offset": ack.committed_offset,
    }
