"""Connectors: read source items (mail, tickets, meetings) and emit whole documents.

A connector never writes a projection: it hands DocumentIn batches to a sink (the ingest use
case, which appends DocumentObserved events to the log)."""
