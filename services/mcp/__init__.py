"""orgmem over the Model Context Protocol: tools and resources over the same use cases as the HTTP
API (tools.py, server.py), served at /mcp inside the API process (http.py) or over stdio for a
desktop client (stdio.py)."""
