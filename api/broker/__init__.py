"""Broker services: partition writers, fetch, topic admin.

No FastAPI here, so they are testable without HTTP.
"""
