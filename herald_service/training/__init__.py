"""Fitting and evaluating probes offline. Never imported by the serving path."""
