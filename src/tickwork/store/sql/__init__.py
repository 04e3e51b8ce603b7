"""Shared pieces of the SQL stores: statements with :named parameters and row mapping."""
