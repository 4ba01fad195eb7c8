"""Exact fast paths for constraint sets that factor as Kronecker products."""
