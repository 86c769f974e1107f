"""`recipe serve`: the FastAPI app wiring codec, constraints and engine together."""
