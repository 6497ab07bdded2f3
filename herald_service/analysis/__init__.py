"""Offline analysis for researchers: trajectory plots and steering evaluations (not imported by the server)."""
