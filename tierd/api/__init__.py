"""The HTTP API (FastAPI), its errors, and the client the CLI uses."""
