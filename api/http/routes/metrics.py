"""`GET /metrics`: this node's metrics in Prometheus' text format (api/core/metrics.py). With
security on it needs DESCRIBE on the cluster, like the other operator views."""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from api.core.metrics import REGISTRY

router = APIRouter(tags=["metrics"])


@router.get("/metrics", summary="Prometheus metrics of this node", response_class=Response)
async def prometheus_metrics() -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
