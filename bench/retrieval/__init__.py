"""Retrieval-quality harness: public benchmarks from ../shared/data, ingested through orgmem's own
write path, scored per question category with no language model (see docs/retrieval.md)."""
