"""orgmem's Python packages for callers of a server: `orgmem.client`."""
