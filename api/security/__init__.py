"""Authentication (API keys, node signatures), Kafka-style ACL authorization and byte-rate
quotas for the gateway. See README "Security" and `rules.py` for the route -> ACL table."""
