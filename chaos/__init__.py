"""Fault-injection runs against real gateways, recorded as Jepsen-style histories and checked.

`chaos.history` records and loads histories, `chaos.checker` finds anomalies in them,
`chaos.clients` are the recorded HTTP clients and `chaos.scenarios` the fault scenarios
(T1, T3, T4 of the reliability plan). `python -m chaos run T1 --seed 1 --ops 2000`.
"""
