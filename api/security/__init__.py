"""Authentication (API keys, node signatures), Kafka-style ACL authorization and byte-rate
quotas, shared by every front-end. See README "Security"; the HTTP route -> ACL table is
api/http/route_rules.py."""
