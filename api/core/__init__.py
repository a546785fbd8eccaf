"""The broker core: topics, partition writers (single writer per partition, group commit),
fetch, leadership, producers and consumer groups, over the partition logs of one storage root.

It knows neither HTTP nor the Kafka protocol: each front-end (api/http, api/kafka) translates its
own wire format and errors to and from the core's value types (api/core/records.py) and error
tree (api/core/errors.py). The import contract in pyproject.toml checks that it imports neither.
"""
