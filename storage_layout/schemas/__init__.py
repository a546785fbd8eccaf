"""Schemas of record keys and values, as Confluent Schema Registry knows them: Avro, JSON Schema
and Protobuf parsed, put in a canonical form, checked for compatibility with each format's own
rules, and framed in Confluent's wire format. Pure rules, like the partitioner: the registry
(`storage_layout.meta.schemas`, `api.core.schema_registry`), the produce path and the Spark
writers all apply them."""
