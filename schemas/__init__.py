"""Versioned contracts of orgmem: events, rows, API requests and responses (pydantic)."""

SCHEMA_VERSION = 1
