"""The lakelog gateway (FastAPI) and CLI."""
