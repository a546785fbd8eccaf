"""Share groups (KIP-932): queue semantics over a topic's partitions."""
