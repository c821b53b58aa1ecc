"""Tenancy: organizations, plans and API keys (values and rules; storage is in ``store``)."""
