"""The schema registry: Confluent Schema Registry's subjects, versions, ids, compatibility
levels and modes over `_meta/schemas` (storage_layout/meta/schemas.py)."""
