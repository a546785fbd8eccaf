"""The lakelog version, importable without loading the gateway (the CLI starts fast)."""

VERSION = "0.1.0"
