"""Helpers every test package shares: waiting for a condition, one remoting call."""
