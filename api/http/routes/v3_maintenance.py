"""A lakelog extension of the v3 API: the maintenance jobs this node runs (retention, key
compaction, file optimization, vacuum) and what their recent runs did, per partition."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Request

from api.http.deps import BrokerDep, base_url
from api.http.routes.v3_topics import check_cluster

router = APIRouter(prefix="/v3", tags=["v3 maintenance (lakelog)"])


@router.get(
    "/clusters/{cluster_id}/maintenance",
    summary="This node's scheduled maintenance, its recent runs and changes, newest first",
)
async def maintenance_runs(cluster_id: str, request: Request, broker: BrokerDep) -> dict:
    check_cluster(cluster_id, broker.settings)  # DESCRIBE on the cluster: api/security/rules
    scheduled = broker.scheduled_jobs
    runs = [] if scheduled is None else _newest_first(scheduled.recent)
    changes = [] if scheduled is None else _newest_first(scheduled.recent_changes)
    url = base_url(request, broker.settings)
    return {
        "kind": "LakelogMaintenance",
        "metadata": {"self": f"{url}/v3/clusters/{cluster_id}/maintenance"},
        "node_id": broker.settings.node_id,
        "enabled": scheduled is not None,
        "intervals_ms": broker.settings.maintenance_intervals_ms(),
        "runs": runs,
        # the runs that committed a change or failed (kept longer than `runs`)
        "changes": changes,
    }


def _newest_first(runs) -> list[dict]:
    return [dataclasses.asdict(run) for run in reversed(runs)]
