"""The Kafka wire-protocol front-end: framing, the API handlers and the record-batch codec over
the broker core (api/core), beside the HTTP front-end (api/http), which it never imports."""
