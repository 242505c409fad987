"""A deterministic synthetic organisation for the demo and the tests (see synthetic_org.generate)."""
