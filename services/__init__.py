"""orgmem services: the pure core, the ports, their adapters, the API and the CLI."""
