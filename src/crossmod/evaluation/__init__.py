"""Metrics and reports over per-head predictions."""
