"""HTTP layer (FastAPI). The only package that imports FastAPI."""
